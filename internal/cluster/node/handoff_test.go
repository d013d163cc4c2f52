package node

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"pgregory.net/rapid"

	"github.com/counterd/counterd/internal/cluster/ring"
	"github.com/counterd/counterd/internal/contract"
)

// load writes to counter ids (sync, keyed, retried) and pn ids (async,
// unkeyed, applied locally) through random running nodes, counting what
// was acknowledged.
type load struct {
	c       *testCluster
	acked   map[string]*atomic.Int64 // adds acknowledged
	started map[string]*atomic.Int64 // adds attempted (with retries, counted once)
	avoid   string                   // a node clients do not send to
	ids     []string
	kinds   map[string]contract.Kind
	errors  atomic.Int64
	stop    chan struct{}
	wg      sync.WaitGroup
}

// startLoad starts workers; clients never send to avoid ("" = none).
func startLoad(c *testCluster, counters, pns, workers int, avoid string) *load {
	l := &load{c: c, avoid: avoid, acked: map[string]*atomic.Int64{}, started: map[string]*atomic.Int64{}, kinds: map[string]contract.Kind{}, stop: make(chan struct{})}
	for i := 0; i < counters; i++ {
		l.addID(fmt.Sprintf("load:c:%d", i), contract.KindCounter)
	}
	for i := 0; i < pns; i++ {
		l.addID(fmt.Sprintf("load:pn:%d", i), contract.KindPN)
	}
	for w := 0; w < workers; w++ {
		l.wg.Add(1)
		go l.work(w)
	}
	return l
}

func (l *load) addID(id string, k contract.Kind) {
	l.ids = append(l.ids, id)
	l.kinds[id] = k
	l.acked[id] = new(atomic.Int64)
	l.started[id] = new(atomic.Int64)
}

func (l *load) work(w int) {
	defer l.wg.Done()
	for seq := 0; ; seq++ {
		select {
		case <-l.stop:
			return
		default:
		}
		id := l.ids[rand.IntN(len(l.ids))]
		op := contract.Op{Type: contract.OpAdd, ID: id, Delta: 1, Kind: l.kinds[id]}
		wo := contract.WriteOptions{}
		if l.kinds[id] == contract.KindCounter {
			wo = contract.WriteOptions{Durability: contract.Sync, IdempotencyKey: fmt.Sprintf("w%d-%d", w, seq)}
		}
		l.started[id].Add(1)
		if l.apply(op, wo) {
			l.acked[id].Add(1)
		}
	}
}

