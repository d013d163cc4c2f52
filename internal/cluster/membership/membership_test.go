package membership

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fastConfig: failure detection in well under a second on loopback.
func fastConfig(t *testing.T, id string, join ...string) Config {
	var logger *slog.Logger
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("node", id)
	} else {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return Config{
		NodeID:           id,
		BindAddr:         "127.0.0.1:0",
		Join:             join,
		Meta:             []byte(fmt.Sprintf(`{"http":"127.0.0.1:80%s"}`, id[len(id)-1:])),
		Logger:           logger,
		ProbeInterval:    100 * time.Millisecond,
		ProbeTimeout:     50 * time.Millisecond,
		GossipInterval:   20 * time.Millisecond,
		PushPullInterval: 500 * time.Millisecond,
		SuspicionMult:    2,
		TCPTimeout:       time.Second,
		DeadRetention:    time.Second,
	}
}

func start(t *testing.T, cfg Config) *Membership {
	t.Helper()
	m, err := Start(cfg)
	if err != nil {
		t.Fatalf("start %s: %v", cfg.NodeID, err)
	}
	t.Cleanup(func() { _ = m.Shutdown() })
	return m
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	begin := time.Now()
	for !cond() {
		if time.Since(begin) > within {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(begin)
}

func stateOf(m *Membership, id string) (State, bool) {
	for _, mem := range m.Members() {
		if mem.ID == id {
			return mem.State, true
		}
	}
	return 0, false
}

func allAlive(ms []*Membership, ids ...string) bool {
	for _, m := range ms {
		if !slices.Equal(m.Alive(), ids) {
			return false
		}
	}
	return true
}

type recorder struct {
	mu     sync.Mutex
	events []Event
}

func (r *recorder) add(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) find(t EventType, id string, s State) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if e.Type == t && e.Member.ID == id && e.Member.State == s {
			return true
		}
	}
	return false
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{NodeID: "a"}).Validate(); err != nil {
		t.Fatal(err)
	}
	d := Config{}.withDefaults()
	if d.BindAddr != "127.0.0.1:7946" || d.ProbeInterval != time.Second || d.NodeID == "" {
		t.Fatalf("defaults %+v", d)
	}
	for _, c := range []Config{
		{NodeID: "a", BindAddr: "nope"},
		{NodeID: "a", BindAddr: "127.0.0.1:99999"},
		{NodeID: "a", AdvertiseAddr: "x"},
		{NodeID: "a", Meta: make([]byte, MaxMetaSize+1)},
		{NodeID: "a", ProbeInterval: time.Second, ProbeTimeout: 2 * time.Second},
		{NodeID: "a", SuspicionMult: -1},
	} {
		if c.Validate() == nil {
			t.Errorf("%+v: want error", c)
		}
	}
	if _, err := Start(Config{NodeID: "a", BindAddr: "bad"}); err == nil {
		t.Fatal("Start with bad BindAddr succeeded")
	}
}

// TestMemberlistConfigNoCompression: gossip goes out uncompressed (LZW
// of tens-of-byte pings cost most of an idle node's CPU), with cfg's
// addresses and timing.
func TestMemberlistConfigNoCompression(t *testing.T) {
	cfg := fastConfig(t, "n1").withDefaults()
	cfg.BindAddr, cfg.AdvertiseAddr = "127.0.0.1:7001", "10.0.0.1:7002"
	mc := memberlistConfig(cfg)
	if mc.EnableCompression {
		t.Error("memberlist compression is on")
	}
	if mc.Name != "n1" || mc.BindAddr != "127.0.0.1" || mc.BindPort != 7001 || mc.AdvertiseAddr != "10.0.0.1" || mc.AdvertisePort != 7002 {
		t.Errorf("addresses: name %q bind %s:%d advertise %s:%d", mc.Name, mc.BindAddr, mc.BindPort, mc.AdvertiseAddr, mc.AdvertisePort)
	}
	if mc.ProbeInterval != cfg.ProbeInterval || mc.ProbeTimeout != cfg.ProbeTimeout || mc.GossipInterval != cfg.GossipInterval ||
		mc.PushPullInterval != cfg.PushPullInterval || mc.SuspicionMult != cfg.SuspicionMult || mc.TCPTimeout != cfg.TCPTimeout {
		t.Errorf("timing not copied: %+v", mc)
	}
}

func TestJoinFailure(t *testing.T) {
	// Nobody listens on port 1 of loopback.
	cfg := fastConfig(t, "n1", "127.0.0.1:1")
	if m, err := Start(cfg); err == nil {
		_ = m.Shutdown()
		t.Fatal("joining an unreachable peer succeeded")
	}
}

