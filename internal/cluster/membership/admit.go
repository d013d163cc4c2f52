package membership

import (
	"bytes"
	"context"
	"sync"
	"time"
)

// admission tracks the members Config.Admit has not accepted yet. Its maps
// are guarded by Membership.mu.
type admission struct {
	ok      map[string]Member // admitted, by id: address and Meta at admission
	pending map[string]Member // waiting, by id: the latest address and Meta
	running map[string]bool   // ids with an admit goroutine

	ctx    context.Context // cancelled by stopAdmission
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newAdmission() admission {
	ctx, cancel := context.WithCancel(context.Background())
	return admission{ok: map[string]Member{}, pending: map[string]Member{}, running: map[string]bool{}, ctx: ctx, cancel: cancel}
}

func sameNode(a, b Member) bool { return a.Addr == b.Addr && bytes.Equal(a.Meta, b.Meta) }

// admitLocked reports whether mem, alive, may be reported now. If not, it
// is queued for Config.Admit, which reports it once accepted. m.mu must be
// held. A forgotten member is never reported.
func (m *Membership) admitLocked(mem Member) bool {
	if m.forgotten[mem.ID] {
		return false // retired for good (forget.go)
	}
	if m.cfg.Admit == nil || mem.ID == m.cfg.NodeID {
		return true
	}
	if prev, ok := m.admit.ok[mem.ID]; ok && sameNode(prev, mem) {
		return true
	}
	// New, or its address or Meta changed: vet it again. Until then it
	// keeps its last admitted entry (or none).
	delete(m.admit.ok, mem.ID)
	m.admit.pending[mem.ID] = mem
	if !m.admit.running[mem.ID] && m.admit.ctx.Err() == nil {
		m.admit.running[mem.ID] = true
		m.admit.wg.Add(1)
		go m.admitLoop(mem.ID)
	}
	return false
}

// forgetLocked drops a member that left the gossip; it reports whether
// the member had been reported (so its leave must be too). m.mu must be
// held.
func (m *Membership) forgetLocked(id string) bool {
	delete(m.admit.pending, id)
	delete(m.admit.ok, id)
	_, reported := m.members[id]
	return reported
}

// admitLoop calls Config.Admit for member id until it accepts the latest
// address and Meta or the member leaves the gossip.
func (m *Membership) admitLoop(id string) {
	defer m.admit.wg.Done()
	var warned bool
	for {
		m.mu.Lock()
		mem, ok := m.admit.pending[id]
		if !ok || m.admit.ctx.Err() != nil {
			delete(m.admit.running, id)
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()

		ctx, cancel := context.WithTimeout(m.admit.ctx, m.cfg.AdmitRetry+m.cfg.TCPTimeout)
		err := m.cfg.Admit(ctx, mem)
		cancel()

		m.mu.Lock()
		if err == nil {
			if cur, ok := m.admit.pending[id]; ok && sameNode(cur, mem) {
				delete(m.admit.pending, id)
				m.admit.ok[id] = mem
				t := EventJoin
				if prev, ok := m.members[id]; ok && prev.State == StateAlive {
					t = EventUpdate
				}
				m.emitLocked(t, mem)
			}
			m.mu.Unlock()
			continue // done, or vet the newer address
		}
		m.mu.Unlock()
		if !warned {
			m.cfg.Logger.Warn("membership: member not admitted, retrying", "member", id, "addr", mem.Addr, "err", err)
			warned = true
		}
		select {
		case <-m.admit.ctx.Done():
		case <-time.After(m.cfg.AdmitRetry):
		}
	}
}

// stopAdmission cancels pending admissions and waits for their goroutines.
func (m *Membership) stopAdmission() {
	m.admit.cancel()
	m.admit.wg.Wait()
}
