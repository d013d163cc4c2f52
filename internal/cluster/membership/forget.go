package membership

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
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
	// Left: members this node saw leave gracefully. A member that missed
	// a leaver's direct intent (lost, or sent while it was suspected) and
	// declared it dead learns it left here, so the leaver stops counting
	// as dead toward the majority (docs/cluster.md "Majority check").
	Left []string `json:"left,omitempty"`
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
	set := m.forgottenSet()
	ids := make([]string, 0, len(set))
	for id := range set {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// IsForgotten reports whether id was forgotten. It takes no lock: peers
// check it on every call.
func (m *Membership) IsForgotten(id string) bool { return m.forgottenSet()[id] }

// forgottenSet is the current set; never modified once published.
func (m *Membership) forgottenSet() map[string]bool {
	if p := m.forgottenRO.Load(); p != nil {
		return *p
	}
	return nil
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
	ro := maps.Clone(m.forgotten)
	m.forgottenRO.Store(&ro)
	if err := m.saveForgottenLocked(); err != nil {
		m.cfg.Logger.Error("membership: forgotten ids not saved; they are kept in memory and gossip", "err", err)
	}
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
	st := pushPullState{Forgotten: m.Forgotten()}
	m.mu.Lock()
	for id, mem := range m.members {
		if mem.State == StateLeft {
			st.Left = append(st.Left, id)
		}
	}
	m.mu.Unlock()
	b, _ := json.Marshal(st)
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
	for _, id := range st.Left {
		m.leftLocked(id)
	}
}

// ErrForgetFile is returned by Start when Config.ForgetFile cannot be read
// or is not a JSON list of ids.
var ErrForgetFile = errors.New("membership: bad forget file")

// loadForgotten reads Config.ForgetFile, if any, before gossip starts.
func (m *Membership) loadForgotten() error {
	if m.cfg.ForgetFile == "" {
		return nil
	}
	b, err := os.ReadFile(m.cfg.ForgetFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrForgetFile, err)
	}
	ids, err := parseForgotten(b)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrForgetFile, m.cfg.ForgetFile, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range ids {
		m.forgetIDLocked(id)
	}
	return nil
}

// parseForgotten decodes a forget file: a JSON list of non-empty ids.
func parseForgotten(b []byte) ([]string, error) {
	var ids []string
	if err := json.Unmarshal(b, &ids); err != nil {
		return nil, err
	}
	if slices.Contains(ids, "") {
		return nil, errors.New("empty node id")
	}
	return ids, nil
}

// saveForgottenLocked rewrites Config.ForgetFile: a temporary file,
// fsynced, renamed over the old one. m.mu must be held.
func (m *Membership) saveForgottenLocked() error {
	if m.cfg.ForgetFile == "" {
		return nil
	}
	ids := slices.Sorted(maps.Keys(m.forgotten))
	b, err := json.Marshal(ids)
	if err != nil {
		return err
	}
	tmp := m.cfg.ForgetFile + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, m.cfg.ForgetFile)
	}
	if err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(m.cfg.ForgetFile)); err == nil {
		_ = d.Sync() // the rename
		_ = d.Close()
	}
	return nil
}
