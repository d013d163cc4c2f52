package node

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/counterd/counterd/internal/engine"
)

// Dedupe marks (contract.CounterMarker): the ids of the events whose
// effect a marked write carries, kept per counter, where the counter's
// state lives. A marked write on its owner creates one markGroup (its
// events, their expiry, and the version the write produced) in the same
// engine flush as its effect (ApplyStored), and the group then travels
// with the counter's state everywhere the state goes: in the Replicate
// message that pushes the state (owner replication, handoff), in a
// fence's Fetch answer, in anti-entropy. A receiver merges the groups in
// the same flush batch as the states that came with them (MergeRecords),
// so a node's disk has a counter's marks whenever it has the effect of
// the writes that made them.
//
// A mark counts (the event is seen) only where the counter's state
// contains the write that created it: an old owner's write that no
// quorum acknowledged is lost when a newer epoch wins, and its marks
// must not make the retry of its events be skipped. As for idempotency
// records (idem.go), a group carries versions that contain its write
// (Wrote): the write's own, and the floor of each epoch whose owner's
// fence found the write in the state it started from and which that
// owner wrote in. Unlike records, groups are kept whether or not they are
// contained when they arrive (they are checked when looked up), and the
// claimant of an epoch remembers the state its fence started from
// (claimBase), so a group that reaches it after its fence (an inbound
// handoff still running) still moves to its epoch.
//
// An epoch's floor is added when its owner first writes the id (the
// write that lifts the state to the epoch, liftToEpoch), not when it
// claims: until then the state's version is still the one the fence
// found, which the group's versions match. Under ring churn nodes claim
// an id and lose it again before they write (a marked op waits for the
// inbound handoffs), and a group keeps only the maxWrote highest
// versions: floors added by such claims would push out the one that
// matches the state, and the group's events would be applied again.

// markGroup is the marks one marked write created on one counter.
type markGroup struct {
	ID      string
	Key     uint64   // the version the write produced: with ID, names the group
	Wrote   []uint64 // versions that contain the write (sorted, at most maxWrote)
	Expires int64    // unix ns
	Events  []string // sorted, distinct
}

// mergeGroup joins two copies of one group (same ID and Key): the union of
// events, the later expiry and the highest maxWrote versions of both. It
// is commutative, associative and idempotent, so copies may meet in any
// order, any number of times.
func mergeGroup(a, b markGroup) markGroup {
	out := markGroup{ID: a.ID, Key: a.Key, Expires: max(a.Expires, b.Expires)}
	out.Events = slices.Concat(a.Events, b.Events)
	slices.Sort(out.Events)
	out.Events = slices.Compact(out.Events)
	out.Wrote = slices.Concat(a.Wrote, b.Wrote)
	slices.Sort(out.Wrote)
	out.Wrote = slices.Compact(out.Wrote)
	out.Wrote = out.Wrote[max(0, len(out.Wrote)-maxWrote):]
	return out
}

// holdsGroup reports whether a (sorted and distinct, as the store keeps
// groups) holds all of b: mergeGroup(a, b) would be a.
func holdsGroup(a, b *markGroup) bool {
	if b.Expires > a.Expires {
		return false
	}
	for _, w := range b.Wrote {
		if _, ok := slices.BinarySearch(a.Wrote, w); !ok {
			return false
		}
	}
	for _, e := range b.Events {
		if _, ok := slices.BinarySearch(a.Events, e); !ok {
			return false
		}
	}
	return true
}

func equalGroup(a, b markGroup) bool {
	return a.ID == b.ID && a.Key == b.Key && a.Expires == b.Expires && slices.Equal(a.Events, b.Events) && slices.Equal(a.Wrote, b.Wrote)
}

// maxMarkLen bounds an event id in a mark (the engine's marks' bound).
const maxMarkLen = 1024

// markKeyPrefix starts the engine stored-record keys of mark groups.
const markKeyPrefix = "mark/"

func (g *markGroup) storedKey() string {
	return markKeyPrefix + strconv.FormatUint(g.Key, 16) + "/" + g.ID
}

