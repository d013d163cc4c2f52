package membership

import (
	"bytes"
	"encoding/json"
	"slices"
)

// Forgetting retires a node id for good: an operator removes a member that
// is gone permanently, so it no longer counts toward the majority. The set
// of forgotten ids only grows. It spreads in two ways: Forget sends it at
// once to every alive member (a direct message, like the leave intent), and
// memberlist's push-pull state exchange (on every join and every
// PushPullInterval) carries the whole set, so a member that missed the
// message or joins later learns it too. A forgotten id is never reported
// again (no event, not in Members or Alive), even if a node of that name
// gossips again; a node that learns it was forgotten itself reports it
// through SelfForgotten.

// forgetMsg prefixes the user message that announces a forgotten id.
var forgetMsg = []byte("counterd/forget\x00")

// pushPullState is this package's part of memberlist's state exchange.
type pushPullState struct {
	Forgotten []string `json:"forgotten,omitempty"`
}

// Forget retires member id: it leaves Members and Alive, no later gossip
// about it is reported, and every alive member is told. Forgetting an id
// twice is a no-op. The caller decides whether a live member may be
// forgotten; forgetting this node's own id is the caller's error too.
func (m *Membership) Forget(id string) error {
	if m.isClosed() {
		return ErrShutdown
	}
	m.mu.Lock()
	m.forgetIDLocked(id)
	m.mu.Unlock()
	msg := append(slices.Clone(forgetMsg), id...)
	for _, mem := range m.Members() {
		if mem.ID == m.cfg.NodeID || mem.State != StateAlive {
			continue
		}
		n, err := nodeAt(mem)
		if err == nil {
			err = m.ml.SendReliable(n, msg)
		}
		if err != nil {
			// Push-pull carries it later.
			m.cfg.Logger.Debug("membership: forget not delivered", "to", mem.ID, "err", err)
		}
	}
	return nil
}

// Forgotten returns the forgotten ids, sorted.
func (m *Membership) Forgotten() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	ids := make([]string, 0, len(m.forgotten))
	for id := range m.forgotten {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// IsForgotten reports whether id was forgotten.
func (m *Membership) IsForgotten(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.forgotten[id]
}

// SelfForgotten reports whether the cluster forgot this node's own id: it
// must stop serving (its data is stale and nobody admits it any more).
func (m *Membership) SelfForgotten() bool { return m.IsForgotten(m.cfg.NodeID) }

// forgetIDLocked records id as forgotten and drops it from the member
// table, queuing an EventForget if it was there (or if it is this node).
// m.mu must be held.
func (m *Membership) forgetIDLocked(id string) {
	if id == "" || m.forgotten[id] {
		return
	}
	if m.forgotten == nil {
		m.forgotten = map[string]bool{}
	}
	m.forgotten[id] = true
	mem, known := m.members[id]
	delete(m.members, id)
	delete(m.admit.pending, id)
	delete(m.admit.ok, id)
	delete(m.leaving, id)
	if id == m.cfg.NodeID {
		m.cfg.Logger.Error("membership: the cluster forgot this node; it serves nothing until restarted with an empty data directory under a new node id", "node", id)
		mem, known = Member{ID: id}, true
	}
	if !known || m.cfg.OnEvent == nil {
		return
	}
	mem.Meta = slices.Clone(mem.Meta)
	m.queue = append(m.queue, Event{Type: EventForget, Member: mem})
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// forgetMessage handles a forget announcement; it reports whether b was
// one.
func (m *Membership) forgetMessage(b []byte) bool {
	id, ok := bytes.CutPrefix(b, forgetMsg)
	if !ok {
		return false
	}
	m.mu.Lock()
	m.forgetIDLocked(string(id))
	m.mu.Unlock()
	return true
}

func (m *Membership) localState() []byte {
	b, _ := json.Marshal(pushPullState{Forgotten: m.Forgotten()})
	return b
}

func (m *Membership) mergeRemoteState(b []byte) {
	var st pushPullState
	if len(b) == 0 || json.Unmarshal(b, &st) != nil {
		return // an older node, or garbage: nothing to merge
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range st.Forgotten {
		m.forgetIDLocked(id)
	}
}
