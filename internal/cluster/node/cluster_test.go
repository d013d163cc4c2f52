package node

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/counterd/counterd/internal/cluster/ring"
	"github.com/counterd/counterd/internal/contract"
)

var syncWO = contract.WriteOptions{Durability: contract.Sync}

func add(id string, delta int64) contract.Op {
	return contract.Op{Type: contract.OpAdd, ID: id, Delta: delta}
}

func TestAnyNodeAnswers(t *testing.T) {
	c := newTestCluster(t, "n1", "n2", "n3")
	ctx := context.Background()
	nodes := c.running()
	for i := 0; i < 60; i++ {
		id := fmt.Sprintf("views:%d", i)
		for j, tn := range nodes {
			res, err := tn.n.Apply(ctx, add(id, int64(j+1)), syncWO)
			if err != nil {
				t.Fatalf("apply %s on %s: %v", id, tn.id, err)
			}
			if res.Value != int64((j+1)*(j+2)/2) {
				t.Fatalf("apply %s on %s: value %d", id, tn.id, res.Value)
			}
		}
		for _, tn := range nodes {
			v, err := tn.n.Get(ctx, id)
			if err != nil || v.Value != 6 || v.Kind != contract.KindCounter {
				t.Fatalf("get %s on %s: %+v, %v", id, tn.id, v, err)
			}
		}
	}
	fwd := 0.0
	for _, tn := range nodes {
		fwd += value(tn.n.metrics.forwarded.WithLabelValues("apply", "ok"))
	}
	if fwd == 0 {
		t.Fatal("no op was forwarded")
	}
	// A sync write is acknowledged on a write quorum (2 of R=3); the third
	// replica gets it with the next push, so every id reaches all three.
	for _, tn := range nodes {
		eventually(t, 5*time.Second, tn.id+" holds all 60 ids", func() bool { return tn.eng.Len() == 60 })
	}
}

