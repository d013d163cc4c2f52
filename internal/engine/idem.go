package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/idem"
)

// Idempotency: a mutation with a key records its results (package idem
// runs the claim, replay and record; this file is the engine's store of
// records). The record is written to Pebble in the same batch as the state
// it produced (Commit holds e.gate while it applies and records), held in
// memory while recent (bounded by Config.IdempotencyMemory, oldest flushed
// records evicted first) and read back from Pebble after that, until
// Config.IdempotencyRetention passes. A claim is the in-memory inflight
// entry: keys are claimed by one process only.

// MaxIdempotencyKeyLen bounds an idempotency key.
const MaxIdempotencyKeyLen = idem.MaxKeyLen

type idemRec struct {
	IdemRecord      // Key set; IDs: the ids the mutation wrote (IdemRecords)
	flushed    bool // on disk; guarded by idemTable.mu
}

type idemCall struct {
	claim *IdemRecord
	done  chan struct{}
}

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

// encode is r's stored form (the key is Pebble's).
func (r *idemRec) encode() []byte {
	rec := r.IdemRecord
	rec.Key = ""
	return rec.Encode()
}

func decodeIdem(key string, b []byte) (*idemRec, error) {
	d, err := DecodeIdemRecord(b)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", key, err)
	}
	d.Key = key
	return &idemRec{IdemRecord: d, flushed: true}, nil
}

// addLocked remembers r and evicts the oldest flushed records over the bound.
func (t *idemTable) addLocked(r *idemRec) {
	t.recs[r.Key] = r
	t.order = append(t.order, r)
	t.evictLocked()
}

func (t *idemTable) evictLocked() {
	n := 0
	for len(t.recs) > t.max && n < len(t.order) && t.order[n].flushed {
		if t.recs[t.order[n].Key] == t.order[n] {
			delete(t.recs, t.order[n].Key)
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
	if err := idem.ValidateKey(k); err != nil {
		return fmt.Errorf("%w: %v", contract.ErrInvalidArgument, err)
	}
	return nil
}

// applyIdempotent applies ops once per key. Ops are validated.
func (e *Engine) applyIdempotent(ctx context.Context, ops []contract.Op, wo contract.WriteOptions, batch bool) ([]contract.Result, error) {
	key := wo.IdempotencyKey
	if err := ValidateIdempotencyKey(key); err != nil {
		return nil, err
	}
	s := &idemStore{e: e, ops: ops, batch: batch}
	res, err := idem.Do(ctx, s, idem.Request{Key: key, FP: Fingerprint(ops), Now: e.nowNano()}, nil)
	if err != nil {
		return nil, err
	}
	if s.applied {
		e.ops.add(len(ops))
	}
	if e.durability(wo) == contract.Sync {
		// A replayed first attempt may have been async and not yet on disk.
		if err := e.waitDurable(ctx); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// idemStore is one keyed request's idem.Store in the engine: the
// in-memory table in front of Pebble.
type idemStore struct {
	e       *Engine
	ops     []contract.Op
	batch   bool
	applied bool
}

// Claim returns the key's record (in memory, else on disk) or claims it.
func (s *idemStore) Claim(ctx context.Context, c *IdemRecord) (*IdemRecord, error) {
	e, t, key := s.e, &s.e.idem, c.Key
	t.mu.Lock()
	if r := t.recs[key]; r != nil {
		if !r.Expired(e.nowNano(), e.cfg.IdempotencyRetention) {
			t.mu.Unlock()
			return &r.IdemRecord, nil
		}
		delete(t.recs, key)
	}
	if call := t.inflight[key]; call != nil {
		t.mu.Unlock()
		return call.claim, nil
	}
	t.inflight[key] = &idemCall{claim: c, done: make(chan struct{})}
	t.mu.Unlock()

	r, err := e.readIdem(key)
	if err != nil || (r != nil && !r.Expired(e.nowNano(), e.cfg.IdempotencyRetention)) {
		if r != nil && err == nil {
			t.mu.Lock()
			t.addLocked(r)
			t.mu.Unlock()
		}
		s.finish(c)
		if err != nil {
			return nil, err
		}
		return &r.IdemRecord, nil
	}
	return nil, nil
}

// Wait waits for the request holding held to finish.
func (s *idemStore) Wait(ctx context.Context, held *IdemRecord) error {
	t := &s.e.idem
	t.mu.Lock()
	call := t.inflight[held.Key]
	t.mu.Unlock()
	if call == nil || call.claim != held {
		return nil
	}
	select {
	case <-call.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Commit applies and records under the gate, so that the record is in the
// flush batch that holds the state it produced.
func (s *idemStore) Commit(ctx context.Context, c *IdemRecord) ([]contract.Result, error) {
	e, t, ops := s.e, &s.e.idem, s.ops
	defer s.finish(c)
	e.gate.RLock()
	defer e.gate.RUnlock()
	res := make([]contract.Result, len(ops))
	var err error
	if len(ops) == 1 && ops[0].Type != contract.OpPFMerge {
		if err = e.applySingle(&ops[0], &res[0]); err != nil && s.batch {
			err = &contract.BatchError{Index: 0, Err: err}
		}
	} else {
		err = e.applyMulti(ops, res, s.batch)
	}
	if err != nil {
		return nil, err
	}
	s.applied = true
	r := &idemRec{IdemRecord: c.Done(res)}
	r.IDs = opsIDs(ops)
	t.mu.Lock()
	t.addLocked(r)
	t.pending = append(t.pending, r)
	t.mu.Unlock()
	return res, nil
}

// Release ends claim c (nothing was applied under it).
func (s *idemStore) Release(ctx context.Context, c *IdemRecord) error {
	s.finish(c)
	return nil
}

// finish drops claim c from the inflight table and wakes its waiters.
func (s *idemStore) finish(c *IdemRecord) {
	t := &s.e.idem
	t.mu.Lock()
	call := t.inflight[c.Key]
	if call == nil || call.claim != c {
		t.mu.Unlock()
		return
	}
	delete(t.inflight, c.Key)
	t.mu.Unlock()
	close(call.done)
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
		if r.Created < cutoff && r.flushed {
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
		if err != nil || r.Created < cutoff {
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
func opsIDs(ops []contract.Op) []string {
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
		if err != nil || r.Created < since {
			continue
		}
		fn(r.IdemRecord)
	}
	return it.Close()
}
