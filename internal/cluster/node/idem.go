package node

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/idem"
)

// The engine's idempotency table is local to a node. So that a keyed retry
// reaching a new owner after a failover replays instead of applying again,
// the owner also keeps each keyed mutation's results in this cache, every
// push of states carries the recent records of their ids (with the write
// quorum for sync writes), a fence pulls all records of the ids it fences,
// and an owner checks the cache before applying a keyed op. A node that is
// about to apply a keyed pn/sharded add (applied by whichever node receives
// it) and finds no record also asks the id's replicas (lookupRecord).
//
// Records are kept on disk too, in the engine's stored records: a received
// record in the same flush batch as the states it came with (MergeRecords),
// so a replica that has the effect after a restart has the record, and this
// node's own records (with Origin, Undo and Wrote, which the engine's
// table lacks) with the next flush. A (re)starting node loads them before
// it joins (loadStoredRecords). Bounds: the cache holds idemCacheMax
// records, oldest evicted first (and deleted on disk); on disk a record
// also goes when it is older than the engine's idempotency retention
// (--idempotency-retention, 24 h by default); a retry is replayed from the
// cache only within idemCacheRetention.

// idemRecord is the results of one keyed mutation (one op, or the part of a
// batch one owner applied), identified by key and the ops' fingerprint, in
// the record format every backend shares; IDs names the ids it wrote (a
// fence pulls their records). Origin is the node that applied it, and Undo
// the adds it made into its own pn/sharded slots: what it takes back if the
// mutation turns out to have been applied twice (see put).
type idemRecord struct {
	engine.IdemRecord
	Origin string        `json:"origin,omitempty"`
	Undo   []contract.Op `json:"undo,omitempty"`
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

// storedKeyPrefix starts the engine stored-record keys of idempotency
// records.
const storedKeyPrefix = "idem/"

// storedKey names k's record among the engine's stored records.
func (k idemID) storedKey() string { return fmt.Sprintf("%s%016x/%s", storedKeyPrefix, k.fp, k.key) }

// storedOf is r as the engine stores it: the shared record format
// (engine.IdemRecord) with the cluster's fields in its Ext.
func storedOf(r idemRecord) engine.StoredRecord {
	rec := r.IdemRecord
	rec.Ext = r.appendExt(nil)
	return engine.StoredRecord{Key: idemID{r.Key, r.FP}.storedKey(), Created: r.Created, Data: rec.Encode()}
}

// appendExt appends the cluster's fields: origin, undo ops (id, kind,
// delta of adds), and the versions each id was written at (ids sorted).
func (r *idemRecord) appendExt(b []byte) []byte {
	b = idem.AppendString(b, r.Origin)
	b = binary.AppendUvarint(b, uint64(len(r.Undo)))
	for i := range r.Undo {
		op := &r.Undo[i]
		b = append(b, byte(op.Type), byte(op.Kind))
		b = idem.AppendString(b, op.ID)
		b = binary.AppendVarint(b, op.Delta)
	}
	if r.Wrote == nil {
		return append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(r.Wrote))+1)
	for _, id := range slices.Sorted(maps.Keys(r.Wrote)) {
		b = idem.AppendString(b, id)
		b = binary.AppendUvarint(b, uint64(len(r.Wrote[id])))
		for _, w := range r.Wrote[id] {
			b = binary.AppendUvarint(b, w)
		}
	}
	return b
}

// readExt reads what appendExt wrote into r.
func (r *idemRecord) readExt(ext []byte) error {
	d := idem.NewReader(ext)
	r.Origin = d.String()
	if n := d.Uvarint(); n > 0 && d.Err() == nil {
		if n > uint64(len(ext)) {
			return errors.New("undo length")
		}
		r.Undo = make([]contract.Op, n)
		for i := range r.Undo {
			r.Undo[i] = contract.Op{Type: contract.OpType(d.Byte()), Kind: contract.Kind(d.Byte()), ID: d.String(), Delta: d.Varint()}
		}
	}
	if n, ok := d.Len(2); ok {
		r.Wrote = make(map[string][]uint64, n)
		for range n {
			id := d.String()
			m := d.Uvarint()
			if m > uint64(len(ext)) {
				return errors.New("versions length")
			}
			ws := make([]uint64, 0, m)
			for range m {
				ws = append(ws, d.Uvarint())
			}
			r.Wrote[id] = ws
		}
	}
	return d.Done()
}

