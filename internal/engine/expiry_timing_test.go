package engine

import (
	"fmt"
	"github.com/counterd/counterd/internal/contract"
	"testing"
	"time"
)

// BenchmarkExpireDue: one janitor pass (expireDue) over n counters with a
// TTL of which 10 are due (the event pipeline's case: a marker counter with
// a day's TTL per event, few expiring each second). A pass should cost
// what expires, not n.
func BenchmarkExpireDue(b *testing.B) {
	for _, n := range []int{10_000, 1_000_000} {
		b.Run(fmt.Sprintf("ttls=%d", n), func(b *testing.B) {
			clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
			e := openMem(b, func(c *Config) { c.Clock = clk.Now })
			ops := make([]contract.Op, 0, 1000)
			for i := 0; i < n; i++ {
				ops = append(ops, contract.Op{Type: contract.OpSet, ID: fmt.Sprintf("_events:%d", i), Value: 1, TTL: 1000 * time.Hour})
				if len(ops) == cap(ops) || i == n-1 {
					if err := e.ApplyAtomic(bg, ops, contract.WriteOptions{}); err != nil {
						b.Fatal(err)
					}
					ops = ops[:0]
				}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				for j := 0; j < 10; j++ {
					if _, err := e.Apply(bg, contract.Op{Type: contract.OpSet, ID: fmt.Sprint("due", j), Value: 1, TTL: time.Millisecond}, contract.WriteOptions{}); err != nil {
						b.Fatal(err)
					}
				}
				clk.Advance(2 * time.Second)
				b.StartTimer()
				e.expireDue()
			}
			b.StopTimer()
			if st := e.Stats(); st.Keys != n {
				b.Fatalf("%d keys after the passes, want %d", st.Keys, n)
			}
		})
	}
}

// BenchmarkTTLCounterBytes reports heap bytes per idle counter with a TTL
// (1M counters of 24-byte ids, like BenchmarkIdleCounterBytes): the entry,
// its ext and the expiry index's item. b.N is ignored: it measures one fill.
func BenchmarkTTLCounterBytes(b *testing.B) {
	heapPerCounter(b, func(e *Engine, id string) error {
		_, err := e.Apply(bg, contract.Op{Type: contract.OpSet, ID: id, Value: 1, TTL: 1000 * time.Hour}, contract.WriteOptions{})
		return err
	})
}
