package node

import (
	"context"
	"encoding/binary"
	"sync"

	"github.com/cespare/xxhash/v2"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
)

// digestCache keeps the anti-entropy digest of each local state, keyed by
// the state's Meta (kind, version, update time, expiry: every local write
// moves the version and the time), so a round re-encodes and re-hashes
// only the states written since the last one, on the sender (antiEntropy)
// and on the receiver (serveDigest) alike. Every merge, merge with
// records and drop through the node's store (replication, handoff,
// anti-entropy repairs, read repair) also invalidates its ids, whatever
// their Meta shows. Every digestRebuildRounds-th round recomputes every
// digest whatever the cache holds.
//
// A digest is computed from an export that may precede a concurrent
// write: begin returns the invalidation generation the computation
// started at, and put keeps the digest only if its id was not
// invalidated since (an invalidation comes after its write). Entries are
// keyed by the id's 64-bit hash and hold no id: about 60 bytes a state.
type digestCache struct {
	mu       sync.Mutex
	m        map[uint64]digestEntry
	gen      uint64 // invalidations so far
	round    uint64 // anti-entropy rounds so far
	inflight int    // computations between begin and end
	// settled is when the last round began (unix ns, the store's clock;
	// at first the node's creation): a state updated after it is still
	// being replicated (settling).
	settled int64
}

type digestEntry struct {
	meta     uint64 // hash of the state's Meta; 0: invalidated
	ver, sum uint64 // the digest item's
	stamp    uint64 // invalidated: the generation; else the round it was last used in
}

func (c *digestCache) init(now int64) { c.m, c.settled = map[uint64]digestEntry{}, now }

// metaKey hashes a state's Meta (never 0: 0 marks an invalidated entry).
func metaKey(m engine.StateMeta) uint64 {
	var b [1 + 3*binary.MaxVarintLen64]byte
	k := append(b[:0], byte(m.Kind))
	k = binary.AppendUvarint(k, m.Version)
	k = binary.AppendVarint(k, m.UpdatedAt)
	k = binary.AppendVarint(k, m.ExpiresAt)
	return xxhash.Sum64(k) | 1
}

// begin starts a computation: its result may be put with the returned
// generation. end must follow.
func (c *digestCache) begin() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inflight++
	return c.gen
}

func (c *digestCache) end() {
	c.mu.Lock()
	c.inflight--
	c.mu.Unlock()
}

// get returns id's cached digest if it was computed from a state with
// Meta m.
func (c *digestCache) get(id string, m engine.StateMeta) (digestItem, bool) {
	h, k := xxhash.Sum64String(id), metaKey(m)
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[h]
	if !ok || e.meta != k {
		return digestItem{}, false
	}
	e.stamp = c.round
	c.m[h] = e
	return digestItem{ID: id, Version: e.ver, Sum: e.sum}, true
}

// put caches it, computed from an export with Meta m by a computation
// that began at since, unless its id was invalidated since.
func (c *digestCache) put(m engine.StateMeta, it digestItem, since uint64) {
	h := xxhash.Sum64String(it.ID)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[h]; ok && e.meta == 0 && e.stamp > since {
		return
	}
	c.m[h] = digestEntry{meta: metaKey(m), ver: it.Version, sum: it.Sum, stamp: c.round}
}

// invalidate drops the digests of ids (after a write to them).
func (c *digestCache) invalidate(ids []string) {
	if len(ids) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for _, id := range ids {
		c.m[xxhash.Sum64String(id)] = digestEntry{stamp: c.gen}
	}
}

// nextRound starts an anti-entropy round at now; it reports whether the
// round recomputes every digest, and when the previous round began (the
// round leaves out the states updated since: settling).
func (c *digestCache) nextRound(now int64) (full bool, prev int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.round++
	prev, c.settled = c.settled, now
	return c.round%digestRebuildRounds == 0, prev
}

// lastRound is when the last round began: a receiver of digests leaves
// out the states updated since (settling).
func (c *digestCache) lastRound() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.settled
}

// prune ends a round: it forgets the digests no round used since the one
// before (states gone or no longer shared), and the invalidations no
// computation in flight can need.
func (c *digestCache) prune() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for h, e := range c.m {
		if e.meta == 0 && c.inflight == 0 || e.meta != 0 && e.stamp+1 < c.round {
			delete(c.m, h)
		}
	}
}

// digestRebuildRounds: every this many anti-entropy rounds, every digest
// is recomputed from the state (a backstop for a write the cache missed).
const digestRebuildRounds = 12

// digestFor returns the digest of id's local state (ok false when there
// is none), from the cache when the state's Meta is the cached one.
func (n *Node) digestFor(id string, m engine.StateMeta, since uint64) (digestItem, bool, error) {
	if it, ok := n.digests.get(id, m); ok {
		return it, true, nil
	}
	st, ok, err := n.export(id)
	if !ok || err != nil {
		return digestItem{}, false, err
	}
	it := digestOf(st)
	n.digests.put(st.Meta(), it, since)
	return it, true, nil
}

// invalidatingStore is the node's Store: its merges and drops invalidate
// the digests of the ids they touch (digestCache).
type invalidatingStore struct {
	Store
	c *digestCache
}

func (s invalidatingStore) Merge(ctx context.Context, states []State, wo contract.WriteOptions) (int, error) {
	defer s.c.invalidate(stateIDs(states))
	return s.Store.Merge(ctx, states, wo)
}

func (s invalidatingStore) MergeRecords(ctx context.Context, states []State, wo contract.WriteOptions, then func() []engine.StoredRecord) (int, error) {
	defer s.c.invalidate(stateIDs(states))
	return s.Store.MergeRecords(ctx, states, wo, then)
}

func (s invalidatingStore) Drop(ctx context.Context, id string, version uint64) (bool, error) {
	defer s.c.invalidate([]string{id})
	return s.Store.Drop(ctx, id, version)
}
