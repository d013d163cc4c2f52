package engine

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/glob"
)

// Get reads one counter. A missing counter is not an error: it reads as a
// View with Exists false and Value 0.
func (e *Engine) Get(id string) (contract.View, error) {
	if err := contract.ValidateID(id); err != nil {
		return contract.View{}, err
	}
	v := contract.View{ID: id}
	r, ok := e.acquireKeepHot(id)
	if !ok {
		return v, nil
	}
	defer r.e.unlock()
	now := e.nowNano()
	if !e.liveLocked(&r, now) {
		return v, nil
	}
	e.viewLocked(&r, now, &v)
	if h := r.e.hotOf(); h != nil {
		h.view(&v)
	}
	return v, nil
}

// viewLocked fills v from the live entry r. Caller holds r's lock.
func (e *Engine) viewLocked(r *ref, now int64, v *contract.View) {
	en := r.e
	v.Kind, v.Exists, v.Value, v.Version = en.kind(), true, en.value, en.version()
	v.UpdatedAt = time.Unix(0, en.updated).UTC()
	if en.ext() == nil {
		return
	}
	if en.ext().expires != 0 {
		v.ExpiresAt = time.Unix(0, en.ext().expires).UTC()
	}
	switch s := en.ext().state.(type) {
	case *counter.Sharded:
		v.Shards, v.ShardSlots = s.Shards(), s.Slots()
	case *counter.PN:
		v.Replicas = s.Slots()
	case *counter.HLL:
		v.Value, v.StdError, v.Precision = int64(s.Count()), s.StdError(), s.Precision()
	case *counter.Hash:
		v.Value, v.Fields = 0, s.All()
	case *counter.Float:
		v.Float = s.Text()
	case *counter.Window:
		t := time.Unix(0, now)
		v.Value, v.Window, v.Buckets = s.Sum(t), s.Spec(), s.Buckets(t)
	}
}

// HGet reads one field of a hash counter.
func (e *Engine) HGet(id, field string) (int64, bool, error) {
	if err := contract.ValidateID(id); err != nil {
		return 0, false, err
	}
	r, ok, _ := e.acquire(id, false)
	if !ok {
		return 0, false, nil
	}
	defer r.e.unlock()
	if !e.liveLocked(&r, e.nowNano()) {
		return 0, false, nil
	}
	if r.e.kind() != contract.KindHash {
		return 0, false, wrongKind(id, r.e.kind(), contract.OpHAdd)
	}
	f, ok := r.e.ext().state.(*counter.Hash).GetField(field)
	if f.IsFloat() {
		return 0, true, fieldIsFloat(id, field)
	}
	return f.Value, ok, nil
}

// fieldIsFloat is HGet's error for a float field, whose value is text:
// Get has it (View.Fields).
func fieldIsFloat(id, field string) error {
	return fmt.Errorf("%w: %q field %q holds a float: read the hash", contract.ErrNotInteger, id, field)
}

// PFCount estimates the number of distinct items in the union of the hll
// counters ids (missing ones count as empty). It returns the estimate and
// its relative standard error.
func (e *Engine) PFCount(ids ...string) (uint64, float64, error) {
	if len(ids) == 0 {
		return 0, 0, fmt.Errorf("%w: no ids", contract.ErrInvalidArgument)
	}
	if len(ids) > contract.MaxItems {
		return 0, 0, fmt.Errorf("%w: %d ids, at most %d", contract.ErrInvalidArgument, len(ids), contract.MaxItems)
	}
	for _, id := range ids {
		if err := contract.ValidateID(id); err != nil {
			return 0, 0, err
		}
	}
	var union *counter.HLL
	for _, id := range ids {
		r, ok, _ := e.acquire(id, false)
		if !ok {
			continue
		}
		var err error
		if e.liveLocked(&r, e.nowNano()) {
			if r.e.kind() != contract.KindHLL {
				err = wrongKind(id, r.e.kind(), contract.OpPFAdd)
			} else if h := r.e.ext().state.(*counter.HLL); union == nil {
				union = h.Clone()
			} else {
				err = mapErr(id, union.Merge(h))
			}
		}
		r.e.unlock()
		if err != nil {
			return 0, 0, err
		}
	}
	if union == nil {
		h, _ := counter.NewHLL(e.cfg.HLLPrecision)
		return 0, h.StdError(), nil
	}
	return union.Count(), union.StdError(), nil
}

// TTL reports a counter's remaining time to live.
func (e *Engine) TTL(id string) (ttl time.Duration, hasTTL, exists bool) {
	if contract.ValidateID(id) != nil {
		return 0, false, false
	}
	r, ok, _ := e.acquire(id, false)
	if !ok {
		return 0, false, false
	}
	defer r.e.unlock()
	now := e.nowNano()
	if !e.liveLocked(&r, now) {
		return 0, false, false
	}
	if x := r.e.ext(); x != nil && x.expires != 0 {
		return time.Duration(x.expires - now), true, true
	}
	return 0, false, true
}

