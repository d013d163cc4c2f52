package consumer

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/pipeline/event"
	"github.com/counterd/counterd/internal/pipeline/stream"
)

// markerBackend is the embedded engine seen as a backend whose batches
// are not atomic (as a cluster's or the tiered store's) that keeps dedupe
// marks beside each counter: the applier consumes through
// ApplyCounterMarked. fail, when set, makes a call fail after applying
// the ops before the n-th (an ambiguous error: the outcome of some ops is
// unknown to the caller).
type markerBackend struct {
	capsBackend
	cm    contract.CounterMarker
	calls atomic.Int64
	fail  func(call int64) int // ops applied before the failure; -1: none
}

func (b *markerBackend) ApplyCounterMarked(ctx context.Context, ops []contract.MarkedOp, ttl time.Duration, wo contract.WriteOptions) ([][]string, error) {
	n := b.calls.Add(1)
	if b.fail != nil {
		if k := b.fail(n); k >= 0 {
			if _, err := b.cm.ApplyCounterMarked(ctx, ops[:min(k, len(ops))], ttl, wo); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("%w: lost reply", contract.ErrUnavailable)
		}
	}
	return b.cm.ApplyCounterMarked(ctx, ops, ttl, wo)
}

func newMarkerApplier(t *testing.T, e *engine.Engine, a *Applier) (*Applier, *markerBackend) {
	t.Helper()
	l := engine.Local(e)
	mb := &markerBackend{capsBackend: capsBackend{Backend: l, mode: "cluster", batches: contract.BatchAtomicPerOwner}, cm: l.(contract.CounterMarker)}
	ap, err := NewApplier(mb, a.Rules(), event.Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ap.cmark == nil || ap.marks != nil {
		t.Fatal("the applier does not consume through CounterMarker")
	}
	return ap, mb
}

// TestCounterMarkedExactlyOnce: through CounterMarker, records applied,
// then delivered again whole and in overlapping slices, count once, with
// the same dead letters as the atomic path.
func TestCounterMarkedExactlyOnce(t *testing.T) {
	base, e := newApplier(t, 1000)
	a, _ := newMarkerApplier(t, e, base)
	recs, views, bad := records(2000)
	ctx := context.Background()
	var dead []stream.DeadLetter
	for _, r := range [][2]int{{0, 1200}, {1200, 2000}} {
		d, err := a.Apply(ctx, "test", recs[r[0]:r[1]])
		if err != nil {
			t.Fatal(err)
		}
		dead = append(dead, d...)
	}
	checkDead(t, dead, bad)
	checkViews(t, e, views)
	for _, r := range [][2]int{{0, 2000}, {500, 1500}, {1199, 1201}} {
		if _, err := a.Apply(ctx, "test", recs[r[0]:r[1]]); err != nil {
			t.Fatal(err)
		}
	}
	checkViews(t, e, views)
	if n, _, _ := e.PFCount("viewers:p1"); n < 9 || n > 10 {
		t.Errorf("viewers:p1 = %d, want 10 (HLL)", n)
	}
}

// TestCounterMarkedAmbiguousErrors: calls that apply some ops and then
// fail as if the reply was lost are retried (as the loop does) until
// they succeed: every counter is exact.
func TestCounterMarkedAmbiguousErrors(t *testing.T) {
	base, e := newApplier(t, 1000)
	a, mb := newMarkerApplier(t, e, base)
	mb.fail = func(n int64) int {
		if n%3 == 0 {
			return -1
		}
		return int(n % 5)
	}
	recs, views, _ := records(3000)
	ctx := context.Background()
	failures := 0
	for i := 0; i < len(recs); i += 250 {
		for {
			_, err := a.Apply(ctx, "test", recs[i:i+250])
			if err == nil {
				break
			}
			failures++
			if failures > 1000 {
				t.Fatal(err)
			}
		}
	}
	if failures == 0 {
		t.Fatal("no call failed: the test tested nothing")
	}
	checkViews(t, e, views)
}

// TestCounterMarkedConcurrentCopies: appliers on different "nodes" apply
// the same records at once (a rebalance's zombie, JetStream pulls of a
// shared consumer redelivered elsewhere): each counter counts each event
// once, the marks of one counter deciding which of them applies it.
func TestCounterMarkedConcurrentCopies(t *testing.T) {
	base, e := newApplier(t, 1000)
	a, _ := newMarkerApplier(t, e, base)
	b, _ := newMarkerApplier(t, e, base)
	recs, views, _ := records(3000)
	var wg sync.WaitGroup
	for k, ap := range []*Applier{a, b, a, b} {
		wg.Go(func() {
			step := 100 + 37*k // different slices: copies coalesce with different neighbours
			for i := 0; i < len(recs); i += step {
				if _, err := ap.Apply(context.Background(), "test", recs[i:min(i+step, len(recs))]); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	checkViews(t, e, views)
}

// TestCounterMarkedRefusedOp: an op refused at apply time dead-letters
// the events behind it, found one by one, and applies the rest.
func TestCounterMarkedRefusedOp(t *testing.T) {
	base, e := newApplier(t, 1000)
	a, _ := newMarkerApplier(t, e, base)
	ctx := context.Background()
	if _, err := e.Apply(ctx, contract.Op{Type: contract.OpPFAdd, ID: "views:p9", Items: [][]byte{[]byte("x")}}, contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	recs := []stream.Record{
		{Offset: 0, Value: []byte(`{"id":"a","type":"view","ts":1,"post":"p1","user":"u","country":"de"}`)},
		{Offset: 1, Value: []byte(`{"id":"b","type":"view","ts":1,"post":"p9","user":"u","country":"de"}`)},
		{Offset: 2, Value: []byte(`{"id":"c","type":"view","ts":1,"post":"p9","user":"u","country":"de"}`)},
		{Offset: 3, Value: []byte(`{"id":"d","type":"view","ts":1,"post":"p1","user":"u","country":"de"}`)},
	}
	dead, err := a.Apply(ctx, "test", recs)
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 2 || dead[0].Record.Offset != 1 || dead[1].Record.Offset != 2 {
		t.Fatalf("dead letters %+v; want offsets 1 and 2", dead)
	}
	checkViews(t, e, map[string]int64{"p1": 2})
}
