package region

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/counterd/counterd/internal/chunksync"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
)

// TestScatteredChangesShipLittle: with a fraction of 1,000,000 plain
// counters changed at ids scattered uniformly (the case chunks by key
// range cannot serve: 1% changed touches 72% of the chunks), delta
// replication ships only the changed counters' states. Every byte of the
// encoded batches counts (headers, ids, versions, data) against the full
// copy (the chunk bytes of the whole state). 1% changed must move at most
// 2%; 0.1% and 10% are logged (BENCHMARKS.md, "Cross-region replication").
// 200,000 counters under -short or the race detector.
func TestScatteredChangesShipLittle(t *testing.T) {
	n := 1_000_000
	if testing.Short() || raceEnabled {
		n = 200_000
	}
	ctx := context.Background()
	ecfg := engine.DefaultConfig()
	ecfg.InMemory = true
	ecfg.NodeID = "eu-1"
	local, err := engine.Open(ecfg)
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	ops := make([]contract.Op, 0, 1000)
	for i := 0; i < n; i++ {
		ops = append(ops, contract.Op{Type: contract.OpAdd, ID: fmt.Sprintf("page_views:article_%08d", i), Delta: int64(i%1000 + 1)})
		if len(ops) == cap(ops) {
			if _, err := local.ApplyBatch(ctx, ops, contract.WriteOptions{}); err != nil {
				t.Fatal(err)
			}
			ops = ops[:0]
		}
	}
	r, err := Open(Config{Name: "eu", Peers: []Peer{{Name: "us", Addr: "127.0.0.1:1"}}, Local: local, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	be := r.Wrap(engine.Local(local))
	rnd := rand.New(rand.NewPCG(1, 2))
	// The full copy: increments by one change few chunk bytes, so one cut
	// serves the three fractions.
	full, err := chunksync.FromEngine(ctx, local, chunksync.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, frac := range []float64{0.001, 0.01, 0.1} {
		changed := 0
		for _, i := range rnd.Perm(n)[:int(frac*float64(n))] {
			if _, err := be.Apply(ctx, contract.Op{Type: contract.OpAdd, ID: fmt.Sprintf("page_views:article_%08d", i), Delta: 1}, contract.WriteOptions{}); err != nil {
				t.Fatal(err)
			}
			changed++
		}
		sent, batches, states := 0, 0, 0
		for {
			msg, b, hi, more, err := r.buildBatch(linkKey(Peer{Name: "us", Addr: "127.0.0.1:1"}))
			if err != nil {
				t.Fatal(err)
			}
			sent += len(msg)
			batches++
			states += len(b.States)
			if hi > 0 {
				r.t.ack(linkKey(Peer{Name: "us", Addr: "127.0.0.1:1"}), hi)
			}
			if !more {
				break
			}
		}
		ratio := float64(sent) / float64(full.ChunkBytes)
		t.Logf("scattered %.1f%% of %d changed: shipped %d states in %d batches, %d of %d bytes (%.2f%%)",
			100*frac, n, states, batches, sent, full.ChunkBytes, 100*ratio)
		if states != changed {
			t.Fatalf("shipped %d states for %d changed counters", states, changed)
		}
		if frac == 0.01 && ratio > 0.02 {
			t.Errorf("1%% scattered changes shipped %.2f%% of the full state, want <= 2%%", 100*ratio)
		}
	}
}
