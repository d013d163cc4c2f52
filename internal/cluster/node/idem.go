package node

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
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
// fence pulls their records). Origin is the node that applied it, and Undo
// the adds it made into its own pn/sharded slots: what it takes back if the
// mutation turns out to have been applied twice (see put).
type idemRecord struct {
	engine.IdemRecord
	Origin string      `json:"origin,omitempty"`
	Undo   []engine.Op `json:"undo,omitempty"`
	// Wrote has, per owner-replicated id the mutation wrote, versions
	// that contain the write (see contains): the write's own, then the
	// floor of each epoch whose owner's fence found it.
	Wrote map[string][]uint64 `json:"wrote,omitempty"`
}

// A record of an owner-replicated id may be replayed only where the
// write it records is in the id's state: an old owner's write that no
// quorum acknowledged is lost when a newer epoch wins, and replaying its
// record would acknowledge a lost write. A state contains the write when
// it is of the same epoch as one of Wrote[id] and at least that version:
// within an epoch only its claimant writes, so versions of one epoch are
// one line of history. Records received from peers are kept only if the
// local state (after merging what came with them) contains their writes;
// an owner's fence re-checks the records of the ids it claims, adds its
// new epoch's floor to those it keeps (its writes in that epoch descend
// from the fenced state) and drops the others.

// maxWrote bounds the versions a record keeps per id (the latest epochs).
const maxWrote = 4

// contains reports whether version (the local state's) contains a write
// recorded at one of ws.
func contains(version uint64, ws []uint64) bool {
	for _, w := range ws {
		if epochOf(version) == epochOf(w) && version >= w {
			return true
		}
	}
	return false
}

// addWrote returns ws with w added (kept sorted, at most maxWrote, the
// highest).
func addWrote(ws []uint64, w uint64) []uint64 {
	if slices.Contains(ws, w) {
		return ws
	}
	out := append(slices.Clone(ws), w)
	slices.Sort(out)
	return out[max(0, len(out)-maxWrote):]
}

// before orders two applications of one mutation: the earlier one stands.
func (r *idemRecord) before(o *idemRecord) bool {
	if r.Created != o.Created {
		return r.Created < o.Created
	}
	return r.Origin < o.Origin
}

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
	mu     sync.Mutex            // guards recs, byID, order, undone
	recs   map[idemID]idemRecord // by key and fingerprint
	byID   map[string][]idemID   // records by counter id
	order  []idemID              // insertion order, for eviction
	undone map[idemID]bool       // this node's duplicates already taken back
}

func (c *idemCache) init() {
	c.recs = map[idemID]idemRecord{}
	c.byID = map[string][]idemID{}
	c.undone = map[idemID]bool{}
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

// put stores recs. Two records of one key and fingerprint from different
// nodes are one mutation applied twice: its first node died (or was cut
// off) before the record reached the node that took the client's retry.
// The earlier application stands (before): its record is kept, and
// shipped from then on. put returns this node's own records that lost,
// once each, for the caller to take their adds back (undoDuplicates);
// owner-replicated kinds need nothing (the later owner's epoch wins).
func (c *idemCache) put(recs []idemRecord, self string) (lost []idemRecord) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range recs {
		k := idemID{r.Key, r.FP}
		cur, ok := c.recs[k]
		if !ok {
			c.order = append(c.order, k)
			c.recs[k] = r
			c.indexLocked(k, r.IDs)
			continue
		}
		if cur.Origin == r.Origin || cur.Origin == "" || r.Origin == "" {
			// The same application (or a peer that does not say): keep
			// the latest epoch it was found in.
			if len(r.Wrote) > 0 {
				wrote := maps.Clone(cur.Wrote)
				if wrote == nil {
					wrote = map[string][]uint64{}
				}
				for id, ws := range r.Wrote {
					for _, w := range ws {
						wrote[id] = addWrote(wrote[id], w)
					}
				}
				cur.Wrote = wrote
				c.recs[k] = cur
			}
			continue
		}
		loser := r
		if r.before(&cur) {
			loser = cur
			c.recs[k] = r
			c.indexLocked(k, r.IDs)
		}
		if loser.Origin == self && len(loser.Undo) > 0 && !c.undone[k] {
			c.undone[k] = true
			lost = append(lost, loser)
		}
	}
	for len(c.order) > idemCacheMax {
		c.evictLocked(c.order[0])
		c.order = c.order[1:]
	}
	return lost
}

