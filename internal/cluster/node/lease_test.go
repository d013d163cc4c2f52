package node

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	pb "github.com/counterd/counterd/api/counterd/cluster/v1"
	"github.com/counterd/counterd/internal/contract"
)

func init() {
	wireCases = append(wireCases,
		requestCase("lease", func() proto.Message { return new(pb.LeaseRequest) }, func(d *decoder, m proto.Message) leaseRequest { return d.leaseRequest(m.(*pb.LeaseRequest)) }),
		responseCase("lease response", pbLeaseResponse),
	)
}

func newTestClusterWith(t testing.TB, tune func(*Config), ids ...string) *testCluster {
	c := &testCluster{t: t, nodes: map[string]*testNode{}, tune: tune}
	t.Cleanup(c.closeAll)
	for _, id := range ids {
		c.start(id, "")
	}
	c.waitRing(ids...)
	return c
}

// cut isolates tn from the other nodes as a network partition would: its
// gossip stops (the others declare it dead; its own view of the members
// freezes, so it still believes it owns its ids), its peer server stops
// (calls to it are refused) and its calls to the others go to a closed
// port.
func (tn *testNode) cut(others ...string) {
	_ = tn.n.members.Load().Shutdown()
	for _, o := range others {
		tn.n.peers.set(o, Meta{GRPC: "127.0.0.1:1"})
	}
	tn.gs.Stop()
}

// opLog records when the successful calls of one kind of operation
// started, and the first failure after them.
type opLog struct {
	mu        sync.Mutex
	successes []time.Time // start of each call that succeeded
	lastErr   error
}

func (l *opLog) do(f func() error) {
	start := time.Now()
	err := f()
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil {
		l.successes = append(l.successes, start)
	} else {
		l.lastErr = err
	}
}

func (l *opLog) last() (time.Time, int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.successes) == 0 {
		return time.Time{}, 0, l.lastErr
	}
	return l.successes[len(l.successes)-1], len(l.successes), l.lastErr
}