func TestForwardedRequestIsNotForwardedAgain(t *testing.T) {
	c := newTestCluster(t, "n1", "n2", "n3")
	ctx := context.Background()
	sender, receiver := c.node("n1"), c.node("n2")
	id := ""
	for i := 0; ; i++ { // an id owned by n3
		if id = fmt.Sprintf("k%d", i); sender.n.Ring().Owner(id) == "n3" {
			break
		}
	}
	_, err := sender.n.forwardApply(ctx, "n2", []contract.Op{add(id, 1)}, false, contract.WriteOptions{})
	var wo *WrongOwnerError
	if !errors.As(err, &wo) || wo.Owner != "n3" || !errors.Is(err, contract.ErrUnavailable) {
		t.Fatalf("forward to a non-owner: %v, want a WrongOwnerError naming n3", err)
	}
	if got := collected(receiver.n.metrics.forwarded); got != 0 {
		t.Fatalf("the receiver forwarded %d requests", got)
	}
	v, _ := c.node("n3").n.Get(ctx, id)
	if v.Exists {
		t.Fatal("the op was applied somewhere")
	}
	// Routed normally, the op takes one hop.
	if _, err := sender.n.Apply(ctx, add(id, 1), contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := value(sender.n.metrics.forwarded.WithLabelValues("apply", "ok")); got != 1 {
		t.Fatalf("forwarded %v times, want 1", got)
	}
}

func TestKillOwnerKeepsSyncWrites(t *testing.T) {
	c := newTestCluster(t, "n1", "n2", "n3")
	ctx := context.Background()
	n1 := c.node("n1")
	const ids, rounds = 40, 5
	for r := 0; r < rounds; r++ {
		for i := 0; i < ids; i++ {
			if _, err := n1.n.Apply(ctx, add(fmt.Sprintf("c:%d", i), 1), syncWO); err != nil {
				t.Fatal(err)
			}
		}
	}
	time.Sleep(100 * time.Millisecond) // let the pushes beyond the quorum land
	c.kill("n2")
	// Before n2 is declared dead, reads of the ids it owns fall back to
	// another replica.
	for i := 0; i < ids; i++ {
		id := fmt.Sprintf("c:%d", i)
		if v, err := n1.n.Get(ctx, id); err != nil || v.Value != rounds {
			t.Fatalf("right after the kill, %s: value %d, %v; want %d", id, v.Value, err, rounds)
		}
	}
	c.waitRing("n1", "n3")
	for _, tn := range c.running() {
		for i := 0; i < ids; i++ {
			id := fmt.Sprintf("c:%d", i)
			v, err := tn.n.Get(ctx, id)
			if err != nil || v.Value != rounds {
				t.Fatalf("after kill, %s on %s: value %d, %v; want %d", id, tn.id, v.Value, err, rounds)
			}
		}
	}
	// Writes continue on the survivors.
	for i := 0; i < ids; i++ {
		res, err := c.node("n3").n.Apply(ctx, add(fmt.Sprintf("c:%d", i), 1), syncWO)
		if err != nil || res.Value != rounds+1 {
			t.Fatalf("write after kill: %+v, %v", res, err)
		}
	}
}

func TestCRDTConvergesWithinASecond(t *testing.T) {
	c := newTestCluster(t, "n1", "n2", "n3")
	ctx := context.Background()
	nodes := c.running()
	kinds := []contract.Kind{contract.KindPN, contract.KindSharded}
	const perNode = 50
	for _, k := range kinds {
		id := "crdt:" + k.String()
		for _, tn := range nodes {
			for i := 0; i < perNode; i++ {
				op := add(id, 2)
				op.Kind = k
				if _, err := tn.n.Apply(ctx, op, contract.WriteOptions{}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	written := time.Now()
	want := int64(2 * perNode * len(nodes))
	eventually(t, time.Second, "pn and sharded converge", func() bool {
		for _, k := range kinds {
			for _, tn := range nodes {
				v, err := tn.n.Get(ctx, "crdt:"+k.String())
				if err != nil || v.Value != want {
					return false
				}
			}
		}
		return true
	})
	t.Logf("converged in %v", time.Since(written).Round(time.Millisecond))
}

func TestFanOut(t *testing.T) {
	c := newTestCluster(t, "n1", "n2", "n3")
	ctx := context.Background()
	n1 := c.node("n1")
	const count = 100
	for i := 0; i < count; i++ {
		if _, err := n1.n.Apply(ctx, add(fmt.Sprintf("agg:%03d", i), int64(i)), syncWO); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n1.n.Apply(ctx, add("other", 5), syncWO); err != nil {
		t.Fatal(err)
	}
	for _, tn := range c.running() {
		a, err := tn.n.Aggregate(ctx, "agg:")
		if err != nil || a.Count != count || a.Value != count*(count-1)/2 {
			t.Fatalf("aggregate on %s: %+v, %v", tn.id, a, err)
		}
		l, err := tn.n.Len(ctx)
		if err != nil || l != count+1 {
			t.Fatalf("len on %s: %d, %v", tn.id, l, err)
		}
		seen := scanAll(t, tn.n, "agg:*", 7)
		if len(seen) != count {
			t.Fatalf("scan on %s saw %d ids, want %d", tn.id, len(seen), count)
		}
		for id, k := range seen {
			if k != 1 {
				t.Fatalf("scan on %s listed %s %d times", tn.id, id, k)
			}
		}
	}
}

func TestBatchSplitsByOwner(t *testing.T) {
	c := newTestCluster(t, "n1", "n2", "n3")
	ctx := context.Background()
	n1 := c.node("n1")
	var ops []contract.Op
	for i := 0; i < 30; i++ {
		ops = append(ops, add(fmt.Sprintf("b:%d", i), int64(i+1)))
	}
	res, err := n1.n.ApplyBatch(ctx, ops, syncWO)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.ID != ops[i].ID || r.Value != int64(i+1) {
			t.Fatalf("result %d: %+v", i, r)
		}
	}
	// A failing op is reported at its index in the whole batch.
	bad := append([]contract.Op(nil), ops...)
	bad[17] = contract.Op{Type: contract.OpHAdd, ID: ops[17].ID, Fields: nil}
	_, err = n1.n.ApplyBatch(ctx, bad, syncWO)
	var be *contract.BatchError
	if !errors.As(err, &be) || be.Index != 17 {
		t.Fatalf("bad batch: %v, want a BatchError at 17", err)
	}
	// Idempotency keys travel with the op.
	wo := contract.WriteOptions{IdempotencyKey: "k1"}
	r1, err := c.node("n2").n.Apply(ctx, add("idem", 1), wo)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := c.node("n3").n.Apply(ctx, add("idem", 1), wo)
	if err != nil || !r2.Replayed || r2.Value != r1.Value {
		t.Fatalf("retry: %+v, %v; first %+v", r2, err, r1)
	}
}

// value reads a counter or gauge.
func value(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		panic(err)
	}
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}

// collected counts the series a collector has.
func collected(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric, 100)
	go func() { c.Collect(ch); close(ch) }()
	k := 0
	for range ch {
		k++
	}
	return k
}

// scanAll pages through a cluster scan.
func scanAll(t *testing.T, n *Node, match string, count int) map[string]int {
	t.Helper()
	seen := map[string]int{}
	var cursor uint64
	for {
		ids, next, err := n.Scan(context.Background(), cursor, match, count)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			seen[id]++
		}
		if cursor = next; cursor == 0 {
			return seen
		}
	}
}

// TestKillOwnerUnderLoad kills a node while keyed sync adds run through the
// others: no acknowledged add may be lost, and a retry whose first attempt
// applied on the dead owner must replay, not apply again (the value is
// exact unless an add gave up after all its retries).
func TestKillOwnerUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-node membership changes")
	}
	c := newTestCluster(t, "n1", "n2", "n3")
	l := startLoad(c, 20, 0, 3, "n2") // clients talk to the survivors
	time.Sleep(300 * time.Millisecond)
	c.kill("n2")
	c.waitRing("n1", "n3")
	time.Sleep(300 * time.Millisecond)
	l.finish()
	ctx := context.Background()
	for _, id := range l.ids {
		for _, tn := range c.running() {
			v, err := tn.n.Get(ctx, id)
			acked, started := l.acked[id].Load(), l.started[id].Load()
			if err != nil || v.Value < acked || v.Value > started {
				t.Fatalf("%s on %s: %d (%v), acknowledged %d, attempted %d", id, tn.id, v.Value, err, acked, started)
			}
		}
	}
}