// apply retries keyed ops until they succeed (ring changes answer
// retryable errors meanwhile); unkeyed ones are tried once.
func (l *load) apply(op contract.Op, wo contract.WriteOptions) bool {
	for try := 0; try < 200; try++ {
		nodes := slices.DeleteFunc(l.c.running(), func(tn *testNode) bool { return tn.id == l.avoid })
		tn := nodes[rand.IntN(len(nodes))]
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err := tn.n.Apply(ctx, op, wo)
		cancel()
		if err == nil {
			return true
		}
		l.errors.Add(1)
		if wo.IdempotencyKey == "" {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

func (l *load) finish() {
	close(l.stop)
	l.wg.Wait()
}

// check waits until every running node reads every id at its acked count.
func (l *load) check(t *testing.T, within time.Duration) {
	t.Helper()
	ctx := context.Background()
	var last string
	deadline := time.Now().Add(within)
	for {
		last = ""
		for _, tn := range l.c.running() {
			for _, id := range l.ids {
				v, err := tn.n.Get(ctx, id)
				if want := l.acked[id].Load(); err != nil || v.Value != want {
					last = fmt.Sprintf("%s on %s: %d (%v), want %d", id, tn.id, v.Value, err, want)
					break
				}
			}
			if last != "" {
				break
			}
		}
		if last == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not converged within %v: %s", within, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestHandoff3To4To3UnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-node membership changes")
	}
	c := newTestCluster(t, "n1", "n2", "n3")
	l := startLoad(c, 20, 5, 3, "")
	time.Sleep(300 * time.Millisecond)

	c.start("n4", "")
	c.waitRing("n1", "n2", "n3", "n4")
	time.Sleep(500 * time.Millisecond)
	c.leave("n4")
	c.waitRing("n1", "n2", "n3")
	time.Sleep(300 * time.Millisecond)
	l.finish()

	total := int64(0)
	for _, a := range l.acked {
		total += a.Load()
	}
	t.Logf("%d writes acknowledged, %d retryable errors", total, l.errors.Load())
	if total == 0 {
		t.Fatal("no write went through")
	}
	l.check(t, 2*time.Second)
	n1 := c.node("n1").n
	sent, bytes := value(n1.metrics.handoff.WithLabelValues("sent")), value(n1.metrics.handoffBytes)
	if sent == 0 {
		t.Error("n1 handed nothing off")
	}
	// Each state handed off counts at least its id's bytes.
	if bytes < sent*float64(len("load:c:0")) {
		t.Errorf("n1 handed off %v states in %v bytes", sent, bytes)
	}
}

func TestRejoinAfterKill(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-node membership changes")
	}
	c := newTestCluster(t, "n1", "n2", "n3")
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		if _, err := c.node("n1").n.Apply(ctx, add(fmt.Sprintf("r:%d", i), 1), syncWO); err != nil {
			t.Fatal(err)
		}
	}
	dir := c.node("n2").dir
	c.kill("n2")
	c.waitRing("n1", "n3")
	// The survivors export the crashed member (the node-down alert).
	if got := membersByState(t, c.node("n1").n); got["alive"] != 2 || got["dead"] != 1 {
		t.Errorf("counterd_cluster_members on n1 after n2 crashed: %v, want 2 alive, 1 dead", got)
	}
	for i := 0; i < 20; i++ {
		if _, err := c.node("n3").n.Apply(ctx, add(fmt.Sprintf("r:%d", i), 1), syncWO); err != nil {
			t.Fatal(err)
		}
	}
	c.start("n2", dir)
	c.waitRing("n1", "n2", "n3")
	for _, tn := range c.running() {
		for i := 0; i < 20; i++ {
			v, err := tn.n.Get(ctx, fmt.Sprintf("r:%d", i))
			if err != nil || v.Value != 2 {
				t.Fatalf("r:%d on %s after rejoin: %d, %v", i, tn.id, v.Value, err)
			}
		}
	}
}

