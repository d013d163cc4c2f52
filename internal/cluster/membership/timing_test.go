package membership

import (
	"errors"
	"testing"
	"time"
)

func TestTimingPresets(t *testing.T) {
	for _, want := range []Timing{TimingFast, TimingLAN} {
		got, err := ParseTiming(want.Name)
		if err != nil || got != want {
			t.Fatalf("ParseTiming(%q) = %+v, %v", want.Name, got, err)
		}
		var c Config
		got.Apply(&c)
		c.NodeID = "a"
		if err := c.Validate(); err != nil {
			t.Fatalf("%s: %v", want.Name, err)
		}
		if c.ProbeInterval != want.ProbeInterval || c.SuspicionMult != want.SuspicionMult {
			t.Fatalf("%s applied: %+v", want.Name, c)
		}
	}
	for _, bad := range []string{"", "Fast", "wan", "fast "} {
		if _, err := ParseTiming(bad); !errors.Is(err, ErrUnknownTiming) {
			t.Fatalf("ParseTiming(%q): %v, want ErrUnknownTiming", bad, err)
		}
	}
	// Fields already set win over the preset.
	c := Config{ProbeInterval: time.Second, ProbeTimeout: 300 * time.Millisecond}
	TimingFast.Apply(&c)
	if c.ProbeInterval != time.Second || c.ProbeTimeout != 300*time.Millisecond || c.SuspicionMult != TimingFast.SuspicionMult {
		t.Fatalf("Apply over set fields: %+v", c)
	}
	// The fast preset's documented bound: dead within about a second.
	if d := TimingFast.DeadAfter(); d > time.Second {
		t.Fatalf("TimingFast.DeadAfter() = %v, want at most 1s", d)
	}
}

func TestProbe(t *testing.T) {
	a := start(t, fastConfig(t, "a"))
	b := start(t, fastConfig(t, "b", a.Addr()))
	eventually(t, 5*time.Second, "a sees b", func() bool { return allAlive([]*Membership{a, b}, "a", "b") })
	// One UDP ping may miss its short timeout on a loaded machine: a live
	// member must answer one of the probes within a few seconds.
	eventually(t, 5*time.Second, "a probe of the live member b answered", func() bool { return a.Probe("b") == nil })
	if err := a.Probe("nobody"); !errors.Is(err, ErrNotMember) {
		t.Fatalf("probe of an unknown member: %v, want ErrNotMember", err)
	}
	_ = b.Shutdown()
	if err := a.Probe("b"); !errors.Is(err, ErrProbeFailed) {
		t.Fatalf("probe of a stopped member: %v, want ErrProbeFailed", err)
	}
}
