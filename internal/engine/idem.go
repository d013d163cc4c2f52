package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble"
)

// Idempotency: a mutation with a key records its results. The record is
// written to Pebble in the same batch as the state it produced (see
// Engine.gate), held in memory while recent (bounded by
// Config.IdempotencyMemory, oldest flushed records evicted first) and read
// back from Pebble after that, until Config.IdempotencyRetention passes.

// MaxIdempotencyKeyLen bounds an idempotency key.
const MaxIdempotencyKeyLen = 255

type idemRec struct {
	key     string
	fp      uint64
	created int64    // unix ns
	ids     []string // the ids the mutation wrote (IdemRecords)
	results []Result
	flushed bool // on disk; guarded by idemTable.mu
}

type idemCall struct{ done chan struct{} }

type idemTable struct {
	mu       sync.Mutex
	max      int
	recs     map[string]*idemRec  // guarded by mu
	order    []*idemRec           // insertion order for eviction, guarded by mu
	inflight map[string]*idemCall // keys being applied now, guarded by mu
	pending  []*idemRec           // not yet on disk, guarded by mu
	stored   []StoredRecord       // stored records not yet on disk, guarded by mu (storedrec.go)
}

func (t *idemTable) init(max int) {
	t.max = max
	t.recs = make(map[string]*idemRec)
	t.inflight = make(map[string]*idemCall)
}

func idemKey(k string) []byte { return append([]byte{prefixIdem}, k...) }

func (r *idemRec) encode() []byte {
	rec := IdemRecord{FP: r.fp, Created: r.created, IDs: r.ids, Results: r.results}
	return rec.Encode()
}

func decodeIdem(key string, b []byte) (*idemRec, error) {
	d, err := DecodeIdemRecord(b)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", key, err)
	}
	return &idemRec{key: key, fp: d.FP, created: d.Created, ids: d.IDs, results: d.Results, flushed: true}, nil
}

// addLocked remembers r and evicts the oldest flushed records over the bound.
func (t *idemTable) addLocked(r *idemRec) {
	t.recs[r.key] = r
	t.order = append(t.order, r)
	t.evictLocked()
}

func (t *idemTable) evictLocked() {
	n := 0
	for len(t.recs) > t.max && n < len(t.order) && t.order[n].flushed {
		if t.recs[t.order[n].key] == t.order[n] {
			delete(t.recs, t.order[n].key)
		}
		n++
	}
	if n > 0 {
		t.order = append(t.order[:0], t.order[n:]...)
	}
}

func (t *idemTable) takePending() []*idemRec {
	t.mu.Lock()
	p := t.pending
	t.pending = nil
	t.mu.Unlock()
	return p
}

func (t *idemTable) requeue(recs []*idemRec) {
	t.mu.Lock()
	t.pending = append(recs, t.pending...)
	t.mu.Unlock()
}

func (t *idemTable) markFlushed(recs []*idemRec) {
	if len(recs) == 0 {
		return
	}
	t.mu.Lock()
	for _, r := range recs {
		r.flushed = true
	}
	t.evictLocked()
	t.mu.Unlock()
}

func (t *idemTable) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.recs)
}

// ValidateIdempotencyKey checks a key: 1..255 printable bytes.
func ValidateIdempotencyKey(k string) error {
	if k == "" || len(k) > MaxIdempotencyKeyLen {
		return fmt.Errorf("%w: idempotency key must be 1..%d bytes", ErrInvalidArgument, MaxIdempotencyKeyLen)
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] == 0x7f {
			return fmt.Errorf("%w: idempotency key has a control byte", ErrInvalidArgument)
		}
	}
	return nil
}

