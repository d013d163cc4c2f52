package chunksync

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/counterd/counterd/internal/engine"
)

var benchBase = sync.OnceValues(func() ([]engine.State, *Snapshot) {
	n := 1_000_000
	if testing.Short() {
		n = 100_000
	}
	states := syntheticStates(n)
	s, err := Build(states, Options{})
	if err != nil {
		panic(err)
	}
	return states, s
})

// BenchmarkSyncBytes measures what a sync moves when a fraction of
// 1,000,000 counters (100,000 with -short) changed, in runs of 1,000
// neighbouring ids or scattered uniformly, against a full copy of the
// state: %moved is the bytes fetched (manifest, ranges, chunks) over the
// full state's chunk bytes. ns/op is the in-memory diff and transfer.
//
//	go test -run '^$' -bench BenchmarkSyncBytes -benchtime 3x ./internal/chunksync/
func BenchmarkSyncBytes(b *testing.B) {
	base, prev := benchBase()
	for _, p := range patterns {
		for _, frac := range []float64{0.001, 0.01, 0.1} {
			b.Run(fmt.Sprintf("%s/changed=%g%%", p.name, 100*frac), func(b *testing.B) {
				r := rand.New(rand.NewPCG(3, 4))
				next, err := Build(changed(base, p.pick(r, len(base), frac)), Options{})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.ResetTimer()
				var st Stats
				for i := 0; i < b.N; i++ {
					st = syncCost(b, prev, next)
				}
				b.ReportMetric(100*float64(st.BytesFetched)/float64(st.FullBytes), "%moved")
				b.ReportMetric(float64(st.BytesFetched), "bytes-moved")
				b.ReportMetric(float64(st.FullBytes), "bytes-full")
				b.ReportMetric(float64(st.ChunksFetched), "chunks-moved")
			})
		}
	}
}
