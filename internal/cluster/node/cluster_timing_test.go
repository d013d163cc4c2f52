package node

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
)

// idOwnedBy returns an id whose owner is node.
func idOwnedBy(n *Node, node, prefix string) string {
	for i := 0; ; i++ {
		if id := fmt.Sprintf("%s%d", prefix, i); n.Ring().Owner(id) == node {
			return id
		}
	}
}

// BenchmarkApply compares an async add applied on the owner with one that
// a non-owner forwards (one gRPC hop).
func BenchmarkApply(b *testing.B) {
	c := newTestCluster(b, "n1", "n2", "n3")
	ctx := context.Background()
	n1 := c.node("n1").n
	for _, bc := range []struct {
		name  string
		owner string
	}{{"direct", "n1"}, {"forwarded", "n2"}} {
		b.Run(bc.name, func(b *testing.B) {
			id := idOwnedBy(n1, bc.owner, "bench:"+bc.name+":")
			b.ReportAllocs()
			for b.Loop() {
				if _, err := n1.Apply(ctx, add(id, 1), contract.WriteOptions{Durability: contract.Async}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkConvergence measures the time from a pn add on a non-owner until
// the owner's read shows it (pushed at once, at most every PushGap),
// reporting P50 and P99.
func BenchmarkConvergence(b *testing.B) {
	c := newTestCluster(b, "n1", "n2", "n3")
	ctx := context.Background()
	a, owner := c.node("n1").n, c.node("n2").n
	id := idOwnedBy(a, "n2", "conv:")
	var lat []time.Duration
	want := int64(0)
	for b.Loop() {
		op := add(id, 1)
		op.Kind = contract.KindPN
		start := time.Now()
		if _, err := a.Apply(ctx, op, contract.WriteOptions{}); err != nil {
			b.Fatal(err)
		}
		want++
		for {
			v, err := owner.Get(ctx, id)
			if err != nil {
				b.Fatal(err)
			}
			if v.Value == want {
				break
			}
			time.Sleep(time.Millisecond)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