// stored is g as an engine stored record: wrote versions, expiry, events.
func (g *markGroup) stored(now int64) engine.StoredRecord {
	b := binary.AppendUvarint(nil, uint64(len(g.Wrote)))
	for _, w := range g.Wrote {
		b = binary.AppendUvarint(b, w)
	}
	b = binary.AppendVarint(b, g.Expires)
	b = binary.AppendUvarint(b, uint64(len(g.Events)))
	for _, e := range g.Events {
		b = binary.AppendUvarint(b, uint64(len(e)))
		b = append(b, e...)
	}
	return engine.StoredRecord{Key: g.storedKey(), Created: now, Data: b}
}

func deletedGroup(g *markGroup) engine.StoredRecord { return engine.StoredRecord{Key: g.storedKey()} }

var errMarkRecord = errors.New("malformed mark record")

// decodeGroup parses what stored wrote; a malformed record is an error
// wrapping engine.ErrCorrupt.
func decodeGroup(s engine.StoredRecord) (markGroup, error) {
	var g markGroup
	rest, ok := strings.CutPrefix(s.Key, markKeyPrefix)
	hex, id, ok2 := strings.Cut(rest, "/")
	key, err := strconv.ParseUint(hex, 16, 64)
	if !ok || !ok2 || err != nil || id == "" {
		return g, fmt.Errorf("%w: %w: key %q", engine.ErrCorrupt, errMarkRecord, s.Key)
	}
	g.ID, g.Key = id, key
	v := s.Data
	uv := func() uint64 {
		x, n := binary.Uvarint(v)
		if n <= 0 {
			ok = false
			return 0
		}
		v = v[n:]
		return x
	}
	nw := uv()
	if nw > maxWrote {
		ok = false
	}
	for i := uint64(0); ok && i < nw; i++ {
		g.Wrote = append(g.Wrote, uv())
	}
	if ok {
		x, n := binary.Varint(v)
		if n <= 0 {
			ok = false
		} else {
			g.Expires, v = x, v[n:]
		}
	}
	ne := uv()
	if ne > uint64(len(v)) {
		ok = false
	}
	for i := uint64(0); ok && i < ne; i++ {
		l := uv()
		if !ok || l > uint64(len(v)) {
			ok = false
			break
		}
		g.Events = append(g.Events, string(v[:l]))
		v = v[l:]
	}
	if !ok || len(v) != 0 {
		return markGroup{}, fmt.Errorf("%w: %w %q", engine.ErrCorrupt, errMarkRecord, s.Key)
	}
	return g, nil
}

// markEntry is a group held here, with the sequence number of its last
// change (pushes send each peer the groups changed since its last push).
type markEntry struct {
	g   markGroup
	seq uint64
}

type idMarks struct {
	groups map[uint64]*markEntry // by Key
	// events maps an event to the keys of the groups that hold it, built
	// by the first lookup (seen) and kept from then on (nil before): a
	// replica that never owns the id never looks its marks up, and does
	// not pay for an index per event of every group pushed to it.
	events map[string][]uint64
	// log has a (seq, key) per change of a group, in seq order: a push
	// finds what changed since its peer's last delivery without a pass
	// over every group. An entry whose group changed again since (or
	// went) is skipped, and the log is compacted when most are such.
	log []logEntry
}

type logEntry struct{ seq, key uint64 }

// note records that group key changed at seq (caller holds the lock).
func (im *idMarks) note(seq, key uint64) {
	im.log = append(im.log, logEntry{seq, key})
	im.compact()
}

// index adds g's events to the index (caller holds the lock; events is
// not nil).
func (im *idMarks) index(g *markGroup) {
	for _, e := range g.Events {
		if !slices.Contains(im.events[e], g.Key) {
			im.events[e] = append(im.events[e], g.Key)
		}
	}
}

// compact drops the log's stale entries when they are most of it.
func (im *idMarks) compact() {
	if len(im.log) <= 64 || len(im.log) <= 2*len(im.groups) {
		return
	}
	live := im.log[:0]
	for _, l := range im.log {
		if e := im.groups[l.key]; e != nil && e.seq == l.seq {
			live = append(live, l)
		}
	}
	clear(im.log[len(live):])
	im.log = live
}

// claimBase is the state an owner's fence started an epoch from.
type claimBase struct {
	epoch  uint32
	base   uint64 // the id's version after the fence merged (0: none)
	lifted bool   // the owner wrote in the epoch: the groups base holds have its floor
}

