package node

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
)

// TestEpochFencesOldOwner plays the partition the epochs are for, by hand:
// n1 owns an id and has written it; n2 claims the id's next epoch from n2
// and n3 (as its takeover fence does once gossip declared n1 dead) and
// writes once, while n1 still believes it owns the id. n1's sync writes
// must then fail (no replica acknowledges an older epoch), however many it
// tries; n2's write must win on every node, n1 included, although n1's
// copy has the higher write count; and n1 cannot claim the same epoch.
func TestEpochFencesOldOwner(t *testing.T) {
	// No anti-entropy: it would carry n2's epoch to n1 during the hand-played
	// partition, which a real one would not.
	c := newClusterNoAntiEntropy(t, "n1", "n2", "n3")
	ctx := context.Background()
	n1, n2, n3 := c.node("n1").n, c.node("n2").n, c.node("n3").n
	id := ownedID(c.node("n1"), "n1", "epoch:")
	first, err := n1.Apply(ctx, contract.Op{Type: contract.OpAdd, ID: id, Delta: 10, Kind: contract.KindCounter}, syncWO)
	if err != nil {
		t.Fatal(err)
	}
	e1 := epochOf(first.Version)
	if e1 == 0 {
		t.Fatalf("the owner's first write is at version %#x: no epoch claimed", first.Version)
	}
	// A sync write is acknowledged once a quorum (n1 and one replica) has
	// it: wait until n3, the replica asked below, has it too (the takeover
	// fence asks every replica and keeps the newest; this test asks one).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if st, ok, err := n3.store.Export(id); err == nil && ok && st.Version == first.Version {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("n3 never received the owner's acknowledged write")
		}
	}
	// n2 takes over: claims above n1's epoch on itself and on n3.
	e2 := n2.claimLocal(id, e1)
	resp := n3.serveFetch(ctx, &fetchRequest{header: header{From: "n2"}, IDs: []string{id}, Claims: []uint32{e2}})
	if resp.Err != nil || resp.Refused[0] != 0 {
		t.Fatalf("n3 refused n2's claim of epoch %d: %+v", e2, resp)
	}
	if len(resp.States) != 1 || resp.States[0].Version != first.Version {
		t.Fatalf("the claim's answer lacks the acknowledged state: %+v", resp.States)
	}
	// The new owner writes once, at its epoch.
	if _, err := n2.store.Merge(ctx, resp.States, syncWO); err != nil {
		t.Fatal(err)
	}
	if _, err := n2.store.Apply(ctx, contract.Op{Type: contract.OpAdd, ID: id, Delta: 1}, syncWO); err != nil {
		t.Fatal(err)
	}
	ver, ok, err := n2.store.RaiseVersion(id, epochFloor(e2))
	if err != nil || !ok || epochOf(ver) != e2 {
		t.Fatalf("raise: %#x %v %v", ver, ok, err)
	}
	// The old owner's writes are applied locally but never acknowledged.
	keyed := contract.WriteOptions{Durability: contract.Sync, IdempotencyKey: "old-owner"}
	for i := range 5 {
		wo := syncWO
		if i == 4 {
			wo = keyed
		}
		_, err := n1.Apply(ctx, contract.Op{Type: contract.OpAdd, ID: id, Delta: 100}, wo)
		if !errors.Is(err, contract.ErrUnavailable) {
			t.Fatalf("old owner's write %d after the claim: %v, want unavailable (no quorum)", i, err)
		}
	}
	// Its keyed write's record reached n2 and n3 with the stale push, but
	// was not kept: a retry there must apply, not replay a lost write.
	fp := engine.Fingerprint([]contract.Op{{Type: contract.OpAdd, ID: id, Delta: 100}})
	for _, n := range []*Node{n2, n3} {
		if res, ok := n.idem.get("old-owner", fp); ok {
			t.Fatalf("%s keeps the record of the old owner's unacknowledged write: %+v", n.self, res)
		}
	}
	// n1 cannot claim the epoch n3 promised to n2.
	again := n3.serveFetch(ctx, &fetchRequest{header: header{From: "n1"}, IDs: []string{id}, Claims: []uint32{e2}})
	if again.Refused[0] != e2 {
		t.Fatalf("n3 answered a second claimant of epoch %d with %v, want refused", e2, again.Refused)
	}
	st, _, err := n2.store.Export(id)
	if err != nil {
		t.Fatal(err)
	}
	// Heal: every node merges every copy; n2's write wins everywhere.
	copies := []State{st}
	for _, n := range []*Node{n1, n3} {
		s, ok, err := n.store.Export(id)
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		copies = append(copies, s)
	}
	for _, n := range []*Node{n1, n2, n3} {
		if _, err := n.store.Merge(ctx, copies, syncWO); err != nil {
			t.Fatal(err)
		}
		if v, err := n.store.Get(ctx, id); err != nil || v.Value != 11 {
			t.Fatalf("%s after heal: %+v, %v; want 11 (the acknowledged 10 and n2's 1, not n1's unacknowledged attempts)", n.self, v, err)
		}
	}
}