// membersByState gathers n's counterd_cluster_members gauge.
func membersByState(t *testing.T, n *Node) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(n.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "counterd_cluster_members" {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	return out
}

// TestHandoffTargetsPassedRings: a handoff counts every ring installed
// since the last completed one. n3 leaves and rejoins while n1's handoff
// is busy, so n1 sees one change from {n1,n2,n3} to {n1,n2,n3}: with the
// ring in between among the bases, n1 sends n3 the states it replicates
// (n1 may have taken writes for them as owner meanwhile); with the first
// ring alone, nothing. And as a property: the targets from several bases
// are the union of the targets from each, within the new replicas.
func TestHandoffTargetsPassedRings(t *testing.T) {
	snap := func(nodes ...string) *ring.Snapshot {
		r := ring.New(ring.Config{ReplicationFactor: 2})
		r.Set(nodes)
		return r.Snapshot()
	}
	full, without := snap("n1", "n2", "n3"), snap("n1", "n2")
	var h handoffPlan
	toN3 := 0
	for i := 0; i < 300; i++ {
		id := fmt.Sprintf("t:%d", i)
		reps := full.Replicas(id, 0)
		if !slices.Contains(reps, "n1") {
			continue // a state n1 holds without replicating it goes to every replica anyway
		}
		if single, _ := h.targets("n1", []*ring.Snapshot{full}, full, id); len(single) != 0 {
			t.Fatalf("%s: same ring, targets %v", id, single)
		}
		got, _ := h.targets("n1", []*ring.Snapshot{full, without}, full, id)
		if want := slices.Contains(reps, "n3"); want != slices.Contains(got, "n3") {
			t.Fatalf("%s (replicas %v): targets %v; n3 is a target: %v, want %v", id, reps, got, !want, want)
		}
		if slices.Contains(got, "n3") {
			toN3++
		}
	}
	if toN3 == 0 {
		t.Fatal("no id both on n1 and n3: the case was not played")
	}
	rapid.Check(t, func(t *rapid.T) {
		all := []string{"a", "b", "c", "d", "e"}
		set := func(label string) *ring.Snapshot {
			nodes := rapid.SliceOfNDistinct(rapid.SampledFrom(all), 1, len(all), rapid.ID[string]).Draw(t, label)
			return snap(nodes...)
		}
		olds := []*ring.Snapshot{set("prev")}
		for i := rapid.IntRange(0, 3).Draw(t, "passed"); i > 0; i-- {
			olds = append(olds, set("passed ring"))
		}
		cur, self := set("cur"), rapid.SampledFrom(all).Draw(t, "self")
		id := rapid.StringMatching(`[a-z]{1,6}`).Draw(t, "id")
		var h, one handoffPlan
		got, _ := h.targets(self, olds, cur, id)
		var union []string
		for _, o := range olds {
			part, _ := one.targets(self, []*ring.Snapshot{o}, cur, id)
			union = append(union, part...)
		}
		slices.Sort(union)
		union = slices.Compact(union)
		got = slices.Sorted(slices.Values(got))
		if !slices.Equal(got, union) {
			t.Fatalf("targets %v, union of the single-base targets %v", got, union)
		}
		for _, p := range got {
			if p == self || !slices.Contains(cur.Replicas(id, 0), p) {
				t.Fatalf("target %s is self or not a replica of %s in cur", p, id)
			}
		}
	})
}

// drainMarker marks the context of the drain in TestDrainRetriesUnacknowledgedHandoff.
type drainMarker struct{}

// TestDrainRetriesUnacknowledgedHandoff: with one replica per id, a
// draining node is the only holder of its ids. Each peer refuses the first
// two handoff pushes of the drain (and every push of the background
// handoff loop, which would otherwise hand the ids off behind the drain's
// back), so the drain's first attempt fails. Drain still succeeds, by
// retrying the peers that did not acknowledge, and every id ends on its new
// owner at its value.
func TestDrainRetriesUnacknowledgedHandoff(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-node membership changes")
	}
	c := &testCluster{t: t, nodes: map[string]*testNode{}, tune: func(cfg *Config) { cfg.ReplicationFactor = 1 }}
	startTestCluster(c, "n1", "n2", "n3", "n4")
	ctx := context.Background()
	n4 := c.node("n4")
	want := map[string]int64{}
	for i := 0; len(want) < 30; i++ {
		if id := fmt.Sprintf("drain:%d", i); n4.n.Ring().Owner(id) == "n4" {
			want[id] = int64(i + 1)
			if _, err := n4.n.Apply(ctx, add(id, want[id]), syncWO); err != nil {
				t.Fatal(err)
			}
		}
	}
	const refused = 2 // drain pushes each peer refuses
	var mu sync.Mutex
	drainPushes := map[string]int{}
	refuse := func(ctx context.Context, self, peer string) error {
		if self != "n4" {
			return nil
		}
		if ctx.Value(drainMarker{}) == nil {
			return fmt.Errorf("test: %s refuses the background handoff", peer)
		}
		mu.Lock()
		defer mu.Unlock()
		if drainPushes[peer]++; drainPushes[peer] <= refused {
			return fmt.Errorf("test: %s refuses drain push %d", peer, drainPushes[peer])
		}
		return nil
	}
	knobs.handoffPush.Store(&refuse)
	t.Cleanup(func() { knobs.handoffPush.Store(nil) })

	tn := c.remove("n4")
	tn.shutdown(func() {
		dctx, cancel := context.WithTimeout(context.WithValue(ctx, drainMarker{}, true), 30*time.Second)
		defer cancel()
		if err := tn.n.Drain(dctx); err != nil {
			t.Errorf("drain n4: %v", err)
		}
	})
	mu.Lock()
	for peer, k := range drainPushes {
		if k <= refused {
			t.Errorf("the drain pushed to %s %d times, want more than the %d it refused", peer, k, refused)
		}
	}
	if len(drainPushes) == 0 {
		t.Error("the drain pushed nothing")
	}
	mu.Unlock()
	c.waitRing("n1", "n2", "n3")
	for id, w := range want {
		owner := c.node(c.node("n1").n.Ring().Owner(id))
		if _, ok, err := owner.eng.Export(id); err != nil || !ok {
			t.Errorf("%s is not on its new owner %s: %v", id, owner.id, err)
			continue
		}
		if v, err := owner.n.Get(ctx, id); err != nil || v.Value != w {
			t.Errorf("%s on %s: %d, %v", id, owner.id, v.Value, err)
		}
	}
}
