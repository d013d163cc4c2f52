package engine

import (
	"github.com/counterd/counterd/internal/contract"
	"maps"
	"testing"
)

// TestMetaSurvivesReopen: metadata records are durable, scanned by
// prefix, deleted by nil values, and left alone by FlushAll.
func TestMetaSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.Dir, cfg.NodeID = dir, "n1"
	e, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.PutMeta(map[string][]byte{"p/a": []byte("1"), "p/b": []byte("2"), "q/c": []byte("3")}); err != nil {
		t.Fatal(err)
	}
	if err := e.PutMeta(map[string][]byte{"p/b": nil}); err != nil {
		t.Fatal(err)
	}
	if err := e.FlushAll(bg, contract.WriteOptions{Durability: contract.Sync}); err != nil {
		t.Fatal(err)
	}
	if err := e.PutMeta(map[string][]byte{"": []byte("x")}); err == nil {
		t.Fatal("empty key accepted")
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = mustOpen(t, cfg)
	got, err := e.Meta("p/")
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string][]byte{"p/a": []byte("1")}; !maps.EqualFunc(got, want, func(a, b []byte) bool { return string(a) == string(b) }) {
		t.Fatalf("Meta(p/) = %q, want %q", got, want)
	}
	all, err := e.Meta("")
	if err != nil || len(all) != 2 {
		t.Fatalf("Meta() = %q, %v; want 2 records", all, err)
	}
	if e.Len() != 0 {
		t.Fatalf("metadata counted as %d counters", e.Len())
	}
}