// applyIdempotent applies ops once per key. Ops are validated.
func (e *Engine) applyIdempotent(ctx context.Context, ops []Op, wo WriteOptions, batch bool) ([]Result, error) {
	key := wo.IdempotencyKey
	if err := ValidateIdempotencyKey(key); err != nil {
		return nil, err
	}
	fp := Fingerprint(ops)
	t := &e.idem
	var call *idemCall
	for call == nil {
		t.mu.Lock()
		if r := t.recs[key]; r != nil {
			t.mu.Unlock()
			if !e.idemExpired(r) {
				return e.replay(ctx, r, fp, wo)
			}
			t.mu.Lock()
			if t.recs[key] == r {
				delete(t.recs, key)
			}
		}
		if c := t.inflight[key]; c != nil {
			t.mu.Unlock()
			select {
			case <-c.done:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		call = &idemCall{done: make(chan struct{})}
		t.inflight[key] = call
		t.mu.Unlock()
	}
	defer func() {
		t.mu.Lock()
		delete(t.inflight, key)
		t.mu.Unlock()
		close(call.done)
	}()

	if r, err := e.readIdem(key); err != nil {
		return nil, err
	} else if r != nil && !e.idemExpired(r) {
		t.mu.Lock()
		t.addLocked(r)
		t.mu.Unlock()
		return e.replay(ctx, r, fp, wo)
	}

	res := make([]Result, len(ops))
	var err error
	e.gate.RLock()
	if len(ops) == 1 && ops[0].Type != OpPFMerge {
		if err = e.applySingle(&ops[0], &res[0]); err != nil && batch {
			err = &BatchError{Index: 0, Err: err}
		}
	} else {
		err = e.applyMulti(ops, res, batch)
	}
	if err == nil {
		r := &idemRec{key: key, fp: fp, created: e.nowNano(), ids: opsIDs(ops), results: res}
		t.mu.Lock()
		t.addLocked(r)
		t.pending = append(t.pending, r)
		t.mu.Unlock()
	}
	e.gate.RUnlock()
	if err != nil {
		return nil, err
	}
	e.ops.add(len(ops))
	if e.durability(wo) == Sync {
		if err := e.waitDurable(ctx); err != nil {
			return nil, err
		}
	}
	return res, nil
}

func (e *Engine) idemExpired(r *idemRec) bool {
	return e.nowNano()-r.created > int64(e.cfg.IdempotencyRetention)
}

func (e *Engine) replay(ctx context.Context, r *idemRec, fp uint64, wo WriteOptions) ([]Result, error) {
	rec := IdemRecord{FP: r.fp, Results: r.results}
	out, err := rec.Replay(r.key, fp)
	if err != nil {
		return nil, err
	}
	if e.durability(wo) == Sync {
		// The first attempt may have been async and not yet on disk.
		if err := e.waitDurable(ctx); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (e *Engine) readIdem(key string) (*idemRec, error) {
	v, closer, err := e.db.Get(idemKey(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("engine: read idempotency record: %w", err)
	}
	defer closer.Close()
	return decodeIdem(key, v)
}

// purgeIdempotency deletes records older than the retention from disk and
// memory.
func (e *Engine) purgeIdempotency() error {
	cutoff := e.nowNano() - int64(e.cfg.IdempotencyRetention)
	t := &e.idem
	t.mu.Lock()
	for k, r := range t.recs {
		if r.created < cutoff && r.flushed {
			delete(t.recs, k)
		}
	}
	t.mu.Unlock()
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixIdem}, UpperBound: []byte{prefixIdem + 1}})
	if err != nil {
		return err
	}
	b := e.db.NewBatch()
	defer b.Close()
	for it.First(); it.Valid(); it.Next() {
		r, err := decodeIdem(string(it.Key()[1:]), it.Value())
		if err != nil || r.created < cutoff {
			b.Delete(it.Key(), nil)
		}
	}
	if err := it.Close(); err != nil {
		return err
	}
	if !b.Empty() {
		if err := b.Commit(pebble.NoSync); err != nil {
			return err
		}
	}
	return e.purgeStored(cutoff)
}

// opsIDs lists the distinct ids ops write, in order of first appearance.
func opsIDs(ops []Op) []string {
	ids := make([]string, 0, len(ops))
	if len(ops) <= 16 {
		for i := range ops {
			if !slices.Contains(ids, ops[i].ID) {
				ids = append(ids, ops[i].ID)
			}
		}
		return ids
	}
	// A set past a few ops: the pipeline's batches hold thousands, where
	// the linear search was a seventh of the consumer's CPU.
	seen := make(map[string]struct{}, len(ops))
	for i := range ops {
		if _, ok := seen[ops[i].ID]; !ok {
			seen[ops[i].ID] = struct{}{}
			ids = append(ids, ops[i].ID)
		}
	}
	return ids
}

// IdemRecords calls fn with every idempotency record on disk created at or
// after since (unix ns), Key set; records written before the ids were
// stored have no IDs. A cluster node reads them when it starts, to offer
// the records of keyed writes it applied before a crash to the others.
func (e *Engine) IdemRecords(since int64, fn func(IdemRecord)) error {
	if err := e.checkOpen(); err != nil {
		return err
	}
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixIdem}, UpperBound: []byte{prefixIdem + 1}})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		r, err := decodeIdem(string(it.Key()[1:]), it.Value())
		if err != nil || r.created < since {
			continue
		}
		fn(IdemRecord{Key: r.key, FP: r.fp, Created: r.created, IDs: r.ids, Results: r.results})
	}
	return it.Close()
}