// holds reports whether the state at version holds a write whose group
// has the versions ws because it still holds the state this node's claim
// started from, which the claim found the write in (the claim's floor is
// in ws, which only this node adds, at its first write of the epoch).
func (b claimBase) holds(version uint64, ws []uint64) bool {
	return b.epoch > 0 && b.base > 0 && slices.Contains(ws, epochFloor(b.epoch)) && contains(version, []uint64{b.base})
}

// markStore holds this node's dedupe marks, by counter id. Safe for
// concurrent use.
type markStore struct {
	mu    sync.Mutex
	seq   uint64
	byID  map[string]*idMarks
	bases map[string]claimBase
	// sent has, per peer and id, the seq of the last group a push to
	// that peer delivered.
	sent map[string]map[string]uint64
	// due has, per expiry bucket (Expires / markExpireBucket), the groups
	// that expire in it, and from the first bucket expire has not
	// emptied: a sweep visits the groups whose bucket is due, not every
	// group (with a dedupe of 24 h, most are not). An entry whose group
	// went or expires later (in its own entry's bucket) is skipped.
	due  map[int64][]dueGroup
	from int64
}

type dueGroup struct {
	id  string
	key uint64
}

// markExpireBucket is the width of an expiry bucket (unix ns).
const markExpireBucket = int64(markExpireInterval)

// dueLocked enters group key of id in the bucket of its expiry exp.
func (s *markStore) dueLocked(id string, key uint64, exp int64) {
	b := exp / markExpireBucket
	if s.due == nil {
		s.due, s.from = map[int64][]dueGroup{}, b
	}
	s.due[b] = append(s.due[b], dueGroup{id, key})
	s.from = min(s.from, b)
}

func (s *markStore) initLocked() {
	if s.byID == nil {
		s.byID = map[string]*idMarks{}
		s.bases = map[string]claimBase{}
		s.sent = map[string]map[string]uint64{}
	}
}

// rebaseLocked adds the epoch of id's claim to g's versions when this node
// wrote in that epoch and the state the claim started from contains g's
// write.
func (s *markStore) rebaseLocked(g *markGroup) {
	if b, ok := s.bases[g.ID]; ok && b.lifted && b.epoch > 0 && contains(b.base, g.Wrote) {
		g.Wrote = addWrote(g.Wrote, epochFloor(b.epoch))
	}
}

// merge joins groups into the store and returns what changed for the disk.
func (s *markStore) merge(groups []markGroup, now int64) []engine.StoredRecord {
	if len(groups) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	var stored []engine.StoredRecord
	for _, g := range groups {
		if g.Expires <= now || g.ID == "" {
			continue
		}
		s.rebaseLocked(&g)
		im := s.byID[g.ID]
		var cur *markEntry
		if im != nil {
			cur = im.groups[g.Key]
		}
		if cur != nil && holdsGroup(&cur.g, &g) {
			// A copy held already (pushes that crossed, a repair): no
			// merge to allocate.
			continue
		}
		g.Events = slices.Clone(g.Events)
		slices.Sort(g.Events)
		g.Events = slices.Compact(g.Events)
		if im == nil {
			im = &idMarks{groups: map[uint64]*markEntry{}}
			s.byID[g.ID] = im
		}
		if cur != nil {
			m := mergeGroup(cur.g, g)
			if equalGroup(m, cur.g) {
				continue
			}
			g = m
		}
		if cur == nil || cur.g.Expires/markExpireBucket != g.Expires/markExpireBucket {
			s.dueLocked(g.ID, g.Key, g.Expires)
		}
		s.seq++
		im.groups[g.Key] = &markEntry{g: g, seq: s.seq}
		im.note(s.seq, g.Key)
		if im.events != nil {
			im.index(&g)
		}
		stored = append(stored, g.stored(now))
	}
	return stored
}

// seen returns the events of events that have an unexpired mark on id
// whose write the state at version holds (any mark when crdt: per-node
// slots have no epochs): by the group's versions, or by this node's claim
// of id (claimBase.holds).
func (s *markStore) seen(id string, events []string, version uint64, crdt bool, now int64) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	im := s.byID[id]
	if im == nil {
		return nil
	}
	if im.events == nil {
		im.events = map[string][]uint64{}
		for _, e := range im.groups {
			im.index(&e.g)
		}
	}
	b := s.bases[id]
	var out []string
	for _, e := range events {
		for _, k := range im.events[e] {
			g := im.groups[k]
			if g != nil && g.g.Expires > now && (crdt || contains(version, g.g.Wrote) || b.holds(version, g.g.Wrote)) {
				out = append(out, e)
				break
			}
		}
	}
	return out
}

