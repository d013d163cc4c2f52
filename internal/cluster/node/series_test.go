package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/rollup"
	"pgregory.net/rapid"
)

// TestSeriesIncludesEveryNodesAdds: adds to pn and sharded counters on all
// three nodes (each applied where it arrives) all show in the series read
// on any node; a plain counter's adds (applied on the owner) too.
func TestSeriesIncludesEveryNodesAdds(t *testing.T) {
	c := newTestCluster(t, "n1", "n2", "n3")
	ctx := context.Background()
	if err := c.node("n1").n.SetRollup(ctx, "roll", rollup.DefaultSpec()); err != nil {
		t.Fatal(err)
	}
	for _, k := range []contract.Kind{contract.KindPN, contract.KindSharded, contract.KindCounter} {
		id := fmt.Sprintf("roll:%s", k)
		want := int64(0)
		for round := 0; round < 3; round++ {
			for j, tn := range c.running() {
				op := add(id, int64(10*(j+1)+round))
				op.Kind = k
				if _, err := tn.n.Apply(ctx, op, syncWO); err != nil {
					t.Fatal(err)
				}
				want += op.Delta
			}
			now := time.Now()
			for _, tn := range c.running() {
				s, err := tn.n.Series(ctx, id, rollup.Minute, now.Add(-10*time.Minute), now.Add(time.Minute))
				if err != nil {
					t.Fatalf("series of %s on %s: %v", id, tn.id, err)
				}
				sum := int64(0)
				for _, v := range s.Values {
					sum += v
				}
				if s.Total != want || sum != want {
					t.Fatalf("series of %s on %s after round %d: total %d, buckets sum %d, want %d", id, tn.id, round, s.Total, sum, want)
				}
			}
		}
		// The series agrees with the counter's value.
		v, err := c.node("n2").n.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if k == contract.KindCounter && v.Value != want {
			t.Fatalf("%s = %d, want %d", id, v.Value, want)
		}
	}
}

// TestAddSeries: the per-bucket sum of series equals the sum of their
// values and totals, and series with other frames are refused.
func TestAddSeries(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 20).Draw(t, "buckets")
		parts := rapid.IntRange(1, 4).Draw(t, "parts")
		from := time.Unix(rapid.Int64Range(0, 1<<40).Draw(t, "from"), 0).UTC()
		want := make([]int64, n)
		var wantTotal int64
		var sum *wireSeries
		for p := 0; p < parts; p++ {
			w := &wireSeries{Granularity: rollup.Minute, Source: rollup.Minute, From: from, To: from.Add(time.Duration(n) * time.Minute)}
			for i := 0; i < n; i++ {
				v := rapid.Int64Range(-1e12, 1e12).Draw(t, "v")
				w.Values = append(w.Values, v)
				want[i] += v
				w.Total += v
				wantTotal += v
			}
			var err error
			if sum, err = addSeries(sum, w); err != nil {
				t.Fatal(err)
			}
			w.Values = append(w.Values[:0], make([]int64, n)...) // the sum must not alias a part
		}
		for i := range want {
			if sum.Values[i] != want[i] {
				t.Fatalf("bucket %d: %d, want %d", i, sum.Values[i], want[i])
			}
		}
		if sum.Total != wantTotal {
			t.Fatalf("total %d, want %d", sum.Total, wantTotal)
		}
		other := *sum
		other.From = other.From.Add(time.Minute)
		if _, err := addSeries(sum, &other); err != errSeriesFrame {
			t.Fatalf("other frame: %v, want errSeriesFrame", err)
		}
	})
}
