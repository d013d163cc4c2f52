package engine

import (
	"bytes"
	"context"
	"testing"

	"pgregory.net/rapid"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
)

// TestReplaceVerbatim: Replace stores states as sent, for every kind, so
// the copy exports byte for byte what the sender exported; lower versions
// are ignored; tombstones delete; a sharded state keeps its replica name.
func TestReplaceVerbatim(t *testing.T) {
	ctx := context.Background()
	src := openMem(t, func(c *Config) { c.NodeID = "eu-1" })
	dst := openMem(t, func(c *Config) { c.NodeID = "us-1" })
	for _, op := range []contract.Op{
		{Type: contract.OpAdd, ID: "c:1", Delta: 5},
		{Type: contract.OpAdd, ID: "pn:1", Kind: contract.KindPN, Delta: -3},
		{Type: contract.OpAdd, ID: "sh:1", Kind: contract.KindSharded, Delta: 7, Shard: 0},
		{Type: contract.OpPFAdd, ID: "hll:1", Items: [][]byte{[]byte("x"), []byte("y")}},
		{Type: contract.OpHAdd, ID: "h:1", Fields: []counter.FieldDelta{{Name: "f", Delta: 2}, {Name: "g", Delta: 3}}},
	} {
		if _, err := src.Apply(ctx, op, contract.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var states []State
	if err := src.ExportAll(ctx, func(s State) error { states = append(states, s); return nil }); err != nil {
		t.Fatal(err)
	}
	if n, err := dst.Replace(ctx, states, contract.WriteOptions{}); err != nil || n != len(states) {
		t.Fatalf("replace: %d %v", n, err)
	}
	for _, s := range states {
		got, ok, err := dst.Export(s.ID)
		if err != nil || !ok || got.Version != s.Version || got.UpdatedAt != s.UpdatedAt || !bytes.Equal(got.Data, s.Data) {
			t.Fatalf("%s: copy %+v, sent %+v (%v)", s.ID, got, s, err)
		}
	}
	// A lower version changes nothing, even for a CRDT.
	old := states[0]
	old.Version = 0
	if n, _ := dst.Replace(ctx, []State{old}, contract.WriteOptions{}); n != 0 {
		t.Fatalf("a lower version replaced")
	}
	// A tombstone at the version deletes.
	v, _ := dst.Get("c:1")
	if n, err := dst.Replace(ctx, []State{{ID: "c:1", Deleted: true, Version: v.Version}}, contract.WriteOptions{}); err != nil || n != 1 {
		t.Fatalf("tombstone: %d %v", n, err)
	}
	if v, _ := dst.Get("c:1"); v.Exists {
		t.Fatal("c:1 survived its tombstone")
	}
}

// TestReplaceJoinsClusterRegion: the nodes of a cluster region add to a
// pn counter in their own slots, replicate to each other (Merge, which
// raises Lamport versions), and each ships whatever it holds to a peer
// region's copy (Replace) in any order, any number of times: the copy
// never holds more than the region's sum of adds per slot, and once every
// node has shipped its final state it holds exactly the sum.
func TestReplaceJoinsClusterRegion(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		open := func(id string) *Engine {
			cfg := DefaultConfig()
			cfg.InMemory, cfg.NodeID = true, id
			e, err := Open(cfg)
			if err != nil {
				rt.Fatal(err)
			}
			return e
		}
		nodes := []*Engine{open("n1"), open("n2"), open("n3")}
		cp := open("eu")
		defer func() {
			for _, e := range append(nodes, cp) {
				e.Close()
			}
		}()
		ids := []string{"pn:a", "pn:b"}
		want := map[string]int64{}
		export := func(e *Engine, id string) (State, bool) {
			s, ok, err := e.Export(id)
			if err != nil {
				rt.Fatal(err)
			}
			return s, ok
		}
		steps := rapid.IntRange(1, 40).Draw(rt, "steps")
		for range steps {
			i := rapid.IntRange(0, len(nodes)-1).Draw(rt, "node")
			id := rapid.SampledFrom(ids).Draw(rt, "id")
			switch rapid.IntRange(0, 2).Draw(rt, "what") {
			case 0:
				d := rapid.Int64Range(-5, 9).Draw(rt, "delta")
				if _, err := nodes[i].Apply(ctx, contract.Op{Type: contract.OpAdd, ID: id, Kind: contract.KindPN, Delta: d}, contract.WriteOptions{}); err != nil {
					rt.Fatal(err)
				}
				want[id] += d
			case 1: // replication inside the region
				j := rapid.IntRange(0, len(nodes)-1).Draw(rt, "to")
				if s, ok := export(nodes[i], id); ok {
					if _, err := nodes[j].Merge(ctx, []State{s}, contract.WriteOptions{}); err != nil {
						rt.Fatal(err)
					}
				}
			case 2: // node i ships what it holds to the peer region
				if s, ok := export(nodes[i], id); ok {
					if _, err := cp.Replace(ctx, []State{s}, contract.WriteOptions{}); err != nil {
						rt.Fatal(err)
					}
				}
			}
		}
		for _, n := range nodes {
			for _, id := range ids {
				if s, ok := export(n, id); ok {
					if _, err := cp.Replace(ctx, []State{s}, contract.WriteOptions{}); err != nil {
						rt.Fatal(err)
					}
				}
			}
		}
		for _, id := range ids {
			v, err := cp.Get(id)
			if err != nil || v.Value != want[id] {
				rt.Fatalf("copy of %s = %d (%v), want the region's sum %d", id, v.Value, err, want[id])
			}
		}
	})
}