// TestLeaseCutOwnerStopsBeforeNewOwner: n1 owns an id when it is cut off
// from n2 and n3. While the others detect it (about a second with the
// test's gossip timing), n1 keeps trying async and sync writes and reads
// of the id; n2 keeps trying sync writes, which reach the new owner once
// the ring dropped n1. The lease (1.5 s here, longer than detection, so
// that the new owner has to wait for it) must stop n1 from acknowledging
// a write or serving a read that started later than one lease after the
// cut, and the new owner's first acknowledgement must come after every
// operation n1 served: they never serve the id at the same time.
func TestLeaseCutOwnerStopsBeforeNewOwner(t *testing.T) {
	if testing.Short() {
		t.Skip("partitions an in-process cluster")
	}
	const lease = 1500 * time.Millisecond
	c := newTestClusterWith(t, func(cfg *Config) { cfg.LeaseDuration = lease }, "n1", "n2", "n3")
	ctx := context.Background()
	tn1 := c.node("n1")
	n1, n2 := tn1.n, c.node("n2").n
	id := ownedID(tn1, "n1", "lease:")
	if err := retryUnavailable(ctx, func() error {
		_, err := n2.Apply(ctx, contract.Op{Type: contract.OpAdd, ID: id, Delta: 1, Kind: contract.KindCounter}, syncWO)
		return err
	}); err != nil {
		t.Fatalf("write before the cut: %v", err)
	}

	tn1.cut("n2", "n3")
	cut := time.Now()
	async := contract.WriteOptions{Durability: contract.Async}
	var oldAsync, oldSync, oldRead opLog
	var newAck time.Time // the new owner's first acknowledged write returned
	stop := make(chan struct{})
	var wg sync.WaitGroup
	loop := func(f func()) {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(10 * time.Millisecond):
				}
				f()
			}
		})
	}
	opCtx := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 2*time.Second) }
	loop(func() {
		oc, cancel := opCtx()
		defer cancel()
		oldAsync.do(func() error {
			_, err := n1.Apply(oc, contract.Op{Type: contract.OpAdd, ID: id, Delta: 1}, async)
			return err
		})
	})
	loop(func() {
		oc, cancel := opCtx()
		defer cancel()
		oldSync.do(func() error {
			_, err := n1.Apply(oc, contract.Op{Type: contract.OpAdd, ID: id, Delta: 1}, syncWO)
			return err
		})
	})
	loop(func() {
		oc, cancel := opCtx()
		defer cancel()
		oldRead.do(func() error {
			_, err := n1.Get(oc, id)
			return err
		})
	})
	deadline := time.Now().Add(20 * time.Second)
	for newAck.IsZero() && time.Now().Before(deadline) {
		oc, cancel := opCtx()
		_, err := n2.Apply(oc, contract.Op{Type: contract.OpAdd, ID: id, Delta: 1000}, syncWO)
		cancel()
		if err == nil {
			newAck = time.Now()
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Let n1 keep trying a little after the new owner took over.
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	if newAck.IsZero() {
		t.Fatal("the new owner acknowledged no write within 20s of the cut")
	}
	t.Logf("new owner's first acknowledgement %v after the cut (n2's ring: %v)", newAck.Sub(cut).Round(time.Millisecond), n2.Ring().Nodes())
	for _, k := range []struct {
		name string
		log  *opLog
	}{{"async write", &oldAsync}, {"sync write", &oldSync}, {"read", &oldRead}} {
		last, count, lastErr := k.log.last()
		if count > 0 {
			t.Logf("n1: %d %ss served after the cut, the last started %v after it; then %v", count, k.name, last.Sub(cut).Round(time.Millisecond), lastErr)
		} else {
			t.Logf("n1: no %s served after the cut; %v", k.name, lastErr)
		}
		if count > 0 && !last.Before(cut.Add(lease)) {
			t.Errorf("n1 served a %s that started %v after the cut, beyond its %v lease", k.name, last.Sub(cut), lease)
		}
		if count > 0 && !last.Before(newAck) {
			t.Errorf("n1 served a %s that started after the new owner acknowledged a write", k.name)
		}
		if !errors.Is(lastErr, contract.ErrUnavailable) {
			t.Errorf("n1's %ss after its lease: %v, want unavailable", k.name, lastErr)
		}
	}
	if last, _, _ := oldRead.last(); last.IsZero() {
		t.Errorf("n1 served no read at all after the cut: the lease should let it serve until the lease runs out")
	}
	waited := 0.0
	for _, tn := range c.running() {
		if tn.id != "n1" {
			var m dto.Metric
			if err := tn.n.metrics.lease.WithLabelValues("takeover_waited").Write(&m); err != nil {
				t.Fatal(err)
			}
			waited += m.GetCounter().GetValue()
		}
	}
	if waited == 0 {
		t.Errorf("no survivor waited for n1's lease before serving its ids")
	}
}

// retryUnavailable runs f until it succeeds or fails with another error
// than ErrUnavailable, for up to 10s.
func retryUnavailable(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := f()
		if err == nil || !errors.Is(err, contract.ErrUnavailable) || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLeaseCutOwnerKeepsCRDTAdds: once n1 is cut off and its lease ran out, n1 (seeing everyone alive, as its gossip is frozen)
// still refuses every owner operation, because nobody renews its lease;
// pn adds, which need no owner, stay writable on it.
func TestLeaseCutOwnerKeepsCRDTAdds(t *testing.T) {
	if testing.Short() {
		t.Skip("partitions an in-process cluster")
	}
	c := newTestCluster(t, "n1", "n2", "n3")
	ctx := context.Background()
	tn1 := c.node("n1")
	n1 := tn1.n
	id := ownedID(tn1, "n1", "lease-minority:")
	tn1.cut("n2", "n3")
	eventually(t, 10*time.Second, "n1's lease runs out", func() bool { return !n1.leaseHeld() })
	if _, err := n1.Apply(ctx, contract.Op{Type: contract.OpAdd, ID: id, Delta: 1, Kind: contract.KindCounter}, contract.WriteOptions{Durability: contract.Async}); !errors.Is(err, contract.ErrUnavailable) {
		t.Errorf("async counter add on n1 without a lease: %v, want unavailable", err)
	}
	if _, err := n1.Get(ctx, id); !errors.Is(err, contract.ErrUnavailable) {
		t.Errorf("owner read on n1 without a lease: %v, want unavailable", err)
	}
	if _, err := n1.Apply(ctx, contract.Op{Type: contract.OpAdd, ID: "lease-minority:pn", Delta: 1, Kind: contract.KindPN}, contract.WriteOptions{Durability: contract.Async}); err != nil {
		t.Errorf("pn add on n1 without a lease: %v, want accepted (no owner needed)", err)
	}
}

// TestLeaseUntil checks the holder's arithmetic against a model: with M
// members, the lease runs until d after the latest round time t such that
// at least M/2 peers granted a round sent at or after t (forever when
// M/2 is 0, never with fewer grants).
func TestLeaseUntil(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var l leases
		l.init()
		members := rapid.IntRange(0, 7).Draw(t, "members")
		l.members.Store(int64(members))
		d := time.Duration(rapid.IntRange(1, 1000).Draw(t, "d"))
		grants := rapid.SliceOfN(rapid.IntRange(0, 10000), 0, 6).Draw(t, "grants")
		for i, g := range grants {
			l.got[string(rune('a'+i))] = time.Duration(g)
		}
		l.recomputeLocked(d)
		need := members / 2
		var want int64
		switch {
		case need == 0:
			want = math.MaxInt64
		case len(grants) < need:
			want = 0
		default:
			for _, g := range grants {
				n := 0
				for _, o := range grants {
					if o >= g {
						n++
					}
				}
				if n >= need {
					want = max(want, int64(time.Duration(g)+d))
				}
			}
		}
		if got := l.until.Load(); got != want {
			t.Fatalf("members %d, grants %v, d %v: until %d, want %d", members, grants, d, got, want)
		}
	})
}

