package tiered_test

import (
	"context"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/tiered"
)

// TestFlushAllDropsOtherNodesPending: node 1 writes every kind (its
// changes still in its write-behind, one counter also flushed before),
// node 2 FLUSHALLs, then node 1 flushes: PostgreSQL must hold nothing, and
// a cold read (Redis lost its data) must find nothing, as on the node
// that flushed. Writes made after the FLUSHALL, by either node, are kept.
// Flushes are made by hand (FlushInterval 1 h), so the window is hit every
// run.
func TestFlushAllDropsOtherNodesPending(t *testing.T) {
	manual := func(o *tiered.Options) { o.FlushInterval = time.Hour }
	e := setup{}.env(t, manual)
	b2 := e.second(t, manual)
	ctx := context.Background()

	apply(t, e.b, add("old", contract.KindNone, 3))
	if err := e.b.Flush(ctx); err != nil { // PostgreSQL: old = 3
		t.Fatal(err)
	}
	ops := []contract.Op{
		add("old", contract.KindNone, 4),
		add("c", contract.KindNone, 5),
		add("s", contract.KindSharded, 6),
		{Type: contract.OpHAdd, ID: "h", Fields: []counter.FieldDelta{{Name: "f", Delta: 7}}},
		{Type: contract.OpSet, ID: "set", Value: 8},
		{Type: contract.OpAdd, ID: "fl", Kind: contract.KindFloat, Float: "1.5"},
		{Type: contract.OpPFAdd, ID: "u", Items: [][]byte{[]byte("a"), []byte("b")}},
	}
	ids := []string{"old", "c", "s", "h", "set", "fl", "u"}
	for _, op := range ops {
		apply(t, e.b, op)
	}
	if err := b2.FlushAll(ctx, contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.b.Flush(ctx); err != nil { // node 1's changes of before the FLUSHALL
		t.Fatal(err)
	}
	for _, id := range ids {
		if rec, found, err := e.b.Postgres().Load(ctx, id); err != nil || found {
			t.Errorf("PostgreSQL after node 2's FLUSHALL and node 1's flush: %s = %+v, %v; want missing", id, rec, err)
		}
	}
	if n, err := b2.Len(ctx); err != nil || n != 0 {
		t.Errorf("len after the FLUSHALL and both flushes = %d, %v; want 0", n, err)
	}
	e.flushRedis(t) // a cold read: from PostgreSQL
	for _, id := range ids {
		for i, b := range []*tiered.Backend{e.b, b2} {
			if v := view(t, b, id); v.Exists {
				t.Errorf("node %d cold read after the FLUSHALL: %s = %+v, want missing", i+1, id, v)
			}
		}
	}

	// After it: new lives, kept by PostgreSQL whichever node writes.
	apply(t, e.b, add("c", contract.KindNone, 2))
	apply(t, b2, add("c", contract.KindNone, 1))
	apply(t, b2, contract.Op{Type: contract.OpHAdd, ID: "h", Fields: []counter.FieldDelta{{Name: "f", Delta: 9}}})
	if err := e.b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b2.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	e.flushRedis(t)
	if v := view(t, e.b, "c"); !v.Exists || v.Value != 3 {
		t.Errorf("c written after the FLUSHALL, after a loss of Redis data = %+v, want 3", v)
	}
	if v := view(t, b2, "h"); !v.Exists || len(v.Fields) != 1 || v.Fields[0].Value != 9 {
		t.Errorf("h written after the FLUSHALL, after a loss of Redis data = %+v, want f=9", v)
	}

	// A window counter is not restored from PostgreSQL: after a loss of
	// Redis data its next add starts a fresh window in a new life, which
	// PostgreSQL applies (a life 1 would be below the floor).
	apply(t, e.b, add("w", contract.KindWindow, 2))
	if err := e.b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	e.flushRedis(t)
	apply(t, b2, add("w", contract.KindWindow, 3))
	if err := b2.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if rec, found, err := b2.Postgres().Load(ctx, "w"); err != nil || !found || rec.Value != 3 {
		t.Errorf("PostgreSQL: window w after a loss of Redis data and an add of 3 = %+v, %v, %v; want 3 (a fresh window's life)", rec, found, err)
	}
}
