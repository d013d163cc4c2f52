package node

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/counterd/counterd/internal/cluster/ring"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/ratelimit"
)

func newTestRateLimit(t testing.TB, eng *engine.Engine, id string) RateLimit {
	t.Helper()
	lim, err := ratelimit.New(ratelimit.Config{KeepKeys: true, EvictInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := ratelimit.OpenPolicyLog(id, EnginePolicies(eng))
	if err != nil {
		t.Fatal(err)
	}
	return RateLimit{Limiter: lim, Policies: pl}
}

// newRateLimitCluster is newTestCluster with a Limiter and a PolicyLog on
// every node, replicating limiter state every replication (negative:
// never, so that only handoff moves it).
func newRateLimitCluster(t testing.TB, replication time.Duration, ids ...string) *testCluster {
	c := &testCluster{t: t, nodes: map[string]*testNode{}, rl: true, rlReplication: replication}
	t.Cleanup(c.closeAll)
	for _, id := range ids {
		c.start(id, "")
	}
	c.waitRing(ids...)
	return c
}

// rlLimits are limits whose state would not change within the test by
// itself (periods of hours or a day), one per algorithm.
var rlLimits = []ratelimit.Limit{
	{Name: "fixed", Algorithm: ratelimit.FixedWindow, Limit: 10, Period: 24 * time.Hour},
	{Name: "sliding", Algorithm: ratelimit.SlidingWindow, Limit: 10, Period: time.Hour},
	{Name: "log", Algorithm: ratelimit.SlidingLog, Limit: 10, Period: time.Hour},
	{Name: "gcra", Algorithm: ratelimit.TokenBucket, Limit: 10, Period: time.Hour},
}

// keyMoving returns a key owned by from in the ring of nodes before and
// by to in the ring of nodes after ("" to: any other node).
func keyMoving(t testing.TB, before, after []string, from, to string) string {
	t.Helper()
	rb, ra := ring.New(ring.Config{}), ring.New(ring.Config{})
	rb.Set(before)
	ra.Set(after)
	for i := range 100000 {
		k := fmt.Sprintf("rl:user:%d", i)
		if rb.Owner(k) == from && ra.Owner(k) != from && (to == "" || ra.Owner(k) == to) {
			return k
		}
	}
	t.Fatalf("no key moves from %s to %q", from, to)
	return ""
}

// admit runs n checks of cost 1 on l and returns how many passed.
func admit(t testing.TB, l *ratelimit.Limiter, key string, lim ratelimit.Limit, n int) int {
	t.Helper()
	ok := 0
	for range n {
		s, err := l.Check(key, lim, 1)
		if err != nil {
			t.Fatal(err)
		}
		if s.Allowed {
			ok++
		}
	}
	return ok
}

// TestRateLimitHoldsAcrossGracefulLeave: limit 10, 6 admitted on the
// key's owner, the owner leaves (drain), and the new owner admits exactly
// the 4 left, for every algorithm.
func TestRateLimitHoldsAcrossGracefulLeave(t *testing.T) {
	c := newRateLimitCluster(t, -1, "n1", "n2", "n3")
	key := keyMoving(t, []string{"n1", "n2", "n3"}, []string{"n2", "n3"}, "n1", "")
	owner := c.node("n1")
	for _, lim := range rlLimits {
		if got := admit(t, owner.rl.Limiter, key, lim, 6); got != 6 {
			t.Fatalf("%s: %d of 6 admitted on the owner", lim.Name, got)
		}
	}
	c.leave("n1")
	c.waitRing("n2", "n3")
	next := c.node(owner.n.Ring().Owner(key)) // n1's last ring is the one without it
	if next == nil {
		t.Fatalf("new owner of %q unknown", key)
	}
	if o := c.node("n2").n.Ring().Owner(key); o != next.id {
		t.Fatalf("the nodes disagree on the new owner: %s vs %s", o, next.id)
	}
	for _, lim := range rlLimits {
		if got := admit(t, next.rl.Limiter, key, lim, 10); got != 4 {
			t.Errorf("%s: the new owner %s admitted %d after the leave, want 4 (limit 10, 6 before)", lim.Name, next.id, got)
		}
	}
}

// TestRateLimitFollowsJoin: a node that joins and takes a key over gets
// the old owner's state (handoff after the ring change).
func TestRateLimitFollowsJoin(t *testing.T) {
	c := newRateLimitCluster(t, -1, "n1", "n2")
	key := keyMoving(t, []string{"n1", "n2"}, []string{"n1", "n2", "n3"}, "n1", "n3")
	lim := rlLimits[1]
	if got := admit(t, c.node("n1").rl.Limiter, key, lim, 6); got != 6 {
		t.Fatalf("%d of 6 admitted on the owner", got)
	}
	n3 := c.start("n3", "")
	c.waitRing("n1", "n2", "n3")
	eventually(t, 10*time.Second, "state handed to n3", func() bool {
		s, err := n3.rl.Limiter.Check(key, lim, 0)
		return err == nil && s.Remaining == 4
	})
	if got := admit(t, n3.rl.Limiter, key, lim, 10); got != 4 {
		t.Errorf("n3 admitted %d after the join, want 4", got)
	}
}

// TestPoliciesReplicateAndPersist: a policy written on one node reaches
// every node, a deletion too, a node that joins later gets them, and a
// node's policies are on its disk.
func TestPoliciesReplicateAndPersist(t *testing.T) {
	ctx := context.Background()
	c := newRateLimitCluster(t, 0, "n1", "n2", "n3")
	p := ratelimit.Policy{Name: "api", Match: "api:*", Algorithm: ratelimit.TokenBucket, Limit: 5, Period: time.Second, Cost: 1}
	q := ratelimit.Policy{Name: "login", Namespace: "login", Algorithm: ratelimit.FixedWindow, Limit: 3, Period: time.Minute, Cost: 1}
	if err := c.node("n1").rl.Policies.PutPolicy(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := c.node("n2").rl.Policies.PutPolicy(ctx, q); err != nil {
		t.Fatal(err)
	}
	samePolicies := func(want ...ratelimit.Policy) func() bool {
		return func() bool {
			for _, tn := range c.running() {
				if got, err := tn.rl.Policies.LoadPolicies(ctx); err != nil || !slices.Equal(got, want) {
					return false
				}
			}
			return true
		}
	}
	eventually(t, 5*time.Second, "policies on every node", samePolicies(p, q))
	if ok, err := c.node("n3").rl.Policies.DeletePolicy(ctx, "api"); err != nil || !ok {
		t.Fatalf("DeletePolicy = %v, %v", ok, err)
	}
	eventually(t, 5*time.Second, "deletion on every node", samePolicies(q))

	c.start("n4", "")
	c.waitRing("n1", "n2", "n3", "n4")
	eventually(t, 5*time.Second, "policies on the node that joined", samePolicies(q))

	// n2's policies are on its disk: reopened alone, it has them.
	dir := c.node("n2").dir
	c.kill("n2")
	ecfg := engine.DefaultConfig()
	ecfg.Dir, ecfg.NodeID, ecfg.Logger = dir, "n2", testLogger("n2")
	eng, err := engine.Open(ecfg)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	pl, err := ratelimit.OpenPolicyLog("n2", EnginePolicies(eng))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := pl.LoadPolicies(ctx); err != nil || !slices.Equal(got, []ratelimit.Policy{q}) {
		t.Fatalf("n2 reopened has %+v, %v; want %+v", got, err, q)
	}
}

// TestRateLimitSurvivesOwnerCrash: the owner's state reaches the key's
// next replica within a replication round; when the owner dies that
// replica owns the key and admits only what is left.
func TestRateLimitSurvivesOwnerCrash(t *testing.T) {
	c := newRateLimitCluster(t, 200*time.Millisecond, "n1", "n2", "n3")
	key := keyMoving(t, []string{"n1", "n2", "n3"}, []string{"n2", "n3"}, "n1", "")
	lim := rlLimits[3]
	if got := admit(t, c.node("n1").rl.Limiter, key, lim, 6); got != 6 {
		t.Fatalf("%d of 6 admitted on the owner", got)
	}
	replica := c.node(c.node("n1").n.Ring().Replicas(key, 2)[1])
	eventually(t, 5*time.Second, "state replicated", func() bool {
		s, err := replica.rl.Limiter.Check(key, lim, 0)
		return err == nil && s.Remaining == 4
	})
	c.kill("n1")
	c.waitRing("n2", "n3")
	if o := replica.n.Ring().Owner(key); o != replica.id {
		t.Fatalf("after the crash %s owns %q, not its replica %s", o, key, replica.id)
	}
	if got := admit(t, replica.rl.Limiter, key, lim, 10); got != 4 {
		t.Errorf("the new owner admitted %d after the crash, want 4", got)
	}
}

// TestRateLimitNonOwnerChargesReachOwner: checks decided on a node that
// does not own the key (a fallback while the owner was unreachable, or a
// stale ring) reach the owner within a replication round.
func TestRateLimitNonOwnerChargesReachOwner(t *testing.T) {
	c := newRateLimitCluster(t, 200*time.Millisecond, "n1", "n2")
	key := keyMoving(t, []string{"n1", "n2"}, []string{"n2"}, "n1", "n2")
	lim := rlLimits[0]
	if got := admit(t, c.node("n2").rl.Limiter, key, lim, 6); got != 6 {
		t.Fatalf("%d of 6 admitted on the non-owner", got)
	}
	eventually(t, 5*time.Second, "charges on the owner", func() bool {
		s, err := c.node("n1").rl.Limiter.Check(key, lim, 0)
		return err == nil && s.Remaining == 4
	})
}

// TestRateLimitReplicationQuiesces: a change is replicated once; the copy
// on the replica is not sent back and forth.
func TestRateLimitReplicationQuiesces(t *testing.T) {
	c := newRateLimitCluster(t, 50*time.Millisecond, "n1", "n2")
	key := keyMoving(t, []string{"n1", "n2"}, []string{"n2"}, "n1", "n2")
	admit(t, c.node("n1").rl.Limiter, key, rlLimits[0], 3)
	replicated := func() float64 {
		sum := 0.0
		for _, tn := range c.running() {
			var m dto.Metric
			if err := tn.n.metrics.handoff.WithLabelValues("limits_replicated").Write(&m); err != nil {
				t.Fatal(err)
			}
			sum += m.GetCounter().GetValue()
		}
		return sum
	}
	eventually(t, 5*time.Second, "one entry replicated", func() bool { return replicated() >= 1 })
	time.Sleep(500 * time.Millisecond) // ten rounds
	if got := replicated(); got != 1 {
		t.Fatalf("%v entries replicated for one change, want 1", got)
	}
}

// TestEntryChunks: chunks keep every entry in order and stay within the
// call budget unless one entry alone is above it.
func TestEntryChunks(t *testing.T) {
	var ents []ratelimit.Entry
	for i := range 20000 {
		e := ratelimit.Entry{Key: fmt.Sprint(i)}
		if i%5000 == 7 {
			e.Log = make([][2]int64, 65536)
		}
		ents = append(ents, e)
	}
	var got []ratelimit.Entry
	for _, c := range entryChunks(ents) {
		size := 0
		for _, e := range c {
			size += 150 + 25*len(e.Log)
		}
		if size > maxBytesPerCall && len(c) > 1 {
			t.Fatalf("chunk of %d entries, %d bytes", len(c), size)
		}
		got = append(got, c...)
	}
	if !slices.EqualFunc(got, ents, func(a, b ratelimit.Entry) bool { return a.Key == b.Key }) {
		t.Fatal("chunks lost or reordered entries")
	}
}