// TestLeaseGrantsOnlyRingMembers: a node grants leases to members of its
// ring only, and reports the leases it granted to a node once that node is
// off its ring (until they run out).
func TestLeaseGrantsOnlyRingMembers(t *testing.T) {
	c := newTestCluster(t, "n1", "n2", "n3")
	n2 := c.node("n2").n
	if r := n2.serveLease(context.Background(), &leaseRequest{header: header{From: "n1"}}); !r.Granted || r.Wait != 0 {
		t.Fatalf("n2's answer to ring member n1: %+v, want granted, nothing to wait for", r)
	}
	if r := n2.serveLease(context.Background(), &leaseRequest{header: header{From: "stranger"}}); r.Granted {
		t.Fatalf("n2 granted a lease to a node off its ring: %+v", r)
	}
	c.kill("n1")
	c.waitRing("n2", "n3")
	// n1's renewals stopped with it; the grant above (or a later renewal)
	// may still run: the report says for how long, at most lease + drift.
	hold := n2.cfg.LeaseDuration + n2.cfg.LeaseDrift
	r := n2.serveLease(context.Background(), &leaseRequest{header: header{From: "n3"}})
	if r.Wait < 0 || r.Wait > hold {
		t.Fatalf("report after n1 left the ring: wait %v, want within [0, %v]", r.Wait, hold)
	}
	if r := n2.serveLease(context.Background(), &leaseRequest{header: header{From: "n1"}}); r.Granted {
		t.Fatalf("n2 granted a lease to n1 after dropping it from its ring: %+v", r)
	}
	// A fresh grant to a node, then it is off the ring: reported.
	n2.lease.mu.Lock()
	n2.lease.granted["n1"] = n2.lease.now()
	n2.lease.mu.Unlock()
	if r := n2.serveLease(context.Background(), &leaseRequest{header: header{From: "n3"}}); r.Wait <= n2.cfg.LeaseDuration {
		t.Fatalf("a lease granted to n1 just now is reported as running %v, want more than %v", r.Wait, n2.cfg.LeaseDuration)
	}
	if !slices.Contains(n2.Ring().Nodes(), "n3") {
		t.Fatal("n3 is off n2's ring")
	}
}

// TestLeasePeers: a renewal round asks M/2+1 of the other alive members
// (the M/2 grants a lease needs and a spare), in sorted order after this
// node, those whose last call failed or was refused last; every other
// alive member when wide, or when there are no more than that.
func TestLeasePeers(t *testing.T) {
	n := &Node{self: "n3", cfg: Config{LeaseDuration: time.Second}}
	n.lease.init()
	alive := []string{"n8", "n1", "n2", "n3", "n4", "n5", "n6", "n7"}
	n.lease.members.Store(8)
	check := func(what string, wide bool, want ...string) {
		t.Helper()
		if got := n.leasePeers(slices.Clone(alive), wide); !slices.Equal(got, want) {
			t.Fatalf("%s: %v, want %v", what, got, want)
		}
	}
	check("8 members", false, "n4", "n5", "n6", "n7", "n8")
	check("wide", true, "n4", "n5", "n6", "n7", "n8", "n1", "n2")
	n.lease.noteCall("n5", false)
	check("n5 refused", false, "n4", "n6", "n7", "n8", "n1")
	n.lease.noteCall("n5", true)
	check("n5 granted again", false, "n4", "n5", "n6", "n7", "n8")
	n.lease.members.Store(10) // two dead members count: 6 asked, of 7 alive others
	check("10 members", false, "n4", "n5", "n6", "n7", "n8", "n1")
	alive = []string{"n1", "n2", "n3"}
	n.lease.members.Store(3)
	check("3 members", false, "n1", "n2")
}

// TestLeaseIdleStopsRenewals: a node whose lease no owner operation has
// used for leaseIdle leases sends no renewal, lets its lease lapse, and
// gets one again for its next owner operation, which succeeds.
func TestLeaseIdleStopsRenewals(t *testing.T) {
	c := newTestClusterWith(t, func(cfg *Config) { cfg.LeaseDuration = 100 * time.Millisecond }, "n1", "n2", "n3")
	n1 := c.node("n1").n
	calls := func() float64 { return value(n1.metrics.lease.WithLabelValues("renewal_calls")) }
	if calls() == 0 {
		eventually(t, 5*time.Second, "a first renewal", func() bool { return calls() > 0 })
	}
	eventually(t, 30*time.Second, "renewals stop when idle", func() bool {
		before := calls()
		time.Sleep(5 * n1.cfg.LeaseDuration / 4) // five renewal periods
		return calls() == before
	})
	eventually(t, 5*time.Second, "the idle lease lapses", func() bool { return !n1.leaseHeld() })
	var id string
	for i := 0; id == ""; i++ {
		if cand := fmt.Sprintf("idle:%d", i); n1.Ring().Owner(cand) == "n1" {
			id = cand
		}
	}
	idle := calls()
	if _, err := n1.Apply(context.Background(), add(id, 1), syncWO); err != nil {
		t.Fatalf("owner write after idling: %v", err)
	}
	if calls() == idle {
		t.Fatal("the owner write was served without a renewal")
	}
}