// each calls fn for every live counter in shard no from slab index start
// until fn returns false; it returns the next slab index to visit, or -1 at
// the end of the shard. fn runs with the entry locked and must
// not call back into the engine.
func (e *Engine) each(no int, start int, fn func(id []byte, r *ref, now int64) bool) int {
	sh := &e.shards[no]
	now := e.nowNano()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	a := sh.ar.Load()
	for i := start; i < sh.nslab; i++ {
		en, rp := sh.at(uint32(i))
		id, ok := idOf(a, rp.Load())
		if !ok {
			continue
		}
		r := ref{sh: sh, shardNo: no, idx: uint32(i), e: en}
		en.lock()
		cont := true
		if e.liveLocked(&r, now) {
			cont = fn(id, &r, now)
		}
		en.unlock()
		if !cont {
			return i + 1
		}
	}
	return -1
}

// Scan iterates over counter ids like Redis SCAN: start with cursor 0 and
// call again with the returned cursor until it is 0. Every counter that
// exists for the whole iteration is returned exactly once. match is a Redis
// glob ("" matches everything); count is a hint for the page size.
func (e *Engine) Scan(cursor uint64, match string, count int) ([]string, uint64) {
	if count <= 0 {
		count = 10
	}
	no, start := int(cursor>>32), int(cursor&0xFFFFFFFF)
	var ids []string
	visited := 0
	for ; no < numShards; no, start = no+1, 0 {
		next := e.each(no, start, func(id []byte, _ *ref, _ int64) bool {
			visited++
			if match == "" || glob.Match(match, id) {
				ids = append(ids, string(id))
			}
			return visited < count
		})
		if next >= 0 {
			return ids, uint64(no)<<32 | uint64(next)
		}
	}
	return ids, 0
}

// Aggregate sums the values of the additive counters whose id starts with
// prefix.
func (e *Engine) Aggregate(prefix string) (contract.Aggregate, error) {
	if len(prefix) > contract.MaxIDLen {
		return contract.Aggregate{}, fmt.Errorf("%w: prefix longer than %d bytes", contract.ErrInvalidID, contract.MaxIDLen)
	}
	a := contract.Aggregate{Prefix: prefix}
	var err error
	for no := 0; no < numShards && err == nil; no++ {
		e.each(no, 0, func(id []byte, r *ref, now int64) bool {
			if !strings.HasPrefix(string(id), prefix) || !r.e.kind().Additive() {
				return true
			}
			v := r.e.value
			if r.e.kind() == contract.KindWindow {
				v = r.e.ext().state.(*counter.Window).Sum(time.Unix(0, now))
			}
			if a.Value, err = counter.AddInt64(a.Value, v); err != nil {
				err = fmt.Errorf("%w: sum of %q*", contract.ErrOverflow, prefix)
				return false
			}
			a.Count++
			return true
		})
	}
	return a, err
}

// Len returns the number of live counters (counters whose TTL passed may be
// counted until they are expired).
func (e *Engine) Len() int { return int(e.keys.Load()) }

// FlushAll deletes every counter.
func (e *Engine) FlushAll(ctx context.Context, wo contract.WriteOptions) error {
	if err := e.checkWrite(); err != nil {
		return err
	}
	e.gate.RLock()
	for no := 0; no < numShards; no++ {
		e.each(no, 0, func(_ []byte, r *ref, _ int64) bool {
			e.clearLocked(r)
			return true
		})
	}
	e.gate.RUnlock()
	if e.durability(wo) == contract.Sync {
		return e.waitDurable(ctx)
	}
	return nil
}

// Stats returns counters for INFO and metrics.
func (e *Engine) Stats() contract.Stats {
	s := contract.Stats{
		Keys:          e.Len(),
		Expires:       int(e.expires.Load()),
		Flushes:       e.fl.flushes.Load(),
		FlushFailures: e.fl.failures.Load(),
		IdemRecords:   e.idem.size(),
	}
	if t := e.fl.lastFlush.Load(); t != 0 {
		s.LastFlush = time.Unix(0, t)
	}
	s.Ops = e.ops.load() + e.hot.ops()
	for i := range e.shards {
		s.DirtyKeys += int(e.shards[i].ndirty.Load())
	}
	d := e.Disk()
	s.Disk = &d
	return s
}

// Ready returns nil while the engine serves requests and its last flush
// succeeded.
func (e *Engine) Ready() error {
	if err := e.checkOpen(); err != nil {
		return err
	}
	if err := e.disk.err(); err != nil {
		return err
	}
	if p := e.fl.lastErr.Load(); p != nil {
		return *p
	}
	return nil
}
