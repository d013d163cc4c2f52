package node

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkAggregate times a cluster-wide Aggregate of a prefix on three
// in-process nodes (loopback gRPC), coordinated by n1.
func BenchmarkAggregate(b *testing.B) {
	c := newTestCluster(b, "n1", "n2", "n3")
	ctx := context.Background()
	n1 := c.node("n1").n
	for _, size := range []int{10, 1000} {
		prefix := fmt.Sprintf("bagg%d:", size)
		for i := 0; i < size; i++ {
			if _, err := n1.Apply(ctx, add(fmt.Sprintf("%s%d", prefix, i), 1), syncWO); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(fmt.Sprintf("ids=%d", size), func(b *testing.B) {
			for b.Loop() {
				a, err := n1.Aggregate(ctx, prefix)
				if err != nil || a.Count != size {
					b.Fatalf("aggregate: %+v, %v", a, err)
				}
			}
		})
	}
}
