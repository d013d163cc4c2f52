package consumer

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/counterd/counterd/internal/cluster/node/nodetest"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/pipeline/event"
	"github.com/counterd/counterd/internal/pipeline/rules"
	"github.com/counterd/counterd/internal/pipeline/stream"
)

// TestApplyExactlyOnceCluster: on a real three-node peer cluster on
// loopback (nodetest), consumers on two nodes apply the same records at
// once, then again whole and in overlapping slices (redeliveries after a
// restart from an older commit); each event's batch is keyed by its id,
// so the owners replay instead of applying again and every counter is
// exact.
func TestApplyExactlyOnceCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	c := nodetest.Start(t, nodetest.Options{}, "n1", "n2", "n3")
	nodes := c.Nodes()
	rs, err := rules.Load("rules.yaml", []byte(testRules))
	if err != nil {
		t.Fatal(err)
	}
	var aps []*Applier
	for _, n := range nodes[:2] {
		a, err := NewApplier(n, rs, event.Limits{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		aps = append(aps, a)
	}
	recs, views, bad := records(150)
	var wg sync.WaitGroup
	var mu sync.Mutex
	deadSeen := map[int64]bool{}
	for _, a := range aps {
		wg.Go(func() {
			for i := 0; i < len(recs); i += 100 {
				dead, err := applyRetrying(t, a, recs[i:min(i+100, len(recs))])
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, d := range dead {
					if !bad[d.Record.Offset] {
						t.Errorf("dead letter at %d: %s", d.Record.Offset, d.Reason)
					}
					deadSeen[d.Record.Offset] = true
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(deadSeen) != len(bad) {
		t.Errorf("%d records dead-lettered, want %d", len(deadSeen), len(bad))
	}
	checkBackendViews(t, nodes[2], views)
	for _, r := range [][2]int{{0, 150}, {50, 100}, {99, 101}} {
		if _, err := applyRetrying(t, aps[1], recs[r[0]:r[1]]); err != nil {
			t.Fatal(err)
		}
	}
	checkBackendViews(t, nodes[0], views)
}

// applyRetrying applies recs again while the cluster is unavailable (an
// RPC timed out on a loaded machine), as the consumer loop does.
func applyRetrying(t *testing.T, a *Applier, recs []stream.Record) ([]stream.DeadLetter, error) {
	for try := 0; ; try++ {
		dead, err := a.Apply(context.Background(), "test", recs)
		if err == nil || !errors.Is(err, engine.ErrUnavailable) || try == 20 {
			return dead, err
		}
		t.Logf("retrying: %v", err)
	}
}

// TestNewApplierRefusesTiered: a backend whose batches are neither atomic
// nor keyed per owner (the tiered store) is refused with the reason.
func TestNewApplierRefusesTiered(t *testing.T) {
	_, e := newApplier(t, 10)
	be := capsBackend{Backend: engine.Local(e)}
	if _, err := NewApplier(be, nil, event.Limits{}, nil); err == nil {
		t.Fatal("tiered batches accepted")
	}
}

type capsBackend struct{ engine.Backend }

func (b capsBackend) Capabilities() engine.Capabilities {
	c := b.Backend.Capabilities()
	c.Mode, c.Batches = "tiered", engine.BatchUndoInverse
	return c
}

func checkBackendViews(t *testing.T, be engine.Backend, views map[string]int64) {
	t.Helper()
	ctx := context.Background()
	for post, want := range views {
		v, err := be.Get(ctx, "views:"+post)
		if err != nil || v.Value != want {
			t.Errorf("views:%s = %d (%v), want %d", post, v.Value, err, want)
		}
		c, err := be.Get(ctx, "countries:"+post)
		var sum int64
		for _, f := range c.Fields {
			sum += f.Value
		}
		if err != nil || sum != want {
			t.Errorf("countries:%s fields sum to %d (%v), want %d", post, sum, err, want)
		}
	}
	if n, _, err := be.PFCount(ctx, "viewers:p1"); err != nil || n < 9 || n > 10 {
		t.Errorf("viewers:p1 = %d (%v), want 10 (HLL)", n, err)
	}
}