// Three members converge; one crashes (Shutdown without Leave) and is seen
// dead; it restarts on the same address and is alive again; it leaves and is
// seen as left.
func TestClusterLifecycle(t *testing.T) {
	rec := &recorder{}
	cfg1 := fastConfig(t, "n1")
	cfg1.OnEvent = rec.add
	n1 := start(t, cfg1)
	n2 := start(t, fastConfig(t, "n2", n1.Addr()))
	n3 := start(t, fastConfig(t, "n3", n1.Addr()))
	all := []*Membership{n1, n2, n3}

	took := eventually(t, 10*time.Second, "3 alive members everywhere", func() bool {
		return allAlive(all, "n1", "n2", "n3")
	})
	t.Logf("converged in %v", took)
	for _, mem := range n2.Members() {
		if want := fmt.Sprintf(`{"http":"127.0.0.1:80%s"}`, mem.ID[1:]); string(mem.Meta) != want {
			t.Fatalf("meta of %s seen by n2: %q, want %q", mem.ID, mem.Meta, want)
		}
		if !strings.HasPrefix(mem.Addr, "127.0.0.1:") {
			t.Fatalf("addr of %s: %q", mem.ID, mem.Addr)
		}
	}
	eventually(t, 5*time.Second, "n1 got join events for all", func() bool {
		return rec.find(EventJoin, "n1", StateAlive) && rec.find(EventJoin, "n2", StateAlive) && rec.find(EventJoin, "n3", StateAlive)
	})

	// Meta updates propagate.
	if err := n2.SetMeta([]byte(`{"http":"127.0.0.1:9999"}`), time.Second); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "meta update seen by n1", func() bool {
		for _, mem := range n1.Members() {
			if mem.ID == "n2" && string(mem.Meta) == `{"http":"127.0.0.1:9999"}` {
				return rec.find(EventUpdate, "n2", StateAlive)
			}
		}
		return false
	})

	// Crash n3.
	addr3 := n3.Addr()
	if err := n3.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := n3.Shutdown(); err != nil { // idempotent
		t.Fatal(err)
	}
	if err := n3.Leave(time.Second); err != ErrShutdown {
		t.Fatalf("Leave after Shutdown: %v", err)
	}
	took = eventually(t, 10*time.Second, "n3 dead on n1 and n2", func() bool {
		s1, _ := stateOf(n1, "n3")
		s2, _ := stateOf(n2, "n3")
		return s1 == StateDead && s2 == StateDead
	})
	t.Logf("crash detected in %v", took)
	if !allAlive([]*Membership{n1, n2}, "n1", "n2") {
		t.Fatalf("alive after crash: %v %v", n1.Alive(), n2.Alive())
	}
	// Events are dispatched on their own goroutine: the leave event may
	// arrive after the state reads dead.
	eventually(t, 5*time.Second, "a leave event with state dead for n3", func() bool {
		return rec.find(EventLeave, "n3", StateDead)
	})

	// Restart n3 on the same address.
	cfg3 := fastConfig(t, "n3", n1.Addr())
	cfg3.BindAddr = addr3
	var n3b *Membership
	eventually(t, 10*time.Second, "n3 restarts on "+addr3, func() bool {
		m, err := Start(cfg3)
		if err != nil {
			t.Logf("restart: %v", err)
			return false
		}
		n3b = m
		return true
	})
	t.Cleanup(func() { _ = n3b.Shutdown() })
	took = eventually(t, 10*time.Second, "n3 alive again everywhere", func() bool {
		return allAlive([]*Membership{n1, n2, n3b}, "n1", "n2", "n3")
	})
	t.Logf("rejoin seen in %v", took)

	// Graceful leave of n2.
	if err := n2.Leave(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	took = eventually(t, 10*time.Second, "n2 left on n1 and n3", func() bool {
		s1, _ := stateOf(n1, "n2")
		s3, _ := stateOf(n3b, "n2")
		return s1 == StateLeft && s3 == StateLeft
	})
	t.Logf("leave seen in %v", took)
	if err := n2.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if !rec.find(EventLeave, "n2", StateLeft) && !rec.find(EventUpdate, "n2", StateLeft) {
		t.Fatal("no event with state left for n2")
	}
	// A loaded machine may suspect n3 for a moment: wait for the set.
	eventually(t, 5*time.Second, "n1 sees n1 and n3 alive after the leave", func() bool {
		return slices.Equal(n1.Alive(), []string{"n1", "n3"})
	})
}

// Events are delivered one at a time, in order, even with a slow consumer.
func TestEventsOrdered(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	active := 0
	cfg := fastConfig(t, "a1")
	cfg.OnEvent = func(e Event) {
		mu.Lock()
		active++
		if active > 1 {
			panic("concurrent OnEvent calls")
		}
		mu.Unlock()
		time.Sleep(5 * time.Millisecond) // slow consumer must not stall gossip
		mu.Lock()
		active--
		seen = append(seen, e.Type.String()+":"+e.Member.ID+":"+e.Member.State.String())
		mu.Unlock()
	}
	a := start(t, cfg)
	b := start(t, fastConfig(t, "a2", a.Addr()))
	eventually(t, 10*time.Second, "a2 alive on a1", func() bool { s, ok := stateOf(a, "a2"); return ok && s == StateAlive })
	if err := b.Leave(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	_ = b.Shutdown()
	eventually(t, 10*time.Second, "join then leave of a2 delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		j := slices.Index(seen, "join:a2:alive")
		l := slices.IndexFunc(seen, func(s string) bool { return strings.HasPrefix(s, "leave:a2:") })
		return j >= 0 && l > j
	})
}