// claimed records that this node's fence claimed epoch for id starting
// from the state at base. The groups of id move to the epoch at its first
// write (lifted).
func (s *markStore) claimed(id string, epoch uint32, base uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	s.bases[id] = claimBase{epoch: epoch, base: base}
}

// lifted runs at this node's first write of id in epoch, its claim's (the
// write that lifts the state to the epoch): it moves the groups of id
// whose write the state the claim started from holds to the epoch, as it
// does the groups that arrive later, and returns what changed for the
// disk (to be stored no later than the lifted state).
func (s *markStore) lifted(id string, epoch uint32, now int64) []engine.StoredRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.bases[id]
	if !ok || b.epoch != epoch || b.lifted {
		return nil
	}
	b.lifted = true
	s.bases[id] = b
	im := s.byID[id]
	if im == nil {
		return nil
	}
	var stored []engine.StoredRecord
	for _, e := range im.groups {
		g := e.g
		s.rebaseLocked(&g)
		if !slices.Equal(g.Wrote, e.g.Wrote) {
			s.seq++
			e.g, e.seq = g, s.seq
			im.note(s.seq, g.Key)
			stored = append(stored, g.stored(now))
		}
	}
	return stored
}

// forIDs returns the unexpired groups of ids (in the order of ids, each
// id's in the order they last changed); with peer set, only those changed
// since the last push to peer delivered (see delivered).
func (s *markStore) forIDs(ids []string, peer string, now int64) (groups []markGroup, upTo map[string]uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var sent map[string]uint64
	if peer != "" && s.sent != nil {
		sent = s.sent[peer]
	}
	for _, id := range ids {
		im := s.byID[id]
		if im == nil {
			continue
		}
		from := sort.Search(len(im.log), func(i int) bool { return im.log[i].seq > sent[id] })
		for _, l := range im.log[from:] {
			e := im.groups[l.key]
			if e == nil || e.seq != l.seq || e.g.Expires <= now {
				continue
			}
			groups = append(groups, e.g)
			if upTo == nil {
				upTo = map[string]uint64{}
			}
			upTo[id] = max(upTo[id], e.seq)
		}
	}
	return groups, upTo
}

// delivered records that peer merged the groups up to upTo.
func (s *markStore) delivered(peer string, upTo map[string]uint64) {
	if len(upTo) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	m := s.sent[peer]
	if m == nil {
		m = map[string]uint64{}
		s.sent[peer] = m
	}
	for id, q := range upTo {
		m[id] = max(m[id], q)
	}
}

// forget forgets what pushes delivered to peer: the next ones send it
// every group of the ids they carry (a node that (re)joins the ring may
// have lost, with a crash, what an async push gave it).
func (s *markStore) forget(peer string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.sent, peer)
}

// dropID forgets id's marks (its state was dropped after a handoff) and
// returns the deletions for the disk.
func (s *markStore) dropID(id string) []engine.StoredRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	im := s.byID[id]
	if im == nil {
		return nil
	}
	var out []engine.StoredRecord
	for _, e := range im.groups {
		out = append(out, deletedGroup(&e.g))
	}
	delete(s.byID, id)
	delete(s.bases, id)
	for _, m := range s.sent {
		delete(m, id)
	}
	return out
}

