package membership

import (
	"errors"
	"fmt"
	"net"
	"time"
)

// ErrUnknownTiming is returned by ParseTiming for a name that is not a
// preset.
var ErrUnknownTiming = errors.New("membership: unknown timing preset (want fast or lan)")

// Errors of Probe.
var (
	ErrNotMember   = errors.New("membership: not a known member")
	ErrProbeFailed = errors.New("membership: direct probe got no answer")
)

// Timing is a failure-detection preset. A crashed member is suspected after
// at most about 2*ProbeInterval (its turn in the probe round plus the
// probe) and declared dead SuspicionMult*ProbeInterval later (memberlist's
// suspicion timeout for clusters under 10 nodes; it grows with log10(N)
// above). A suspected member that is alive refutes the suspicion, and one
// wrongly declared dead rejoins with a higher incarnation: a too-short
// timing costs ring churn (fences, handoff), not data.
type Timing struct {
	Name           string
	ProbeInterval  time.Duration
	ProbeTimeout   time.Duration
	GossipInterval time.Duration
	SuspicionMult  int
}

// Presets. TimingFast (counterd's default in cluster mode) declares a
// crashed member of a small cluster dead within about 0.6 s: suspected
// within 0.3 s, dead 0.3 s later. With a suspicion multiplier of 2,
// memberlist expects no confirmation from other members and uses its
// shortest suspicion timeout at once (with 3 it waits for one, or up to
// six times longer). It suits a LAN or a single host (round trips well
// under ProbeTimeout). TimingLAN is memberlist's DefaultLANConfig (dead
// after about 5-6 s) for slower or lossy networks.
var (
	TimingFast = Timing{Name: "fast", ProbeInterval: 150 * time.Millisecond, ProbeTimeout: 75 * time.Millisecond, GossipInterval: 50 * time.Millisecond, SuspicionMult: 2}
	TimingLAN  = Timing{Name: "lan", ProbeInterval: DefaultProbeInterval, ProbeTimeout: DefaultProbeTimeout, GossipInterval: DefaultGossipInterval, SuspicionMult: DefaultSuspicionMult}
)

// ParseTiming returns the preset called name ("fast" or "lan").
func ParseTiming(name string) (Timing, error) {
	switch name {
	case TimingFast.Name:
		return TimingFast, nil
	case TimingLAN.Name:
		return TimingLAN, nil
	}
	return Timing{}, fmt.Errorf("%w: %q", ErrUnknownTiming, name)
}

// Apply sets c's failure-detection fields that are still zero from t.
func (t Timing) Apply(c *Config) {
	if c.ProbeInterval == 0 {
		c.ProbeInterval = t.ProbeInterval
	}
	if c.ProbeTimeout == 0 {
		c.ProbeTimeout = t.ProbeTimeout
	}
	if c.GossipInterval == 0 {
		c.GossipInterval = t.GossipInterval
	}
	if c.SuspicionMult == 0 {
		c.SuspicionMult = t.SuspicionMult
	}
}

// DeadAfter estimates how long after a crash the members declare the
// crashed one dead, for a cluster of fewer than 10 members: two probe
// intervals to suspect it, then the suspicion timeout.
func (t Timing) DeadAfter() time.Duration {
	return 2*t.ProbeInterval + time.Duration(t.SuspicionMult)*t.ProbeInterval
}

// Probe pings member id directly (one UDP ping) and fails unless it
// answers within the probe interval.
// A forwarder calls it after a failed call to decide whether the member is
// down (wait for the ring to move) or the failure was transient.
func (m *Membership) Probe(id string) error {
	m.mu.Lock()
	mem, ok := m.members[id]
	m.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %q", ErrNotMember, id)
	}
	n, err := nodeAt(mem)
	if err != nil {
		return err
	}
	if _, err := m.ml.Ping(id, &net.UDPAddr{IP: n.Addr, Port: int(n.Port)}); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrProbeFailed, id, err)
	}
	return nil
}