// deletedOf deletes k's stored record.
func deletedOf(k idemID) engine.StoredRecord { return engine.StoredRecord{Key: k.storedKey()} }

// decodeStored parses a stored record (the binary form, or the JSON stored
// before it); a malformed one is an error wrapping engine.ErrCorrupt,
// never a replay.
func decodeStored(s engine.StoredRecord) (idemRecord, error) {
	var r idemRecord
	if len(s.Data) > 0 && s.Data[0] == '{' {
		if err := json.Unmarshal(s.Data, &r); err != nil {
			return idemRecord{}, fmt.Errorf("%w: stored idempotency record %q: %v", engine.ErrCorrupt, s.Key, err)
		}
	} else {
		rec, err := engine.DecodeIdemRecord(s.Data)
		if err != nil {
			return idemRecord{}, fmt.Errorf("stored idempotency record %q: %w", s.Key, err)
		}
		r.IdemRecord = rec
		if err := r.readExt(rec.Ext); err != nil {
			return idemRecord{}, fmt.Errorf("%w: stored idempotency record %q: %v", engine.ErrCorrupt, s.Key, err)
		}
		r.Ext = nil
	}
	if r.Key == "" || len(r.Results) == 0 || r.Pending || (idemID{r.Key, r.FP}).storedKey() != s.Key {
		return idemRecord{}, fmt.Errorf("%w: stored idempotency record %q does not match its key or has no results", engine.ErrCorrupt, s.Key)
	}
	return r, nil
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

// put stores recs and returns, in stored, what changed for the disk
// (records added or updated, and deletions of the evicted ones). Two records of one key and fingerprint from different
// nodes are one mutation applied twice: its first node died (or was cut
// off) before the record reached the node that took the client's retry.
// The earlier application stands (before): its record is kept, and
// shipped from then on. put returns this node's own records that lost,
// once each, for the caller to take their adds back (undoDuplicates);
// owner-replicated kinds need nothing (the later owner's epoch wins).
func (c *idemCache) put(recs []idemRecord, self string) (lost []idemRecord, stored []engine.StoredRecord) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range recs {
		k := idemID{r.Key, r.FP}
		cur, ok := c.recs[k]
		if !ok {
			c.order = append(c.order, k)
			c.recs[k] = r
			c.indexLocked(k, r.IDs)
			stored = append(stored, storedOf(r))
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
				grew := !maps.EqualFunc(wrote, cur.Wrote, slices.Equal[[]uint64])
				cur.Wrote = wrote
				c.recs[k] = cur
				if grew {
					stored = append(stored, storedOf(cur))
				}
			}
			continue
		}
		loser := r
		if r.before(&cur) {
			loser = cur
			c.recs[k] = r
			c.indexLocked(k, r.IDs)
			stored = append(stored, storedOf(r))
		}
		if loser.Origin == self && len(loser.Undo) > 0 && !c.undone[k] {
			c.undone[k] = true
			lost = append(lost, loser)
		}
	}
	for len(c.order) > idemCacheMax {
		c.evictLocked(c.order[0])
		stored = append(stored, deletedOf(c.order[0]))
		c.order = c.order[1:]
	}
	return lost, stored
}