// TestPromiseClaims checks the promise rules against a model: a claim is
// accepted iff its epoch is above every promise and the local state's
// epoch, or equals the current promise of the same node; a state pushed by
// another node than the promise's holder is stale iff its epoch is below
// the promise.
func TestPromiseClaims(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var p promises
		p.init()
		var cur promise
		for i := range rapid.IntRange(1, 30).Draw(t, "steps") {
			node := rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "node")
			e := rapid.Uint32Range(0, 8).Draw(t, "epoch")
			if rapid.Bool().Draw(t, "push") {
				v := epochFloor(e) | uint64(i)
				want := e < cur.Epoch && node != cur.Node
				if got := p.stale("x", v, node); got != want {
					t.Fatalf("stale(%d by %s) with promise %+v: %v", e, node, cur, got)
				}
				continue
			}
			floor := rapid.Uint32Range(0, 8).Draw(t, "floor")
			model := cur
			if floor > model.Epoch {
				model = promise{Epoch: floor}
			}
			if e > model.Epoch || e == model.Epoch && node == model.Node {
				model = promise{Epoch: e, Node: node}
				cur = model
			}
			if got := p.claim("x", e, node, floor); got != model {
				t.Fatalf("claim %d by %s (floor %d): %+v, want %+v", e, node, floor, got, model)
			}
		}
	})
}

// laterWriteStore is a Store whose first RaiseVersion of an id with its
// prefix lets another add of the id land first: a concurrent write between
// an owner's write and the raise of that write to the owner's epoch.
type laterWriteStore struct {
	Store
	prefix string
	once   atomic.Bool
}

func (s *laterWriteStore) RaiseVersion(id string, floor uint64) (uint64, bool, error) {
	if strings.HasPrefix(id, s.prefix) && s.once.CompareAndSwap(false, true) {
		if _, err := s.Store.Apply(context.Background(), contract.Op{Type: contract.OpAdd, ID: id, Delta: 1}, contract.WriteOptions{}); err != nil {
			return 0, false, err
		}
	}
	return s.Store.RaiseVersion(id, floor)
}

// TestOwnedWriteReportsItsOwnVersion: the first write of an epoch reports
// its own version raised to the epoch, not the id's version after the
// raise, which counts a later write too (two concurrent first writes
// reported one version).
func TestOwnedWriteReportsItsOwnVersion(t *testing.T) {
	c := &testCluster{t: t, nodes: map[string]*testNode{}, antiEntropy: time.Hour,
		wrapStore: func(s Store) Store { return &laterWriteStore{Store: s, prefix: "raise:"} }}
	startTestCluster(c, "n1", "n2", "n3")
	n1 := c.node("n1").n
	id := ownedID(c.node("n1"), "n1", "raise:")
	r, err := n1.Apply(context.Background(), contract.Op{Type: contract.OpAdd, ID: id, Delta: 1, Kind: contract.KindCounter}, contract.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v, err := n1.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if epochOf(r.Version) == 0 || r.Value != 1 || v.Value != 2 || v.Version != r.Version+1 {
		t.Fatalf("the first write: value %d version %#x; the id after the later write: value %d version %#x", r.Value, r.Version, v.Value, v.Version)
	}
}
