package engine

import (
	"runtime"
	"sync/atomic"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"

	"github.com/counterd/counterd/internal/quota"
)

// quotas is the engine's quota state (Config.Quotas, SetQuotas). Key
// counts change under the key's lock, only where a counter comes to life
// or dies (create, adoptLocked, load's recount, clearLocked, restore), so
// adds to existing counters never read it.
//
// next and cursor exist while SetQuotas recounts for a new file: the
// recount visits every entry under its lock in (shard, slab index) order
// and counts it in next; a change to an entry the recount has passed
// (position below cursor) is counted in next too, one it has not reached
// is seen by the recount. Once it is done, next replaces cur.
type quotas struct {
	cur    *quota.Set
	next   *quota.Set
	cursor atomic.Uint64 // shard<<32 | slab index: every entry below is counted in next
}

// quotaSet returns the engine's quota state, nil without quotas.
func (e *Engine) quotaSet() *quotas { return e.quotas.Load() }

// quotaReserveLocked counts a new key id at r against its quota, or
// refuses it (*quota.ExceededError). Caller holds r's lock and r is not
// live.
func (e *Engine) quotaReserveLocked(q *quotas, r *ref, id string) error {
	if c := q.cur.Of(id); c != nil {
		if err := c.Reserve(id); err != nil {
			return err
		}
	}
	if q.next != nil && e.quotaPassed(q, r) {
		if c := q.next.Of(id); c != nil {
			c.Add(1)
		}
	}
	return nil
}

// quotaAddLocked counts n keys (±1) at r without a check. Caller holds
// r's lock.
func (e *Engine) quotaAddLocked(q *quotas, r *ref, id string, n int64) {
	if c := q.cur.Of(id); c != nil {
		c.Add(n)
	}
	if q.next != nil && e.quotaPassed(q, r) {
		if c := q.next.Of(id); c != nil {
			c.Add(n)
		}
	}
}

// quotaPassed reports whether the recount in progress has visited r. The
// recount moves the cursor past an entry under the entry's lock, which
// the caller holds, so the answer cannot change under it.
func (e *Engine) quotaPassed(q *quotas, r *ref) bool {
	return uint64(r.shardNo)<<32|uint64(r.idx) < q.cursor.Load()
}

// idAtLocked is the id of r's entry, which its lock holder keeps in the
// slot. An arena compaction (under the shard's lock, not the entry's) may
// move it while it is read: read again until the reference and the arena
// agree.
func idAtLocked(r *ref) string {
	_, rp := r.sh.at(r.idx)
	for {
		ref := rp.Load()
		if b, ok := idOf(r.sh.ar.Load(), ref); ok && rp.Load() == ref {
			return string(b)
		}
		runtime.Gosched()
	}
}

// quotaGoneLocked gives back the key of the live entry r that is being
// deleted. Caller holds r's lock.
func (e *Engine) quotaGoneLocked(r *ref) {
	if q := e.quotaSet(); q != nil {
		e.quotaAddLocked(q, r, idAtLocked(r), -1)
	}
}

// SetQuotas makes c the engine's quotas (nil: none), as on a reload of
// the quotas file: every live key is counted again under the new file
// while writes go on, so counts stay exact. It returns once the new
// quotas are in force; the old ones apply until then.
func (e *Engine) SetQuotas(c *quota.Config) {
	e.quotaReload.Lock()
	defer e.quotaReload.Unlock()
	if c == nil {
		e.quotas.Store(nil)
		return
	}
	next := quota.NewSet(c)
	old := e.quotas.Load()
	if old == nil {
		// From no quotas: the entries recounted are counted in next
		// only, so cur is a set that counts nothing.
		old = &quotas{cur: quota.NewSet(&quota.Config{})}
	}
	q := &quotas{cur: old.cur, next: next}
	e.quotas.Store(q)
	for no := range e.shards {
		sh := &e.shards[no]
		sh.mu.Lock()
		a := sh.ar.Load()
		for i := 0; i < sh.nslab; i++ {
			en, rp := sh.at(uint32(i))
			id, ok := idOf(a, rp.Load())
			en.lock()
			if ok && en.kind() != contract.KindNone {
				if qc := next.Of(string(id)); qc != nil {
					qc.Add(1)
				}
			}
			q.cursor.Store(uint64(no)<<32 | uint64(i+1))
			en.unlock()
		}
		q.cursor.Store(uint64(no+1) << 32)
		sh.mu.Unlock()
	}
	e.quotas.Store(&quotas{cur: next})
}

// Quotas lists the usage of every quota, nil without quotas.
func (e *Engine) Quotas() []quota.Usage {
	q := e.quotaSet()
	if q == nil {
		return nil
	}
	return q.cur.Usage()
}

// checkHashFieldsLocked refuses op's new fields of the hash h (nil: a new
// hash) when the hash would pass its quota's max_hash_fields. Adds to
// existing fields pay only the lookups of their names.
func (e *Engine) checkHashFieldsLocked(op *contract.Op, h *counter.Hash) error {
	q := e.quotaSet()
	if q == nil {
		return nil
	}
	have, added := 0, 0
	if h != nil {
		have = h.Len()
	}
	var seen map[string]bool // names new to h, when op has many
	for i := range op.Fields {
		name := op.Fields[i].Name
		if h != nil {
			if _, ok := h.GetField(name); ok {
				continue
			}
		}
		dup := false
		if len(op.Fields) <= 16 {
			for j := range i {
				dup = dup || op.Fields[j].Name == name
			}
		} else {
			if seen == nil {
				seen = make(map[string]bool)
			}
			dup = seen[name]
			seen[name] = true
		}
		if !dup {
			added++
		}
	}
	if added == 0 {
		return nil
	}
	if c := q.cur.Of(op.ID); c != nil {
		return c.CheckFields(op.ID, have+added)
	}
	return nil
}

// SetExpireHook makes fn (nil: none) hear of every counter the engine
// deletes because its TTL passed (by the janitor, or by the op or read
// that found it expired), once, with the counter's id. fn runs under the
// counter's lock: it must not block or call the engine. The cluster uses
// it to give an expired key's room back to its quota's shared count.
func (e *Engine) SetExpireHook(fn func(id string)) {
	if fn == nil {
		e.expireHook.Store(nil)
		return
	}
	e.expireHook.Store(&fn)
}

// expiredLocked tells the expire hook that r's live counter expires.
// Caller holds r's lock.
func (e *Engine) expiredLocked(r *ref) {
	if fn := e.expireHook.Load(); fn != nil && r.e.kind() != contract.KindNone {
		(*fn)(idAtLocked(r))
	}
}
