package node

import (
	"context"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
)

// TestKeyedAddAppliedTwiceIsTakenBack: a keyed pn/sharded add applied
// durably on n1, which dies before its record reaches anyone, is retried
// by the client through n2, which cannot know and applies it again. When
// n1 restarts on its data it offers the records it finds on disk; n2 sees
// that n1 applied the add first and takes its own back, so every node
// reads the add once. Repeating the retry afterwards replays everywhere.
func TestKeyedAddAppliedTwiceIsTakenBack(t *testing.T) {
	for _, kind := range []contract.Kind{contract.KindPN, contract.KindSharded} {
		t.Run(kind.String(), func(t *testing.T) {
			c := newTestCluster(t, "n1", "n2", "n3")
			ctx := context.Background()
			id := "twice:" + kind.String()
			base := contract.Op{Type: contract.OpAdd, ID: id, Delta: 1, Kind: kind}
			if _, err := c.node("n3").n.Apply(ctx, base, syncWO); err != nil {
				t.Fatal(err)
			}
			op := base
			op.Delta = 7
			wo := contract.WriteOptions{Durability: contract.Sync, IdempotencyKey: "twice-" + kind.String()}
			n1 := c.node("n1")
			// n1 applies in its engine only (as if it died before the push).
			if _, err := n1.eng.Apply(ctx, op, wo); err != nil {
				t.Fatal(err)
			}
			dir := n1.dir
			c.kill("n1")
			c.waitRing("n2", "n3")
			if res, err := c.node("n2").n.Apply(ctx, op, wo); err != nil || res.Replayed {
				t.Fatalf("retry via n2 (which cannot know): %+v, %v", res, err)
			}
			c.start("n1", dir)
			c.waitRing("n1", "n2", "n3")
			for _, tn := range c.running() {
				eventually(t, 10*time.Second, tn.id+" reads the add once", func() bool {
					v, err := tn.n.Get(ctx, id)
					return err == nil && v.Value == 8
				})
			}
			if got := value(c.node("n2").n.metrics.duplicates); got != 1 {
				t.Fatalf("n2 took back %v adds, want 1", got)
			}
			for _, tn := range c.running() {
				res, err := tn.n.Apply(ctx, op, wo)
				if err != nil || !res.Replayed {
					t.Fatalf("another retry via %s: %+v, %v; want a replay", tn.id, res, err)
				}
			}
			for _, tn := range c.running() {
				if v, err := tn.n.Get(ctx, id); err != nil || v.Value != 8 {
					t.Fatalf("%s after the replays: %+v, %v", tn.id, v, err)
				}
			}
		})
	}
}

// TestIdemCachePutKeepsTheFirstApplication: whatever the order records of
// one mutation from several nodes arrive in, the cache keeps the earliest
// application, and reports this node's own record as lost exactly once
// when, and only when, it is not the earliest.
func TestIdemCachePutKeepsTheFirstApplication(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var c idemCache
		c.init()
		origins := rapid.SliceOfNDistinct(rapid.SampledFrom([]string{"a", "b", "c", "d"}), 1, 4, rapid.ID[string]).Draw(t, "origins")
		var recs []idemRecord
		for _, o := range origins {
			r := idemRecord{IdemRecord: engine.IdemRecord{Key: "k", FP: 9, IDs: []string{"x"}, Created: rapid.Int64Range(1, 5).Draw(t, "created"),
				Results: []contract.Result{{Kind: contract.KindPN, Value: int64(len(o))}}}, Origin: o,
				Undo: []contract.Op{{Type: contract.OpAdd, ID: "x", Kind: contract.KindPN, Delta: -1}}}
			recs = append(recs, r)
		}
		first := recs[0]
		for _, r := range recs[1:] {
			if r.before(&first) {
				first = r
			}
		}
		perm := rapid.Permutation(recs).Draw(t, "order")
		lost := 0
		for len(perm) > 0 {
			k := rapid.IntRange(1, len(perm)).Draw(t, "batch")
			lost1, _ := c.put(perm[:k], "a")
			for _, l := range lost1 {
				if l.Origin != "a" {
					t.Fatalf("reported another node's record as ours: %+v", l)
				}
				lost++
			}
			perm = perm[k:]
		}
		if got := c.recs[idemID{"k", 9}]; got.Origin != first.Origin {
			t.Fatalf("kept %s's record, want the earliest, %s's", got.Origin, first.Origin)
		}
		wantLost := 0
		for _, o := range origins {
			if o == "a" && first.Origin != "a" {
				wantLost = 1
			}
		}
		if lost != wantLost {
			t.Fatalf("own record reported lost %d times, want %d (origins %v, first %s)", lost, wantLost, origins, first.Origin)
		}
		if ids := c.byID["x"]; len(ids) != 1 {
			t.Fatalf("index of x: %v", ids)
		}
	})
}
