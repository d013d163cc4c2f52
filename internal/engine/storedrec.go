package engine

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/cockroachdb/pebble"
	"github.com/counterd/counterd/internal/contract"
)

// Stored records: small named values a cluster node keeps beside the
// counters they describe — the idempotency records it received from peers
// with the states they protect, and its own records with what only the
// cluster knows (which node applied a mutation, what to take back). The
// engine does not interpret them: it writes them in the same flush batch
// (one Pebble batch, fsynced) as the counter changes merged or applied
// before them, reads them back when the node restarts, and purges them
// after IdempotencyRetention like its own idempotency records. Stored under
// 'r' + key; the value is the creation time (8 bytes, big endian unix ns)
// followed by the data.
const prefixStored byte = 'r'

// StoredRecord is one record a cluster node keeps in the engine.
type StoredRecord struct {
	Key     string // unique name chosen by the caller, 1..1024 bytes
	Created int64  // unix ns; the record is purged once it is older than the retention
	Data    []byte // nil deletes the record
}

func storedKey(k string) []byte { return append([]byte{prefixStored}, k...) }

// maxStoredKeyLen bounds a stored record's key.
const maxStoredKeyLen = 1024

func checkStored(recs []StoredRecord) error {
	for _, r := range recs {
		if r.Key == "" || len(r.Key) > maxStoredKeyLen {
			return fmt.Errorf("%w: stored record key must be 1..%d bytes", contract.ErrInvalidArgument, maxStoredKeyLen)
		}
	}
	return nil
}

// MergeRecords is Merge that also stores the records then returns: then
// runs after the states are merged (it may read them, e.g. with Export)
// and before any flush can take them, so what it returns reaches disk in
// the same batch as the merged states (with Sync, before MergeRecords
// returns). then may be nil; it must not call back into the engine's
// writes (Apply, Merge, ...): only Export and reads. With no states it
// stores what then returns.
func (e *Engine) MergeRecords(ctx context.Context, states []State, wo contract.WriteOptions, then func() []StoredRecord) (changed int, err error) {
	if err := e.checkWrite(); err != nil {
		return 0, err
	}
	in, err := e.checkStates(states)
	if err != nil {
		return 0, err
	}
	e.gate.RLock()
	for i := range states {
		c, merr := e.mergeOne(&states[i], &in[i], false)
		if merr != nil {
			e.gate.RUnlock()
			return changed, merr
		}
		if c {
			changed++
		}
	}
	var recs []StoredRecord
	if then != nil {
		recs = then()
	}
	if err := checkStored(recs); err != nil {
		e.gate.RUnlock()
		return changed, err
	}
	e.addStoredLocked(recs)
	e.gate.RUnlock()
	if e.durability(wo) == contract.Sync {
		if err := e.waitDurable(ctx); err != nil {
			return changed, err
		}
	}
	return changed, nil
}

// PutRecords stores recs with the next flush (with Sync, before it
// returns); a record with nil Data is deleted.
func (e *Engine) PutRecords(ctx context.Context, recs []StoredRecord, wo contract.WriteOptions) error {
	_, err := e.MergeRecords(ctx, nil, wo, func() []StoredRecord { return recs })
	return err
}

// addStoredLocked queues recs for the next flush. Caller holds e.gate
// (shared).
func (e *Engine) addStoredLocked(recs []StoredRecord) {
	if len(recs) == 0 {
		return
	}
	t := &e.idem
	t.mu.Lock()
	t.stored = append(t.stored, recs...)
	t.mu.Unlock()
}

func (t *idemTable) takeStored() []StoredRecord {
	t.mu.Lock()
	s := t.stored
	t.stored = nil
	t.mu.Unlock()
	return s
}

func (t *idemTable) requeueStored(recs []StoredRecord) {
	t.mu.Lock()
	t.stored = append(recs, t.stored...)
	t.mu.Unlock()
}

// writeStored adds recs to b (in order: a later write of a key wins).
func writeStored(b *pebble.Batch, recs []StoredRecord) error {
	for _, r := range recs {
		var err error
		if r.Data == nil {
			err = b.Delete(storedKey(r.Key), nil)
		} else {
			v := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(r.Data)), uint64(r.Created))
			err = b.Set(storedKey(r.Key), append(v, r.Data...), nil)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func decodeStored(k, v []byte) (StoredRecord, bool) {
	if len(v) < 8 {
		return StoredRecord{}, false
	}
	return StoredRecord{Key: strings.Clone(string(k[1:])), Created: int64(binary.BigEndian.Uint64(v)), Data: append([]byte{}, v[8:]...)}, true
}

// StoredRecords calls fn with every stored record on disk created at or
// after since (unix ns). Records queued for the next flush are not seen.
func (e *Engine) StoredRecords(since int64, fn func(StoredRecord)) error {
	if err := e.checkOpen(); err != nil {
		return err
	}
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixStored}, UpperBound: []byte{prefixStored + 1}})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		r, ok := decodeStored(it.Key(), it.Value())
		if !ok || r.Created < since {
			continue
		}
		fn(r)
	}
	return it.Close()
}

// purgeStored deletes stored records created before cutoff (and malformed
// ones).
func (e *Engine) purgeStored(cutoff int64) error {
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixStored}, UpperBound: []byte{prefixStored + 1}})
	if err != nil {
		return err
	}
	b := e.db.NewBatch()
	defer b.Close()
	for it.First(); it.Valid(); it.Next() {
		if r, ok := decodeStored(it.Key(), it.Value()); !ok || r.Created < cutoff {
			_ = b.Delete(it.Key(), nil)
		}
	}
	if err := it.Close(); err != nil {
		return err
	}
	if b.Empty() {
		return nil
	}
	return b.Commit(pebble.NoSync)
}
