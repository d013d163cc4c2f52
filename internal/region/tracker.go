package region

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
)

// tracker records which counters this region changed, in order, so that
// each peer region is sent what changed since the position it
// acknowledged. A change is a sequence number; an id remembers the last
// one. Ids every peer has acknowledged are forgotten, so the set holds
// what some peer still lacks (during a cut: every id changed since).
type tracker struct {
	mu    sync.Mutex
	seq   uint64
	marks map[string]*mark
	acks  map[string]uint64 // peer -> acknowledged sequence
	now   func() time.Time
}

type mark struct {
	seq uint64
	at  int64  // unix ns of the change with seq
	ver uint64 // highest version seen for the id
	// del is the version the id was last deleted at since every peer
	// acknowledged it (0: none): a tombstone ships before its new state.
	del uint64
}

// newTracker tracks changes for every link of peers (one per gateway).
func newTracker(peers []Peer, now func() time.Time) *tracker {
	t := &tracker{marks: map[string]*mark{}, acks: map[string]uint64{}, now: now}
	for _, p := range peers {
		t.acks[linkKey(p)] = 0
	}
	return t
}

// Changes records which counters this node changed, for shipping to the
// peer regions. An embedded node records them at its front end
// (Replicator.Wrap); a cluster node records every change to its store
// (Note, NoteStates: the owner's writes, the replicas and handoffs it
// receives), and ships those it owns.
type Changes struct{ t *tracker }

// NewChanges records changes for the links of peers (ParsePeers).
func NewChanges(peers []Peer) *Changes { return &Changes{t: newTracker(peers, time.Now)} }

// Note records a successful op and its result.
func (c *Changes) Note(op *contract.Op, res *contract.Result) { c.t.note(op, res) }

// NoteStates records states merged into the store (a deleted one as a
// deletion at its version).
func (c *Changes) NoteStates(states []engine.State) {
	for i := range states {
		s := &states[i]
		if s.Deleted {
			c.t.note(&contract.Op{Type: contract.OpDelete, ID: s.ID}, &contract.Result{Changed: true, Version: s.Version})
		} else {
			c.t.touch(s.ID, s.Version)
		}
	}
}

// Wrap returns be recording every acknowledged mutation; eng is the
// engine be serves (FlushAll records its counters as deleted).
func (c *Changes) Wrap(be contract.Backend, eng *engine.Engine) contract.Backend {
	return &trackedBackend{Backend: be, t: c.t, eng: eng}
}

// note records a successful op and its result.
func (t *tracker) note(op *contract.Op, res *contract.Result) {
	if op.ID == "" {
		return
	}
	del := op.Type == contract.OpDelete && res.Changed || op.Type == contract.OpExpire && op.TTL < 0 && op.ExpireAt == 0
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seq++
	m := t.marks[op.ID]
	if m == nil {
		m = &mark{}
		t.marks[op.ID] = m
	}
	m.seq, m.at = t.seq, t.now().UnixNano()
	m.ver = max(m.ver, res.Version)
	if del {
		m.del = max(m.del, res.Version)
	}
}

// touch records a change of id at version ver.
func (t *tracker) touch(id string, ver uint64) {
	t.note(&contract.Op{Type: contract.OpAdd, ID: id}, &contract.Result{Version: ver})
}

// pendingID is an id to ship and what the tracker knows of it.
type pendingID struct {
	id       string
	seq      uint64
	ver, del uint64
}

// pending returns the ids changed after peer's acknowledged position, in
// sequence order, at most limit of them; more reports that others remain.
func (t *tracker) pending(peer string, limit int) (ids []pendingID, more bool) {
	t.mu.Lock()
	ack := t.acks[peer]
	for id, m := range t.marks {
		if m.seq > ack {
			ids = append(ids, pendingID{id: id, seq: m.seq, ver: m.ver, del: m.del})
		}
	}
	t.mu.Unlock()
	slices.SortFunc(ids, func(a, b pendingID) int { return cmpU64(a.seq, b.seq) })
	if len(ids) > limit {
		return ids[:limit], true
	}
	return ids, false
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// ack moves peer's position to seq and forgets what every peer has.
func (t *tracker) ack(peer string, seq uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if seq <= t.acks[peer] {
		return
	}
	t.acks[peer] = seq
	low := seq
	for _, a := range t.acks {
		low = min(low, a)
	}
	for id, m := range t.marks {
		if m.seq <= low {
			delete(t.marks, id)
		}
	}
}

// lag returns how many ids peer lacks and the time of the oldest change
// among them (0 when none).
func (t *tracker) lag(peer string) (n int, oldest int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ack := t.acks[peer]
	for _, m := range t.marks {
		if m.seq > ack {
			n++
			if oldest == 0 || m.at < oldest {
				oldest = m.at
			}
		}
	}
	return n, oldest
}

// trackedBackend records every successful mutation of the wrapped backend
// in the tracker before answering, so an acknowledged write is always
// shipped.
type trackedBackend struct {
	contract.Backend
	t   *tracker
	eng *engine.Engine
}

func (b *trackedBackend) Apply(ctx context.Context, op contract.Op, wo contract.WriteOptions) (contract.Result, error) {
	res, err := b.Backend.Apply(ctx, op, wo)
	if err == nil {
		b.t.note(&op, &res)
	}
	return res, err
}

func (b *trackedBackend) ApplyBatch(ctx context.Context, ops []contract.Op, wo contract.WriteOptions) ([]contract.Result, error) {
	res, err := b.Backend.ApplyBatch(ctx, ops, wo)
	if err == nil {
		for i := range ops {
			if i < len(res) {
				b.t.note(&ops[i], &res[i])
			}
		}
	}
	return res, err
}

// FlushAll records every counter as deleted first (at its version + 1,
// the version a delete gives it), then flushes.
func (b *trackedBackend) FlushAll(ctx context.Context, wo contract.WriteOptions) error {
	var gone []engine.State
	if err := b.eng.ExportAll(ctx, func(s engine.State) error {
		gone = append(gone, engine.State{ID: s.ID, Version: s.Version})
		return nil
	}); err != nil {
		return err
	}
	err := b.Backend.FlushAll(ctx, wo)
	if err == nil {
		for _, s := range gone {
			b.t.note(&contract.Op{Type: contract.OpDelete, ID: s.ID}, &contract.Result{Changed: true, Version: s.Version + 1})
		}
	}
	return err
}
