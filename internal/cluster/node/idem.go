package node

import (
	"slices"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/counterd/counterd/internal/engine"
)

// The engine's idempotency table is local to a node. So that a keyed retry
// reaching a new owner after a failover replays instead of applying again,
// the owner also keeps each keyed mutation's results in this cache, every
// push of states carries the recent records of their ids (with the write
// quorum for sync writes), a fence pulls all records of the ids it fences,
// and an owner checks the cache before applying a keyed op. Records live in
// memory: a record is lost when all nodes holding it restart.

// idemRecord is the results of one keyed mutation (one op, or the part of a
// batch one owner applied), identified by key and the ops' fingerprint, in
// the record format every backend shares; IDs names the ids it wrote (a
// fence pulls their records).
type idemRecord = engine.IdemRecord

// Defaults of the record cache.
const (
	idemCacheMax       = 100000
	idemCacheRetention = 24 * time.Hour
	// idemPushWindow: pushes carry the records younger than this (a fence
	// pulls them all).
	idemPushWindow = time.Minute
)

type idemID struct {
	key string
	fp  uint64
}

// idemCache holds the records received from other owners, oldest evicted
// first. Safe for concurrent use.
type idemCache struct {
	mu    sync.Mutex            // guards recs, byID, order
	recs  map[idemID]idemRecord // by key and fingerprint
	byID  map[string][]idemID   // records by counter id
	order []idemID              // insertion order, for eviction
}

func (c *idemCache) init() {
	c.recs = map[idemID]idemRecord{}
	c.byID = map[string][]idemID{}
}

// forIDs returns the records of mutations that wrote one of ids, created
// after since (zero: all).
func (c *idemCache) forIDs(ids []string, since time.Time) []idemRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []idemRecord
	seen := map[idemID]bool{}
	for _, id := range ids {
		for _, k := range c.byID[id] {
			if r := c.recs[k]; !seen[k] && r.Created > since.UnixNano() {
				seen[k] = true
				out = append(out, r)
			}
		}
	}
	return out
}

func (c *idemCache) put(recs []idemRecord) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range recs {
		k := idemID{r.Key, r.FP}
		if _, ok := c.recs[k]; ok {
			continue
		}
		c.order = append(c.order, k)
		c.recs[k] = r
		for _, id := range r.IDs {
			c.byID[id] = append(c.byID[id], k)
		}
	}
	for len(c.order) > idemCacheMax {
		c.evictLocked(c.order[0])
		c.order = c.order[1:]
	}
}

func (c *idemCache) evictLocked(k idemID) {
	for _, id := range c.recs[k].IDs {
		ks := slices.DeleteFunc(c.byID[id], func(x idemID) bool { return x == k })
		if len(ks) == 0 {
			delete(c.byID, id)
		} else {
			c.byID[id] = ks
		}
	}
	delete(c.recs, k)
}

// get returns the results recorded for key and fp, marked replayed.
func (c *idemCache) get(key string, fp uint64) ([]engine.Result, bool) {
	if key == "" {
		return nil, false
	}
	c.mu.Lock()
	r, ok := c.recs[idemID{key, fp}]
	c.mu.Unlock()
	if !ok || time.Since(time.Unix(0, r.Created)) > idemCacheRetention {
		return nil, false
	}
	out, err := r.Replay(key, fp)
	return out, err == nil
}

// newIdemRecord records the results of keyed ops, unless they are
// themselves a replay.
func newIdemRecord(key string, fp uint64, ops []engine.Op, res []engine.Result) *idemRecord {
	if key == "" || len(res) == 0 || res[0].Replayed {
		return nil
	}
	return &idemRecord{Key: key, FP: fp, IDs: opIDs(ops), Results: slices.Clone(res), Created: time.Now().UnixNano()}
}

// stripes orders keyed applies against exports. A keyed apply holds its
// ids' stripes shared from the apply until its record is in the cache; an
// export holds its id's stripe exclusively. So an exported state that
// shows a keyed write always finds the write's record in the cache, and
// whatever ships the state ships the record.
type stripes [64]sync.RWMutex

func stripeOf(id string) int { return int(xxhash.Sum64String(id) % uint64(len(stripes{}))) }

// rlock locks the stripes of ids shared, in index order; it returns the
// unlock.
func (s *stripes) rlock(ids []string) func() {
	idx := make([]int, 0, len(ids))
	for _, id := range ids {
		idx = append(idx, stripeOf(id))
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	for _, i := range idx {
		s[i].RLock()
	}
	return func() {
		for _, i := range idx {
			s[i].RUnlock()
		}
	}
}

// export exports id with its stripe held exclusively.
func (n *Node) export(id string) (State, bool, error) {
	mu := &n.stripes[stripeOf(id)]
	mu.Lock()
	defer mu.Unlock()
	return n.store.Export(id)
}
