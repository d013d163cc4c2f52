package engine

import (
	"errors"
	"testing"
	"time"
)

func addFloat(e *Engine, id, incr string) (Result, error) {
	return e.Apply(bg, Op{Type: OpAdd, ID: id, Kind: KindFloat, Float: incr}, WriteOptions{})
}

func TestFloatCounter(t *testing.T) {
	e := openMem(t)
	for _, c := range []struct{ incr, want string }{{"0.1", "0.1"}, {"0.2", "0.3"}, {"-1e1", "-9.7"}} {
		r, err := addFloat(e, "f", c.incr)
		if err != nil || r.Kind != KindFloat || r.Float != c.want || !r.Changed {
			t.Fatalf("add %s: %+v %v; want %s", c.incr, r, err, c.want)
		}
	}
	if v := mustGet(t, e, "f"); v.Kind != KindFloat || v.Float != "-9.7" || v.Version != 3 {
		t.Fatalf("get: %+v", v)
	}
	// Refused increments change nothing.
	for _, c := range []struct {
		incr string
		want error
	}{{"abc", ErrNotFloat}, {"nan", ErrNotFloat}, {" 1", ErrNotFloat}, {"inf", ErrFloatRange}, {"1e4932", nil}, {"1e4932", ErrFloatRange}} {
		_, err := addFloat(e, "g", c.incr)
		if !errors.Is(err, c.want) && !(c.want == nil && err == nil) {
			t.Fatalf("add %q: %v, want %v", c.incr, err, c.want)
		}
	}
	if _, err := addFloat(e, "f", "inf"); !errors.Is(err, ErrFloatRange) {
		t.Fatal(err)
	}
	if v := mustGet(t, e, "f"); v.Float != "-9.7" || v.Version != 3 {
		t.Fatalf("refused add changed %+v", v)
	}
	// Integer add to a non-integral float: Redis's "not an integer".
	if _, err := e.Add(bg, "f", 1, WriteOptions{}); !errors.Is(err, ErrNotInteger) {
		t.Fatalf("incr of -9.7: %v", err)
	}
	// Wrong kinds come before a bad increment, as in Redis.
	mustApply(t, e, Op{Type: OpPFAdd, ID: "u", Items: [][]byte{[]byte("a")}})
	if _, err := addFloat(e, "u", "abc"); !errors.Is(err, ErrWrongKind) {
		t.Fatalf("float add to hll: %v", err)
	}
}

// TestFloatConversions: counter and float convert like Redis strings:
// INCRBYFLOAT on an integer, INCR on an integral float, SET over a float.
func TestFloatConversions(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	e := openMem(t, func(c *Config) { c.Clock = clk.Now })
	mustApply(t, e, Op{Type: OpAdd, ID: "c", Delta: 10})
	mustApply(t, e, Op{Type: OpExpire, ID: "c", TTL: time.Hour})
	r, err := addFloat(e, "c", "0.5")
	if err != nil || r.Kind != KindFloat || r.Float != "10.5" {
		t.Fatalf("%+v %v", r, err)
	}
	if ttl, has, _ := e.TTL("c"); !has || ttl != time.Hour {
		t.Fatalf("conversion lost the ttl: %v %v", ttl, has)
	}
	if r, err = addFloat(e, "c", "0.5"); err != nil || r.Float != "11" {
		t.Fatalf("%+v %v", r, err)
	}
	r = mustApply(t, e, Op{Type: OpAdd, ID: "c", Delta: 1})
	if r.Kind != KindCounter || r.Value != 12 || r.Float != "" {
		t.Fatalf("incr of an integral float: %+v", r)
	}
	addFloat(e, "c", "0.25")
	r = mustApply(t, e, Op{Type: OpSet, ID: "c", Value: 7})
	if v := mustGet(t, e, "c"); v.Kind != KindCounter || v.Value != 7 || v.Float != "" {
		t.Fatalf("set over a float: %+v", v)
	}
	// A failed batch restores the float.
	addFloat(e, "c", "0.5")
	_, err = e.ApplyBatch(bg, []Op{{Type: OpAdd, ID: "c", Kind: KindFloat, Float: "1"}, {Type: OpAdd, ID: "c", Kind: KindFloat, Float: "x"}}, WriteOptions{})
	if !errors.Is(err, ErrNotFloat) {
		t.Fatal(err)
	}
	if v := mustGet(t, e, "c"); v.Float != "7.5" {
		t.Fatalf("failed batch left %+v", v)
	}
}

func TestFloatPersistsAndReplicates(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Dir = t.TempDir()
	e, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	addFloat(e, "f", "1e30")
	addFloat(e, "f", "0.1")
	want := mustGet(t, e, "f")
	s, ok, err := e.Export("f")
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	e = reopen(t, e, cfg)
	if got := mustGet(t, e, "f"); got.Float != want.Float || got.Version != want.Version || got.Kind != KindFloat {
		t.Fatalf("after restart %+v, want %+v", got, want)
	}
	// A replica takes the state whole; corrupt data is refused.
	r := openMem(t)
	if n, err := r.Merge(bg, []State{s}, WriteOptions{}); err != nil || n != 1 {
		t.Fatal(n, err)
	}
	if got := mustGet(t, r, "f"); got.Float != want.Float {
		t.Fatalf("replica %+v", got)
	}
	bad := s
	bad.ID, bad.Data = "g", append([]byte{1}, "0.10"...)
	if _, err := r.Merge(bg, []State{bad}, WriteOptions{}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("non-canonical float merged: %v", err)
	}
}

// reopen closes e and opens its directory again; the test closes the new
// engine when it ends.
func reopen(t *testing.T, e *Engine, cfg Config) *Engine {
	t.Helper()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	return mustOpen(t, cfg)
}
