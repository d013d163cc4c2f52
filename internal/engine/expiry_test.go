package engine

import (
	"testing"
	"time"
)

// TestActiveExpiry: counters whose TTL passed are deleted by the janitor
// without being read, and the deletion reaches disk.
func TestActiveExpiry(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.Dir = dir
	cfg.Clock = clk.Now
	e, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c"} {
		mustApply(t, e, Op{Type: OpAdd, ID: id, Delta: 1})
	}
	mustApply(t, e, Op{Type: OpExpire, ID: "a", TTL: time.Second})
	mustApply(t, e, Op{Type: OpSet, ID: "b", Value: 5, TTL: time.Minute})
	if st := e.Stats(); st.Keys != 3 || st.Expires != 2 {
		t.Fatalf("stats before expiry: %+v", st)
	}
	clk.Advance(2 * time.Second)
	e.expireDue() // what the janitor runs every second
	if st := e.Stats(); st.Keys != 2 || st.Expires != 1 {
		t.Fatalf("stats after a's TTL: %+v", st)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e, err = Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.Len() != 2 || mustGet(t, e, "a").Exists || !mustGet(t, e, "b").Exists {
		t.Fatalf("after restart: len %d", e.Len())
	}
	clk.Advance(time.Hour) // b expired while the node was down
	if mustGet(t, e, "b").Exists {
		t.Fatal("b outlived its TTL across a restart")
	}
}

// TestIdempotencyPurge: records past the retention leave memory and disk.
func TestIdempotencyPurge(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	e := openMem(t, func(c *Config) { c.Clock = clk.Now; c.IdempotencyRetention = time.Hour })
	e.Add(bg, "k", 1, WriteOptions{IdempotencyKey: "old"})
	clk.Advance(30 * time.Minute)
	e.Add(bg, "k", 1, WriteOptions{IdempotencyKey: "young"})
	if err := e.Flush(bg); err != nil {
		t.Fatal(err)
	}
	clk.Advance(45 * time.Minute) // "old" is 75 minutes old, "young" 45
	if err := e.purgeIdempotency(); err != nil {
		t.Fatal(err)
	}
	if r, err := e.readIdem("old"); err != nil || r != nil {
		t.Fatalf("old record still on disk: %+v %v", r, err)
	}
	if r, err := e.readIdem("young"); err != nil || r == nil {
		t.Fatalf("young record purged: %v", err)
	}
	if n := e.Stats().IdemRecords; n != 1 {
		t.Fatalf("%d records in memory, want 1", n)
	}
}
