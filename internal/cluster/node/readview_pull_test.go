package node

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
)

// slowMergeStore delays merges of states under prefix while slow is set.
type slowMergeStore struct {
	Store
	slow   *atomic.Bool
	prefix string
}

func (s *slowMergeStore) MergeRecords(ctx context.Context, states []State, wo contract.WriteOptions, then func() []engine.StoredRecord) (int, error) {
	if s.slow.Load() {
		for _, st := range states {
			if strings.HasPrefix(st.ID, s.prefix) {
				time.Sleep(500 * time.Millisecond)
				break
			}
		}
	}
	return s.Store.MergeRecords(ctx, states, wo, then)
}

// TestReadViewCountsPNSyncAddsBeforeTheirPush: a sync pn add is applied
// by the node that receives it (n1) and acknowledged once a write quorum
// of the id's replicas holds it (n1 and n2), which need not include the
// id's owner (n3), whose merge of the push is held here. A read view
// answers for the id on n3 and must count the add all the same. Before
// views pulled pn and sharded counters from the other replicas at every
// read, the aggregate read 1 with 2 acknowledged (the chaos test's
// aggregates 1 below the acknowledged sum).
func TestReadViewCountsPNSyncAddsBeforeTheirPush(t *testing.T) {
	var mu sync.Mutex
	slow := map[int]*atomic.Bool{}
	started := 0
	c := &testCluster{t: t, nodes: map[string]*testNode{}, antiEntropy: time.Hour,
		wrapStore: func(s Store) Store {
			mu.Lock()
			defer mu.Unlock()
			started++
			b := &atomic.Bool{}
			slow[started] = b
			return &slowMergeStore{Store: s, slow: b, prefix: "lag:"}
		}}
	startTestCluster(c, "n1", "n2", "n3")
	ctx := context.Background()
	id := ownedID(c.node("n1"), "n3", "lag:")
	op := contract.Op{Type: contract.OpAdd, ID: id, Delta: 1, Kind: contract.KindPN}
	if _, err := c.node("n1").n.Apply(ctx, op, syncWO); err != nil {
		t.Fatal(err)
	}
	for _, co := range []string{"n1", "n2", "n3"} {
		eventually(t, 10*time.Second, "a view on "+co, func() bool {
			a, err := c.node(co).n.Aggregate(ctx, "lag:")
			if err == nil && a.Value != 1 {
				t.Fatalf("aggregate on %s: %d, want 1", co, a.Value)
			}
			return err == nil
		})
	}
	slow[3].Store(true) // n3 is the third node started
	t.Cleanup(func() { slow[3].Store(false) })
	if _, err := c.node("n1").n.Apply(ctx, op, contract.WriteOptions{Durability: contract.Sync, IdempotencyKey: "lag-1"}); err != nil {
		t.Fatal(err)
	}
	for _, co := range []string{"n2", "n3", "n1"} {
		a, err := c.node(co).n.Aggregate(ctx, "lag:")
		if err != nil {
			t.Fatalf("aggregate on %s: %v", co, err)
		}
		if a.Value != 2 {
			t.Errorf("aggregate on %s after 2 acknowledged sync adds, the second's push to the owner held: %d", co, a.Value)
		}
	}
}

// TestReadViewStandInCountsOwnersLaterSyncWrites: n3 owns a counter and
// acknowledges sync writes, but the coordinator cannot reach its view part
// (timed out), so the id's next replica answers for it. That stand-in
// fenced the id once at this ring; a later sync write that n3 acknowledged
// with the third node, while its push to the stand-in is held, must be
// counted all the same. Before stand-ins pulled at every read, the
// aggregate stayed 1 below until the ring changed.
func TestReadViewStandInCountsOwnersLaterSyncWrites(t *testing.T) {
	var mu sync.Mutex
	slow := map[string]*atomic.Bool{}
	order := []string{"n1", "n2", "n3"}
	c := &testCluster{t: t, nodes: map[string]*testNode{}, antiEntropy: time.Hour,
		wrapStore: func(s Store) Store {
			mu.Lock()
			defer mu.Unlock()
			b := &atomic.Bool{}
			slow[order[len(slow)]] = b
			return &slowMergeStore{Store: s, slow: b, prefix: "so:"}
		}}
	startTestCluster(c, order...)
	ctx := context.Background()
	id := ownedID(c.node("n1"), "n3", "so:")
	s := c.node("n1").n.Ring()
	standIn := designated(s, id, []string{"n3"}, nil)
	t.Logf("id %s: owner n3, stand-in %s", id, standIn)
	if _, err := c.node("n1").n.Apply(ctx, add(id, 1), syncWO); err != nil {
		t.Fatal(err)
	}
	timeout := func(_, node string) error {
		if node == "n3" {
			return &UnavailableError{Node: node, Op: "Local", Err: context.DeadlineExceeded}
		}
		return nil
	}
	knobs.viewCall.Store(&timeout)
	t.Cleanup(func() { knobs.viewCall.Store(nil) })
	eventually(t, 10*time.Second, "a view on n1 with n3 unreachable", func() bool {
		a, err := c.node("n1").n.Aggregate(ctx, "so:")
		if err == nil && a.Value != 1 {
			t.Fatalf("aggregate: %d, want 1", a.Value)
		}
		return err == nil
	})
	slow[standIn].Store(true)
	t.Cleanup(func() { slow[standIn].Store(false) })
	if _, err := c.node("n3").n.Apply(ctx, add(id, 1), syncWO); err != nil {
		t.Fatal(err)
	}
	a, err := c.node("n1").n.Aggregate(ctx, "so:")
	if err != nil {
		t.Fatal(err)
	}
	if a.Value != 2 {
		t.Errorf("aggregate with %s standing in for n3, after 2 acknowledged sync writes, the second's push to %s held: %d", standIn, standIn, a.Value)
	}
}
