package engine

import (
	"bytes"
	"context"
	"testing"

	"github.com/counterd/counterd/internal/counter"
)

// TestReplaceVerbatim: Replace stores states as sent, for every kind, so
// the copy exports byte for byte what the sender exported; lower versions
// are ignored; tombstones delete; a sharded state keeps its replica name.
func TestReplaceVerbatim(t *testing.T) {
	ctx := context.Background()
	src := openMem(t, func(c *Config) { c.NodeID = "eu-1" })
	dst := openMem(t, func(c *Config) { c.NodeID = "us-1" })
	for _, op := range []Op{
		{Type: OpAdd, ID: "c:1", Delta: 5},
		{Type: OpAdd, ID: "pn:1", Kind: KindPN, Delta: -3},
		{Type: OpAdd, ID: "sh:1", Kind: KindSharded, Delta: 7, Shard: 0},
		{Type: OpPFAdd, ID: "hll:1", Items: [][]byte{[]byte("x"), []byte("y")}},
		{Type: OpHAdd, ID: "h:1", Fields: []counter.FieldDelta{{Name: "f", Delta: 2}, {Name: "g", Delta: 3}}},
	} {
		if _, err := src.Apply(ctx, op, WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var states []State
	if err := src.ExportAll(ctx, func(s State) error { states = append(states, s); return nil }); err != nil {
		t.Fatal(err)
	}
	if n, err := dst.Replace(ctx, states, WriteOptions{}); err != nil || n != len(states) {
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
	if n, _ := dst.Replace(ctx, []State{old}, WriteOptions{}); n != 0 {
		t.Fatalf("a lower version replaced")
	}
	// A tombstone at the version deletes.
	v, _ := dst.Get("c:1")
	if n, err := dst.Replace(ctx, []State{{ID: "c:1", Deleted: true, Version: v.Version}}, WriteOptions{}); err != nil || n != 1 {
		t.Fatalf("tombstone: %d %v", n, err)
	}
	if v, _ := dst.Get("c:1"); v.Exists {
		t.Fatal("c:1 survived its tombstone")
	}
}