// rebase moves r's writes to the epochs claimed (keep), or drops r.
func (c *idemCache) rebase(r idemRecord, keep bool, epochs map[string]uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := idemID{r.Key, r.FP}
	cur, ok := c.recs[k]
	if !ok || cur.Origin != r.Origin {
		return
	}
	if !keep {
		c.evictLocked(k)
		c.order = slices.DeleteFunc(c.order, func(x idemID) bool { return x == k })
		return
	}
	wrote := maps.Clone(cur.Wrote)
	for id := range wrote {
		if e, ok := epochs[id]; ok && e > 0 {
			wrote[id] = addWrote(wrote[id], epochFloor(e))
		}
	}
	cur.Wrote = wrote
	c.recs[k] = cur
}

func (c *idemCache) indexLocked(k idemID, ids []string) {
	for _, id := range ids {
		if !slices.Contains(c.byID[id], k) {
			c.byID[id] = append(c.byID[id], k)
		}
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
	delete(c.undone, k)
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

// newIdemRecord records the results of keyed ops that node applied,
// unless they are themselves a replay.
func newIdemRecord(node, key string, fp uint64, ops []engine.Op, res []engine.Result) *idemRecord {
	if key == "" || len(res) == 0 || res[0].Replayed {
		return nil
	}
	r := &idemRecord{
		IdemRecord: engine.IdemRecord{Key: key, FP: fp, IDs: opIDs(ops), Results: slices.Clone(res), Created: time.Now().UnixNano()},
		Origin:     node,
	}
	for i := range ops {
		switch {
		case isCRDT(res[i].Kind):
			if ops[i].Type == engine.OpAdd && ops[i].Delta != 0 {
				r.Undo = append(r.Undo, engine.Op{Type: engine.OpAdd, ID: ops[i].ID, Kind: res[i].Kind, Delta: -ops[i].Delta})
			}
		default:
			if r.Wrote == nil {
				r.Wrote = map[string][]uint64{}
			}
			if ws := r.Wrote[ops[i].ID]; len(ws) == 0 || ws[0] < res[i].Version {
				r.Wrote[ops[i].ID] = []uint64{res[i].Version} // the id's last write
			}
		}
	}
	return r
}

// containedRecords returns the records of recs whose owner-replicated
// writes are all in this node's states.
func (n *Node) containedRecords(recs []idemRecord) []idemRecord {
	out := recs[:0:0]
	for _, r := range recs {
		if n.holdsWrites(r.Wrote) {
			out = append(out, r)
		}
	}
	return out
}

func (n *Node) holdsWrites(wrote map[string][]uint64) bool {
	for id, ws := range wrote {
		st, ok, err := n.store.Export(id)
		if err != nil || !ok || !contains(st.Version, ws) {
			return false
		}
	}
	return true
}

// putReceived stores records received from a peer, keeping only those
// whose writes this node holds (call after merging the states that came
// with them), and takes back this node's duplicates among them.
func (n *Node) putReceived(ctx context.Context, recs []idemRecord) {
	if len(recs) > 0 {
		n.putRecords(ctx, n.containedRecords(recs))
	}
}

// recheckRecords runs when this node's fence claimed epoch epochs[id] for
// each id: records of those ids whose writes the fenced state holds move
// to the new epoch, the others are dropped.
func (n *Node) recheckRecords(ids []string, epochs map[string]uint32) {
	for _, r := range n.idem.forIDs(ids, time.Time{}) {
		if len(r.Wrote) == 0 {
			continue
		}
		keep := n.holdsWrites(r.Wrote)
		n.idem.rebase(r, keep, epochs)
	}
}

// undoKeyPrefix starts the idempotency key of a taken-back add.
const undoKeyPrefix = "counterd-undo-"

// putRecords stores records received from peers and takes back this
// node's duplicates among them.
func (n *Node) putRecords(ctx context.Context, recs []idemRecord) {
	if lost := n.idem.put(recs, n.self); len(lost) > 0 {
		n.undoDuplicates(ctx, lost)
	}
}

// undoDuplicates takes back the pn/sharded adds of this node's records
// that lost to an earlier application of the same mutation elsewhere: a
// negative add into this node's own slot, once (under an idempotency key
// derived from the record, so a retry after a crash replays), pushed like
// any add.
func (n *Node) undoDuplicates(ctx context.Context, lost []idemRecord) {
	for _, r := range lost {
		key := fmt.Sprintf("%s%016x-%016x", undoKeyPrefix, xxhash.Sum64String(r.Key), r.FP)
		ops := r.Undo
		res, err := n.store.ApplyBatch(ctx, ops, engine.WriteOptions{Durability: engine.Async, IdempotencyKey: key})
		if err != nil {
			n.log.Warn("cluster: taking back a duplicate keyed add", "key", r.Key, "err", err)
			continue
		}
		n.metrics.duplicates.Inc()
		n.log.Info("cluster: took back a keyed add applied twice", "key", r.Key, "ids", r.IDs)
		var changes []change
		for i := range res {
			changes = append(changes, change{id: ops[i].ID})
		}
		n.dirty.mark(changes)
	}
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
func (s *stripes) rlock(ids []string) func() { return s.take(ids, true) }

// lock locks the stripes of ids exclusively, in index order; it returns
// the unlock.
func (s *stripes) lock(ids []string) func() { return s.take(ids, false) }

func (s *stripes) take(ids []string, shared bool) func() {
	idx := make([]int, 0, len(ids))
	for _, id := range ids {
		idx = append(idx, stripeOf(id))
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	for _, i := range idx {
		if shared {
			s[i].RLock()
		} else {
			s[i].Lock()
		}
	}
	return func() {
		for _, i := range idx {
			if shared {
				s[i].RUnlock()
			} else {
				s[i].Unlock()
			}
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

// idemAnnounceFor bounds how long a node that (re)started keeps offering
// the records it found on disk to members that have not taken them.
const idemAnnounceFor = time.Minute

// reloadRecords puts the records of the keyed pn/sharded adds this node
// applied before it (re)started (from the engine's table on disk) into the cache,
// and returns them for announceRecords. A mutation it applied just before
// a crash, whose record never reached another node, may have been retried
// and applied elsewhere meanwhile: offering the record lets that node see
// it applied the mutation second and take its adds back (put). The records
// carry no Undo (the engine does not store the ops), so the other order
// (this node's application being the later one) is not undone here.
func (n *Node) reloadRecords() []idemRecord {
	var recs []idemRecord
	err := n.store.IdemRecords(time.Now().Add(-idemCacheRetention).UnixNano(), func(r engine.IdemRecord) {
		// Only pn/sharded records: a write of another kind on this disk
		// may have been lost to a newer owner while this node was away,
		// and its record must not be replayed (see contains).
		crdt := !slices.ContainsFunc(r.Results, func(res engine.Result) bool { return !isCRDT(res.Kind) })
		if len(r.IDs) > 0 && crdt && !strings.HasPrefix(r.Key, undoKeyPrefix) {
			recs = append(recs, idemRecord{IdemRecord: r, Origin: n.self})
		}
	})
	if err != nil {
		n.log.Warn("cluster: reading idempotency records", "err", err)
	}
	if len(recs) > idemCacheMax {
		slices.SortFunc(recs, func(a, b idemRecord) int { return cmp.Compare(a.Created, b.Created) })
		recs = recs[len(recs)-idemCacheMax:]
	}
	n.idem.put(recs, n.self)
	return recs
}

// announceRecords sends recs to every other member of the ring, retrying
// those that fail, until each member has taken them or idemAnnounceFor
// has passed.
func (n *Node) announceRecords(recs []idemRecord) {
	if len(recs) == 0 {
		return
	}
	done := map[string]bool{}
	deadline := time.Now().Add(idemAnnounceFor)
	for time.Now().Before(deadline) {
		all := n.joined.Load()
		for _, peer := range n.ring.Snapshot().Nodes() {
			if peer == n.self || done[peer] {
				continue
			}
			ok := true
			for chunk := range slices.Chunk(recs, maxStatesPerCall) {
				var resp replicateResponse
				err := n.call(n.ctx, peer, "Replicate", &replicateRequest{header: n.header(false), Idem: chunk}, &resp)
				if err == nil {
					err = resp.Err.err(peer, nil)
				}
				if err != nil {
					ok = false
					break
				}
			}
			done[peer], all = ok, all && ok
		}
		if all {
			n.log.Info("cluster: offered the idempotency records found on disk", "records", len(recs), "to", len(done))
			return
		}
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}