// TestStaleRingRetriesOnce: a sender with a stale ring forwards to a node
// that does not own the id; that node answers wrong owner naming the
// owner, and the sender retries there once.
func TestStaleRingRetriesOnce(t *testing.T) {
	c := newTestCluster(t, "n1", "n2", "n3")
	ctx := context.Background()
	n1 := c.node("n1").n
	id := idOwnedBy(n1, "n3", "stale:")
	stale := ring.New(ring.Config{})
	stale.Set([]string{"n1", "n2"})
	if stale.Owner(id) != "n2" {
		id = "" // find an id n3 owns now and n2 owned without n3
		for i := 0; id == ""; i++ {
			if k := fmt.Sprintf("stale:%d", i); n1.Ring().Owner(k) == "n3" && stale.Owner(k) == "n2" {
				id = k
			}
		}
	}
	// n3 fences the id now: later, n1's stale ring would hold the fence.
	if _, err := c.node("n3").n.Get(ctx, id); err != nil {
		t.Fatal(err)
	}
	n1.setRing([]string{"n1", "n2"}, true) // as if n1 had not seen n3 yet
	res, err := n1.Apply(ctx, add(id, 1), contract.WriteOptions{})
	if err != nil || res.Value != 1 {
		t.Fatalf("apply through a stale ring: %+v, %v", res, err)
	}
	m := n1.metrics.forwarded
	if value(m.WithLabelValues("apply", "wrong_owner")) != 1 || value(m.WithLabelValues("apply", "ok")) != 1 {
		t.Fatal("want one wrong-owner answer, then one forward that succeeded")
	}
	n1.refresh()
	if v, err := c.node("n3").n.Get(ctx, id); err != nil || v.Value != 1 {
		t.Fatalf("owner reads %d, %v", v.Value, err)
	}
}