// rebase moves r's writes to the epochs claimed (keep), or drops r; it
// returns the change for the disk (ok false: none).
func (c *idemCache) rebase(r idemRecord, keep bool, epochs map[string]uint32) (engine.StoredRecord, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := idemID{r.Key, r.FP}
	cur, ok := c.recs[k]
	if !ok || cur.Origin != r.Origin {
		return engine.StoredRecord{}, false
	}
	if !keep {
		c.evictLocked(k)
		c.order = slices.DeleteFunc(c.order, func(x idemID) bool { return x == k })
		return deletedOf(k), true
	}
	wrote := maps.Clone(cur.Wrote)
	for id := range wrote {
		if e, ok := epochs[id]; ok && e > 0 {
			wrote[id] = addWrote(wrote[id], epochFloor(e))
		}
	}
	cur.Wrote = wrote
	c.recs[k] = cur
	return storedOf(cur), true
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
func (c *idemCache) get(key string, fp uint64) ([]contract.Result, bool) {
	r, ok := c.record(key, fp)
	if !ok {
		return nil, false
	}
	out, err := r.Replay(key, fp)
	return out, err == nil
}

// record returns the record of key and fp, if it is within the retention.
func (c *idemCache) record(key string, fp uint64) (idemRecord, bool) {
	if key == "" {
		return idemRecord{}, false
	}
	c.mu.Lock()
	r, ok := c.recs[idemID{key, fp}]
	c.mu.Unlock()
	if !ok || time.Since(time.Unix(0, r.Created)) > idemCacheRetention {
		return idemRecord{}, false
	}
	return r, true
}

// newIdemRecord records the results of keyed ops that node applied,
// unless they are themselves a replay.
func newIdemRecord(node, key string, fp uint64, ops []contract.Op, res []contract.Result) *idemRecord {
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
			if ops[i].Type == contract.OpAdd && ops[i].Delta != 0 {
				r.Undo = append(r.Undo, contract.Op{Type: contract.OpAdd, ID: ops[i].ID, Kind: res[i].Kind, Delta: -ops[i].Delta})
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

// mergeWithRecords merges states received from a peer (tombstoned ids
// filtered) and keeps the records that came with them whose writes this
// node then holds: in the cache, and on disk in the same flush batch as
// the states (durable per wo). It takes back this node's duplicates among
// them.
//
// The dedupe marks that came with the states (marks.go) are kept the same
// way: in the store and on disk in the same flush batch.
func (n *Node) mergeWithRecords(ctx context.Context, states []State, recs []idemRecord, marks []markGroup, wo contract.WriteOptions) (int, error) {
	states = n.tombs.filter(states)
	if len(states) == 0 && len(recs) == 0 && len(marks) == 0 {
		return 0, nil
	}
	var lost []idemRecord
	changed, err := n.store.MergeRecords(ctx, states, wo, func() []engine.StoredRecord {
		stored := n.dedupe.merge(marks, n.markNow())
		if len(recs) == 0 {
			return stored
		}
		var more []engine.StoredRecord
		lost, more = n.idem.put(n.containedRecords(recs), n.self)
		return append(stored, more...)
	})
	if len(lost) > 0 {
		n.undoDuplicates(ctx, lost)
	}
	return changed, err
}

// persist writes changes of the record cache to disk with the next flush.
func (n *Node) persist(stored []engine.StoredRecord) {
	if len(stored) == 0 {
		return
	}
	_, err := n.store.MergeRecords(n.ctx, nil, contract.WriteOptions{Durability: contract.Async}, func() []engine.StoredRecord { return stored })
	if err != nil {
		n.log.Warn("cluster: storing idempotency records", "records", len(stored), "err", err)
	}
}

// recheckRecords runs when this node's fence claimed epoch epochs[id] for
// each id: records of those ids whose writes the fenced state holds move
// to the new epoch, the others are dropped.
func (n *Node) recheckRecords(ids []string, epochs map[string]uint32) {
	var stored []engine.StoredRecord
	for _, r := range n.idem.forIDs(ids, time.Time{}) {
		if len(r.Wrote) == 0 {
			continue
		}
		keep := n.holdsWrites(r.Wrote)
		if st, ok := n.idem.rebase(r, keep, epochs); ok {
			stored = append(stored, st)
		}
	}
	n.persist(stored)
}

// undoKeyPrefix starts the idempotency key of a taken-back add.
const undoKeyPrefix = "counterd-undo-"

// keepRecords stores records this node made (or found by lookupRecord)
// in the cache and, with the next flush, on disk, and takes back this
// node's duplicates among them.
func (n *Node) keepRecords(ctx context.Context, recs []idemRecord) {
	lost, stored := n.idem.put(recs, n.self)
	n.persist(stored)
	if len(lost) > 0 {
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
		res, err := n.store.ApplyBatch(ctx, ops, contract.WriteOptions{Durability: contract.Async, IdempotencyKey: key})
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

// versionOf is the version export would show (ok false: no state), under
// the same lock, without encoding the state.
func (n *Node) versionOf(id string) (uint64, bool, error) {
	mu := &n.stripes[stripeOf(id)]
	mu.Lock()
	defer mu.Unlock()
	v, _, ok, err := n.store.VersionOf(id)
	return v, ok, err
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
		crdt := !slices.ContainsFunc(r.Results, func(res contract.Result) bool { return !isCRDT(res.Kind) })
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
	n.idem.put(recs, n.self) // on disk already (the engine's table)
	return recs
}

// loadStoredRecords puts the records this node kept on disk (its own and
// those it received; see the top of this file) into the cache, the newest
// idemCacheMax within the retention. Call before the node joins.
func (n *Node) loadStoredRecords() {
	var recs []idemRecord
	bad := 0
	err := n.store.StoredRecords(time.Now().Add(-idemCacheRetention).UnixNano(), func(s engine.StoredRecord) {
		if !strings.HasPrefix(s.Key, storedKeyPrefix) {
			return
		}
		r, err := decodeStored(s)
		if err != nil {
			bad++
			return
		}
		recs = append(recs, r)
	})
	if err != nil {
		n.log.Warn("cluster: reading stored idempotency records", "err", err)
	}
	if bad > 0 {
		n.log.Warn("cluster: skipped malformed stored idempotency records", "records", bad)
	}
	slices.SortFunc(recs, func(a, b idemRecord) int { return cmp.Compare(a.Created, b.Created) })
	if len(recs) > idemCacheMax {
		recs = recs[len(recs)-idemCacheMax:]
	}
	n.idem.put(recs, n.self) // what put returns is on disk already
	if len(recs) > 0 {
		n.log.Info("cluster: loaded stored idempotency records", "records", len(recs))
	}
}

// lookupWait bounds how long a lookup waits for the replicas that have not
// answered once a quorum has.
const lookupWait = time.Second

// lookupRecord asks the other replicas of ids for the record of key and
// fp before this node applies a keyed pn/sharded add it has no record of:
// the add may have been applied by a node that died (or whose answer was
// lost) after its push reached some replicas but not this node, and the
// client retried here. It returns the recorded results (replayed, and the
// record kept here) if any replica holds the record; nil if every replica
// answered without it, or a write quorum of the replicas (this node
// included when it is one) did and the others did not answer within
// lookupWait (a dead node fails at once: connection refused); else an
// *UnavailableError, retryable with the same key. A push that is still on
// its way when the lookup asks is not seen: that add counts twice until
// the records meet (undoDuplicates).
func (n *Node) lookupRecord(ctx context.Context, key string, fp uint64, ids []string) (*idemRecord, error) {
	s := n.ring.Snapshot()
	need := map[string]int{}       // per id: peer answers still needed for a quorum
	peers := map[string][]string{} // peer: the ids it replicates
	var reps []string
	for _, id := range ids {
		reps = s.AppendReplicas(reps[:0], id, 0)
		q := quorum(len(reps))
		if slices.Contains(reps, n.self) {
			q--
		}
		if q > 0 {
			need[id] = q
		}
		for _, r := range reps {
			if r != n.self {
				peers[r] = append(peers[r], id)
			}
		}
	}
	if len(peers) == 0 {
		return nil, nil
	}
	type answer struct {
		peer string
		rec  *idemRecord
		err  error
	}
	cctx, cancel := context.WithTimeout(ctx, n.cfg.RPCTimeout)
	defer cancel()
	answers := make(chan answer, len(peers))
	for peer, pids := range peers {
		go func() {
			var resp fetchResponse
			err := n.call(cctx, peer, "Fetch", &fetchRequest{header: n.header(false), IDs: pids, IdemKey: key, IdemFP: fp}, &resp)
			if err == nil {
				err = resp.Err.err(peer, nil)
			}
			a := answer{peer: peer, err: err}
			for i := range resp.Idem {
				if resp.Idem[i].Key == key && resp.Idem[i].FP == fp && len(resp.Idem[i].Results) > 0 {
					a.rec = &resp.Idem[i]
					break
				}
			}
			answers <- a
		}()
	}
	var wait <-chan time.Time
loop:
	for range peers {
		var a answer
		select {
		case a = <-answers:
		case <-wait:
			break loop
		case <-ctx.Done():
			return nil, &UnavailableError{Op: "idempotency lookup", Err: ctx.Err()}
		}
		if a.err != nil {
			continue
		}
		if a.rec != nil {
			n.keepRecords(ctx, []idemRecord{*a.rec})
			n.metrics.forwarded.WithLabelValues("idem_lookup", "found").Inc()
			return a.rec, nil
		}
		for _, id := range peers[a.peer] {
			if need[id]--; need[id] <= 0 {
				delete(need, id)
			}
		}
		if len(need) == 0 && wait == nil {
			wait = time.After(lookupWait)
		}
	}
	if len(need) > 0 {
		n.metrics.forwarded.WithLabelValues("idem_lookup", "unavailable").Inc()
		return nil, &UnavailableError{Op: "idempotency lookup", Err: fmt.Errorf("no write quorum of the replicas of %q answered", firstKey(need))}
	}
	n.metrics.forwarded.WithLabelValues("idem_lookup", "none").Inc()
	return nil, nil
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

// clusterIdem is a keyed request's idem.Store on a node: the record cache
// (and the replicas' caches) in front of the store, whose engine claims
// the key (so no claim here: the cache holds only completed records).
type clusterIdem struct {
	n     *Node
	ops   []contract.Op
	batch bool
	wo    contract.WriteOptions
}

// Claim returns the record of the request another node applied, if it
// reached this node (cache) or, for a pn/sharded add applied where it
// arrives, one of the ids' replicas (lookupRecord).
func (s *clusterIdem) Claim(ctx context.Context, c *engine.IdemRecord) (*engine.IdemRecord, error) {
	if r, ok := s.n.idem.record(c.Key, c.FP); ok {
		return &r.IdemRecord, nil
	}
	if s.n.anyCRDTLocal(ctx, s.ops, c.Key) {
		// Applied where it arrives: an earlier attempt may have been
		// applied by another node.
		if r, err := s.n.lookupRecord(ctx, c.Key, c.FP, opIDs(s.ops)); err != nil || r != nil {
			if err != nil {
				return nil, err
			}
			return &r.IdemRecord, nil
		}
	}
	return nil, nil
}

// Wait is never called: Claim returns no pending records.
func (*clusterIdem) Wait(context.Context, *engine.IdemRecord) error { return nil }

// Commit applies with the ids' stripes held (the record is in the cache
// before any export shows the write) and keeps the record.
func (s *clusterIdem) Commit(ctx context.Context, c *engine.IdemRecord) ([]contract.Result, error) {
	unlock := s.n.stripes.rlock(opIDs(s.ops))
	defer unlock()
	res, err := s.n.applyOwned(ctx, s.ops, s.batch, s.wo)
	if err != nil {
		return nil, err
	}
	if rec := newIdemRecord(s.n.self, c.Key, c.FP, s.ops, res); rec != nil {
		s.n.keepRecords(ctx, []idemRecord{*rec})
	}
	return res, nil
}

// Release has nothing to free (the engine's claim is its own).
func (*clusterIdem) Release(context.Context, *engine.IdemRecord) error { return nil }

// anyCRDTLocal reports whether some op of ops is a pn/sharded add, applied
// by the node that receives it.
func (n *Node) anyCRDTLocal(ctx context.Context, ops []contract.Op, key string) bool {
	for i := range ops {
		if n.crdtLocal(ctx, &ops[i], key) {
			return true
		}
	}
	return false
}
