package region

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/engine"
)

func memEngine(t *testing.T, node string) *engine.Engine {
	t.Helper()
	ecfg := engine.DefaultConfig()
	ecfg.InMemory, ecfg.NodeID = true, node
	e, err := engine.Open(ecfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func pfadd(t *testing.T, e *engine.Engine, id string, from, to int) {
	t.Helper()
	var items [][]byte
	for i := from; i < to; i++ {
		items = append(items, fmt.Appendf(nil, "user-%d", i))
	}
	if _, err := e.Apply(context.Background(), contract.Op{Type: contract.OpPFAdd, ID: id, Items: items}, contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestGlobalHLLOnClusterNodeWithoutReplica: on a node of a cluster region
// that holds no replica of an hll, the global union takes this region's
// registers from the owner (Cluster.Export), not from the node's own
// engine, which lacks them.
func TestGlobalHLLOnClusterNodeWithoutReplica(t *testing.T) {
	const id = "visitors:post-1"
	ctx := context.Background()
	owner := memEngine(t, "b-owner") // the id's owner in this region
	pfadd(t, owner, id, 0, 3000)
	peer := memEngine(t, "a") // what region a holds
	pfadd(t, peer, id, 2000, 4000)

	local := memEngine(t, "b-other") // this node: no replica of id
	exports := 0
	r, err := Open(Config{
		Name: "b", Node: "b-other", Local: local, Dir: t.TempDir(), Interval: time.Hour,
		Peers: []Peer{{"a", "127.0.0.1:1"}},
		Cluster: &Cluster{
			Owns: func(string) bool { return false }, RingVersion: func() uint64 { return 1 },
			Region: engine.Local(owner),
			Export: func(_ context.Context, id string) (engine.State, bool, error) {
				exports++
				return owner.Export(id)
			},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	st, _, err := peer.Export(id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.remote["a"].Replace(ctx, []engine.State{st}, contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}

	union := func(states ...*engine.Engine) uint64 {
		var u *counter.HLL
		for _, e := range states {
			st, _, err := e.Export(id)
			if err != nil {
				t.Fatal(err)
			}
			h, _ := counter.NewHLL(14)
			if err := h.UnmarshalBinary(st.Data); err != nil {
				t.Fatal(err)
			}
			if u == nil {
				u = h
			} else if err := u.Merge(h); err != nil {
				t.Fatal(err)
			}
		}
		return u.Count()
	}
	want := union(owner, peer)
	gv, err := r.Global(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if gv.Kind != "hll" || gv.Value != int64(want) || exports == 0 {
		t.Fatalf("global = %v %v (%d exports from the owner); want the union of both regions, %d (region a alone: %d)", gv.Kind, gv.Value, exports, want, union(peer))
	}
	if gv.StdError == nil || *gv.StdError <= 0 {
		t.Fatalf("no standard error: %+v", gv)
	}
}