// expire forgets the groups that expired and returns their deletions. It
// visits the groups of the due buckets only.
func (s *markStore) expire(now int64) []engine.StoredRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []engine.StoredRecord
	last := now / markExpireBucket
	touched := map[string]*idMarks{}
	for b := s.from; b <= last && len(s.due) > 0; b++ {
		var keep []dueGroup // the bucket's groups not expired yet (the last bucket)
		for _, d := range s.due[b] {
			im := s.byID[d.id]
			var e *markEntry
			if im != nil {
				e = im.groups[d.key]
			}
			if e == nil || e.g.Expires/markExpireBucket != b {
				continue // gone, or due in a later bucket
			}
			if e.g.Expires > now {
				keep = append(keep, d)
				continue
			}
			out = append(out, deletedGroup(&e.g))
			im.drop(d.key, &e.g)
			touched[d.id] = im
		}
		if len(keep) > 0 {
			s.due[b] = keep
		} else {
			delete(s.due, b)
		}
	}
	if len(s.due) > 0 {
		s.from = max(s.from, last)
	} else {
		s.due = nil // the next entry sets from
	}
	for id, im := range touched {
		im.compact()
		if len(im.groups) == 0 && s.byID[id] == im {
			delete(s.byID, id)
			for _, m := range s.sent {
				delete(m, id)
			}
		}
	}
	return out
}

// drop removes group k (g) and its events from the index.
func (im *idMarks) drop(k uint64, g *markGroup) {
	delete(im.groups, k)
	if im.events == nil {
		return
	}
	for _, ev := range g.Events {
		ks := slices.DeleteFunc(im.events[ev], func(x uint64) bool { return x == k })
		if len(ks) == 0 {
			delete(im.events, ev)
		} else {
			im.events[ev] = ks
		}
	}
}

// count is how many groups and marks the store holds.
func (s *markStore) count() (groups, marks int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, im := range s.byID {
		groups += len(im.groups)
		for _, e := range im.groups {
			marks += len(e.g.Events)
		}
	}
	return groups, marks
}

// markExpireInterval is how often a node forgets expired marks.
const markExpireInterval = 10 * time.Second

// loadMarks puts the mark groups on disk into the store (before the node
// joins).
func (n *Node) loadMarks() {
	var groups []markGroup
	bad := 0
	now := n.markNow()
	err := n.store.StoredRecords(0, func(s engine.StoredRecord) {
		if !strings.HasPrefix(s.Key, markKeyPrefix) {
			return
		}
		g, err := decodeGroup(s)
		if err != nil {
			bad++
			return
		}
		groups = append(groups, g)
	})
	if err != nil {
		n.log.Warn("cluster: reading stored dedupe marks", "err", err)
	}
	if bad > 0 {
		n.log.Warn("cluster: skipped malformed stored dedupe marks", "records", bad)
	}
	n.dedupe.merge(groups, now) // on disk already
	if len(groups) > 0 {
		n.log.Info("cluster: loaded stored dedupe marks", "groups", len(groups))
	}
}

// expireMarks forgets expired marks, on disk too (every
// markExpireInterval).
func (n *Node) expireMarks() { n.persist(n.dedupe.expire(n.markNow())) }

// maxMarkBytes bounds the event ids of the marks in one message.
const maxMarkBytes = 1 << 20

// markChunks splits groups into runs of about maxMarkBytes of events.
func markChunks(groups []markGroup) [][]markGroup {
	return sizedChunks(groups, maxMarkBytes, func(g *markGroup) int {
		n := 32
		for _, e := range g.Events {
			n += len(e) + 2
		}
		return n
	})
}

// sizedChunks splits items into runs whose sizes add up to at most max
// (an item bigger than max is a run alone).
func sizedChunks[T any](items []T, max int, size func(*T) int) [][]T {
	var out [][]T
	start, sum := 0, 0
	for i := range items {
		n := size(&items[i])
		if i > start && sum+n > max {
			out = append(out, items[start:i])
			start, sum = i, 0
		}
		sum += n
	}
	if start < len(items) {
		out = append(out, items[start:])
	}
	return out
}

// claimMarks runs when this node's fence claimed epochs[id] for ids: the
// marks of each id whose write the fenced state holds move to the epoch at
// its first write there (markStore.lifted), and marks that arrive later
// are checked against that state too.
func (n *Node) claimMarks(ids []string, epochs map[string]uint32) {
	for _, id := range ids {
		e := epochs[id]
		if e == 0 {
			continue
		}
		var base uint64
		if v, _, ok, err := n.store.VersionOf(id); err == nil && ok {
			base = v // the version Export shows, without the encoding
		}
		n.dedupe.claimed(id, e, base)
	}
}

// markNow is the clock marks expire by: the store's, which also stamps
// the counters' expiries.
func (n *Node) markNow() int64 { return n.store.Now().UnixNano() }
