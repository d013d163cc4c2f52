package node

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
)

// checkDigests asserts the digest cache invariant on tn: every digest
// the cache would serve for a local state is the digest of that state.
// It returns how many states the cache holds a digest of.
func checkDigests(t *testing.T, tn *testNode) (hits int) {
	t.Helper()
	err := tn.n.store.EachMeta(context.Background(), func(id string, m engine.StateMeta) error {
		it, ok := tn.n.digests.get(id, m)
		if !ok {
			return nil
		}
		st, held, err := tn.n.export(id)
		if err != nil {
			return err
		}
		// A write may land between EachMeta and the export: only a state
		// whose Meta is still m must digest as cached.
		if held && st.Meta() == m {
			hits++
			if want := digestOf(st); it != want {
				t.Errorf("%s: the cache serves %+v for %s, the state digests as %+v", tn.id, it, id, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hits
}

func aeRound(t *testing.T, c *testCluster) {
	t.Helper()
	for _, tn := range c.running() {
		if err := tn.n.antiEntropy(context.Background()); err != nil {
			t.Logf("%s: anti-entropy: %v", tn.id, err)
		}
	}
}

// TestDigestCacheNeverStale: through writes of every replicated kind,
// deletes, expiries, a join (handoff into the new member and drops on
// the old holders) and anti-entropy rounds, no node's digest cache ever
// serves a digest other than its state's; the rounds do use it (states
// not written since the last round are not re-digested); and the
// replicas end equal.
func TestDigestCacheNeverStale(t *testing.T) {
	c := newClusterNoAntiEntropy(t, "n1", "n2", "n3")
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	write := func(i int) {
		tn := c.running()[rng.IntN(len(c.running()))]
		var op contract.Op
		switch k := rng.IntN(6); k {
		case 0, 1:
			op = add(fmt.Sprintf("dc:c:%d", rng.IntN(40)), 1)
		case 2:
			op = contract.Op{Type: contract.OpPFAdd, ID: fmt.Sprintf("dc:h:%d", rng.IntN(10)), Items: [][]byte{fmt.Appendf(nil, "u%d", i)}}
		case 3:
			op = contract.Op{Type: contract.OpAdd, ID: fmt.Sprintf("dc:pn:%d", rng.IntN(10)), Kind: contract.KindPN, Delta: 1}
		case 4:
			op = contract.Op{Type: contract.OpDelete, ID: fmt.Sprintf("dc:c:%d", rng.IntN(40))}
		case 5:
			op = contract.Op{Type: contract.OpExpire, ID: fmt.Sprintf("dc:c:%d", rng.IntN(40)), TTL: time.Hour}
		}
		if _, err := tn.n.Apply(ctx, op, syncWO); err != nil && !errors.Is(err, contract.ErrNotFound) {
			t.Logf("%s %v %s: %v", tn.id, op.Type, op.ID, err)
		}
	}
	step := func(writes int) {
		for i := 0; i < writes; i++ {
			write(i)
		}
		// Before the round (what it would send) and after it.
		for _, tn := range c.running() {
			checkDigests(t, tn)
		}
		aeRound(t, c)
		for _, tn := range c.running() {
			checkDigests(t, tn)
		}
	}
	for r := 0; r < 4; r++ {
		step(150)
	}
	// A round with no write in between digests nothing anew.
	aeRound(t, c)
	for _, tn := range c.running() {
		if hits := checkDigests(t, tn); hits == 0 {
			t.Errorf("%s: the digest cache holds nothing after quiet rounds", tn.id)
		}
	}
	c.start("n4", "")
	c.waitRing("n1", "n2", "n3", "n4")
	for r := 0; r < 3; r++ {
		step(100)
	}
	time.Sleep(300 * time.Millisecond) // handoff and drops settle
	aeRound(t, c)
	aeRound(t, c)
	for _, tn := range c.running() {
		checkDigests(t, tn)
	}
	assertReplicasEqual(t, c, "dc:")
}

// assertReplicasEqual: every replica of every id with prefix holds what
// its owner holds (the digest anti-entropy compares).
func assertReplicasEqual(t *testing.T, c *testCluster, prefix string) {
	t.Helper()
	s := c.node("n1").n.ring.Snapshot()
	by := map[string]map[string]digestItem{}
	for _, tn := range c.running() {
		m := map[string]digestItem{}
		err := tn.n.store.ExportAll(context.Background(), func(st State) error {
			m[st.ID] = digestOf(st)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		by[tn.id] = m
	}
	ids := map[string]bool{}
	for _, m := range by {
		for id := range m {
			if len(id) >= len(prefix) && id[:len(prefix)] == prefix {
				ids[id] = true
			}
		}
	}
	for id := range ids {
		reps := s.AppendReplicas(nil, id, 0)
		want, ok := by[reps[0]][id]
		for _, r := range reps[1:] {
			got, ok2 := by[r][id]
			if ok != ok2 || got != want {
				t.Errorf("%s: %s holds %+v (%v), %s holds %+v (%v)", id, reps[0], want, ok, r, got, ok2)
			}
		}
	}
}

// TestAntiEntropyRepairsWithWarmCache: with every digest cached, a replica
// whose state diverges behind the node's back (written to or dropped in
// its engine directly: no path of the node sees it) is repaired by the
// next round.
func TestAntiEntropyRepairsWithWarmCache(t *testing.T) {
	c := newClusterNoAntiEntropy(t, "n1", "n2", "n3")
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		if _, err := c.node("n1").n.Apply(ctx, add(fmt.Sprintf("dc:c:%d", i), 5), syncWO); err != nil {
			t.Fatal(err)
		}
	}
	aeRound(t, c)
	aeRound(t, c)
	for _, tn := range c.running() {
		if hits := checkDigests(t, tn); hits != 20 {
			t.Fatalf("%s: %d of 20 digests cached", tn.id, hits)
		}
	}
	// n2 loses dc:c:1; n3's dc:c:2 falls behind (an older state merged
	// into a fresh engine entry: what a replica that missed writes holds).
	st, _, _ := c.node("n2").eng.Export("dc:c:1")
	if ok, err := c.node("n2").eng.Drop(ctx, "dc:c:1", st.Version); !ok || err != nil {
		t.Fatalf("drop: %v %v", ok, err)
	}
	st, _, _ = c.node("n3").eng.Export("dc:c:2")
	if ok, err := c.node("n3").eng.Drop(ctx, "dc:c:2", st.Version); !ok || err != nil {
		t.Fatalf("drop: %v %v", ok, err)
	}
	if _, err := c.node("n3").eng.Apply(ctx, add("dc:c:2", 1), syncWO); err != nil {
		t.Fatal(err)
	}
	aeRound(t, c)
	aeRound(t, c)
	for _, tn := range c.running() {
		for _, id := range []string{"dc:c:1", "dc:c:2"} {
			st, ok, err := tn.eng.Export(id)
			if err != nil || !ok {
				t.Fatalf("%s: %s missing after repair: %v", tn.id, id, err)
			}
			v, err := tn.eng.Get(id)
			if err != nil || v.Value != 5 {
				t.Errorf("%s: %s = %d (v%d) after repair, want 5: %v", tn.id, id, v.Value, st.Version, err)
			}
		}
	}
	assertReplicasEqual(t, c, "dc:")
}

// TestAntiEntropyLeavesSettlingStates: a round leaves out the states
// written since the previous round began (their pushes are on their way;
// a repair would ship them and all their marks both ways for nothing),
// and compares them at the next one: a replica that lost a state written
// before is repaired at once, one that lost a state written since one
// round later. The engines' clock runs a second ahead at each step, so
// the stamps and the rounds' starts never share a tick.
func TestAntiEntropyLeavesSettlingStates(t *testing.T) {
	var ahead atomic.Int64
	c := startTestCluster(&testCluster{t: t, nodes: map[string]*testNode{}, antiEntropy: time.Hour,
		clock: func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }}, "n1", "n2", "n3")
	later := func() { ahead.Add(int64(time.Second)) }
	ctx := context.Background()
	if _, err := c.node("n1").n.Apply(ctx, add("ae:old", 5), syncWO); err != nil {
		t.Fatal(err)
	}
	later()
	aeRound(t, c)
	later()
	if _, err := c.node("n1").n.Apply(ctx, add("ae:new", 7), syncWO); err != nil {
		t.Fatal(err)
	}
	later()
	// n3 loses both behind the node's back (a lost push).
	for _, id := range []string{"ae:old", "ae:new"} {
		st, ok, err := c.node("n3").eng.Export(id)
		if !ok || err != nil {
			t.Fatalf("n3 lacks %s before the drop: %v", id, err)
		}
		if ok, err := c.node("n3").eng.Drop(ctx, id, st.Version); !ok || err != nil {
			t.Fatalf("drop %s: %v %v", id, ok, err)
		}
	}
	has := func(id string) bool {
		_, ok, err := c.node("n3").eng.Export(id)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	aeRound(t, c)
	if !has("ae:old") {
		t.Error("a state written before the last round is not repaired by the next")
	}
	if has("ae:new") {
		t.Error("a state written since the last round was compared (its replication is still under way)")
	}
	later()
	aeRound(t, c)
	if v, err := c.node("n3").eng.Get("ae:new"); err != nil || v.Value != 7 {
		t.Errorf("n3: ae:new = %d, %v one round after it settled; want 7", v.Value, err)
	}
	assertReplicasEqual(t, c, "ae:")
}

// TestDigestCacheInvalidatedByStoreWrites: a merge (replication,
// handoff, repairs), a merge with records and a drop through the node's
// store invalidate the cached digest of their ids even when the state's
// Meta does not move; a put by a computation that began before an
// invalidation is not kept.
func TestDigestCacheInvalidatedByStoreWrites(t *testing.T) {
	c := newClusterNoAntiEntropy(t, "n1")
	ctx := context.Background()
	n := c.node("n1").n
	if _, err := n.Apply(ctx, add("dc:x", 3), syncWO); err != nil {
		t.Fatal(err)
	}
	st, _, _ := n.export("dc:x")
	m := st.Meta()
	warm := func() {
		t.Helper()
		since := n.digests.begin()
		n.digests.put(m, digestOf(st), since)
		n.digests.end()
		if _, ok := n.digests.get("dc:x", m); !ok {
			t.Fatal("a put digest is not served")
		}
	}
	for _, w := range []struct {
		name string
		do   func() error
	}{
		{"merge", func() error { _, err := n.store.Merge(ctx, []State{st}, syncWO); return err }},
		{"merge records", func() error {
			_, err := n.store.MergeRecords(ctx, []State{st}, syncWO, func() []engine.StoredRecord { return nil })
			return err
		}},
		{"drop", func() error { _, err := n.store.Drop(ctx, "dc:x", st.Version+1); return err }},
	} {
		warm()
		if err := w.do(); err != nil {
			t.Fatalf("%s: %v", w.name, err)
		}
		if _, ok := n.digests.get("dc:x", m); ok {
			t.Errorf("%s: the digest is still served", w.name)
		}
	}
	since := n.digests.begin()
	n.digests.invalidate([]string{"dc:x"})
	n.digests.put(m, digestOf(st), since)
	n.digests.end()
	if _, ok := n.digests.get("dc:x", m); ok {
		t.Error("a digest computed before an invalidation was kept")
	}
}
