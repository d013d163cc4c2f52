package engine

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
)

func addFloat(e *Engine, id, incr string) (contract.Result, error) {
	return e.Apply(bg, contract.Op{Type: contract.OpAdd, ID: id, Kind: contract.KindFloat, Float: incr}, contract.WriteOptions{})
}

func TestFloatCounter(t *testing.T) {
	e := openMem(t)
	for _, c := range []struct{ incr, want string }{{"0.1", "0.1"}, {"0.2", "0.3"}, {"-1e1", "-9.7"}} {
		r, err := addFloat(e, "f", c.incr)
		if err != nil || r.Kind != contract.KindFloat || r.Float != c.want || !r.Changed {
			t.Fatalf("add %s: %+v %v; want %s", c.incr, r, err, c.want)
		}
	}
	if v := mustGet(t, e, "f"); v.Kind != contract.KindFloat || v.Float != "-9.7" || v.Version != 3 {
		t.Fatalf("get: %+v", v)
	}
	// Refused increments change nothing.
	for _, c := range []struct {
		incr string
		want error
	}{{"abc", contract.ErrNotFloat}, {"nan", contract.ErrNotFloat}, {" 1", contract.ErrNotFloat}, {"inf", contract.ErrFloatRange}, {"1e4932", nil}, {"1e4932", contract.ErrFloatRange}} {
		_, err := addFloat(e, "g", c.incr)
		if !errors.Is(err, c.want) && !(c.want == nil && err == nil) {
			t.Fatalf("add %q: %v, want %v", c.incr, err, c.want)
		}
	}
	if _, err := addFloat(e, "f", "inf"); !errors.Is(err, contract.ErrFloatRange) {
		t.Fatal(err)
	}
	if v := mustGet(t, e, "f"); v.Float != "-9.7" || v.Version != 3 {
		t.Fatalf("refused add changed %+v", v)
	}
	// Integer add to a non-integral float: Redis's "not an integer".
	if _, err := e.Add(bg, "f", 1, contract.WriteOptions{}); !errors.Is(err, contract.ErrNotInteger) {
		t.Fatalf("incr of -9.7: %v", err)
	}
	// Wrong kinds come before a bad increment, as in Redis.
	mustApply(t, e, contract.Op{Type: contract.OpPFAdd, ID: "u", Items: [][]byte{[]byte("a")}})
	if _, err := addFloat(e, "u", "abc"); !errors.Is(err, contract.ErrWrongKind) {
		t.Fatalf("float add to hll: %v", err)
	}
}

// TestFloatConversions: counter and float convert like Redis strings:
// INCRBYFLOAT on an integer, INCR on an integral float, SET over a float.
func TestFloatConversions(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	e := openMem(t, func(c *Config) { c.Clock = clk.Now })
	mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: "c", Delta: 10})
	mustApply(t, e, contract.Op{Type: contract.OpExpire, ID: "c", TTL: time.Hour})
	r, err := addFloat(e, "c", "0.5")
	if err != nil || r.Kind != contract.KindFloat || r.Float != "10.5" {
		t.Fatalf("%+v %v", r, err)
	}
	if ttl, has, _ := e.TTL("c"); !has || ttl != time.Hour {
		t.Fatalf("conversion lost the ttl: %v %v", ttl, has)
	}
	if r, err = addFloat(e, "c", "0.5"); err != nil || r.Float != "11" {
		t.Fatalf("%+v %v", r, err)
	}
	r = mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: "c", Delta: 1})
	if r.Kind != contract.KindCounter || r.Value != 12 || r.Float != "" {
		t.Fatalf("incr of an integral float: %+v", r)
	}
	addFloat(e, "c", "0.25")
	r = mustApply(t, e, contract.Op{Type: contract.OpSet, ID: "c", Value: 7})
	if v := mustGet(t, e, "c"); v.Kind != contract.KindCounter || v.Value != 7 || v.Float != "" {
		t.Fatalf("set over a float: %+v", v)
	}
	// A failed batch restores the float.
	addFloat(e, "c", "0.5")
	_, err = e.ApplyBatch(bg, []contract.Op{{Type: contract.OpAdd, ID: "c", Kind: contract.KindFloat, Float: "1"}, {Type: contract.OpAdd, ID: "c", Kind: contract.KindFloat, Float: "x"}}, contract.WriteOptions{})
	if !errors.Is(err, contract.ErrNotFloat) {
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
	if got := mustGet(t, e, "f"); got.Float != want.Float || got.Version != want.Version || got.Kind != contract.KindFloat {
		t.Fatalf("after restart %+v, want %+v", got, want)
	}
	// A replica takes the state whole; corrupt data is refused.
	r := openMem(t)
	if n, err := r.Merge(bg, []State{s}, contract.WriteOptions{}); err != nil || n != 1 {
		t.Fatal(n, err)
	}
	if got := mustGet(t, r, "f"); got.Float != want.Float {
		t.Fatalf("replica %+v", got)
	}
	bad := s
	bad.ID, bad.Data = "g", append([]byte{1}, "0.10"...)
	if _, err := r.Merge(bg, []State{bad}, contract.WriteOptions{}); !errors.Is(err, contract.ErrInvalidArgument) {
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

func hincrFloat(e *Engine, id, field, incr string) (contract.Result, error) {
	return e.Apply(bg, contract.Op{Type: contract.OpHAdd, ID: id, Fields: []counter.FieldDelta{{Name: field, Float: incr}}}, contract.WriteOptions{})
}

// TestHashFloatFields: HINCRBYFLOAT through the engine, its errors, reads,
// idempotent retries, restart and replication.
func TestHashFloatFields(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Dir = t.TempDir()
	e := mustOpen(t, cfg)
	for _, c := range []struct{ incr, want string }{{"0.1", "0.1"}, {"0.2", "0.3"}} {
		r, err := hincrFloat(e, "h", "f", c.incr)
		if err != nil || len(r.Fields) != 1 || r.Fields[0].Text() != c.want || r.Kind != contract.KindHash {
			t.Fatalf("hincrbyfloat %s: %+v %v", c.incr, r, err)
		}
	}
	mustApply(t, e, contract.Op{Type: contract.OpHSet, ID: "h", Fields: []counter.FieldDelta{{Name: "g", Float: "2.5"}, {Name: "i", Delta: 4}}})
	for _, c := range []struct {
		op   contract.Op
		want error
	}{
		{contract.Op{Type: contract.OpHAdd, ID: "h", Fields: []counter.FieldDelta{{Name: "f", Delta: 1}}}, contract.ErrNotInteger},
		{contract.Op{Type: contract.OpHAdd, ID: "h", Fields: []counter.FieldDelta{{Name: "i", Float: "abc"}}}, contract.ErrNotFloat},
		{contract.Op{Type: contract.OpHAdd, ID: "h", Fields: []counter.FieldDelta{{Name: "i", Float: "inf"}}}, contract.ErrFloatRange},
		{contract.Op{Type: contract.OpHAdd, ID: "h", Fields: []counter.FieldDelta{{Name: "i", Float: "1e4932"}, {Name: "i", Float: "1e4932"}}}, contract.ErrFloatRange},
		{contract.Op{Type: contract.OpHSet, ID: "h", Fields: []counter.FieldDelta{{Name: "i", Float: "1.50"}}}, contract.ErrInvalidArgument},
		{contract.Op{Type: contract.OpHSet, ID: "h", Fields: []counter.FieldDelta{{Name: "i", Float: "1.5", Delta: 1}}}, contract.ErrInvalidArgument},
		// A bad increment is refused before the kind is looked at (Redis).
		{contract.Op{Type: contract.OpHAdd, ID: "c", Fields: []counter.FieldDelta{{Name: "i", Float: "x"}}}, contract.ErrNotFloat},
	} {
		if c.op.ID == "c" {
			mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: "c", Delta: 1})
		}
		if _, err := e.Apply(bg, c.op, contract.WriteOptions{}); !errors.Is(err, c.want) {
			t.Fatalf("%+v: %v, want %v", c.op, err, c.want)
		}
	}
	if _, err := hincrFloat(e, "c", "f", "1"); !errors.Is(err, contract.ErrWrongKind) {
		t.Fatalf("hincrbyfloat on a counter: %v", err)
	}
	want := []counter.Field{{Name: "f", Float: "0.3"}, {Name: "g", Float: "2.5"}, {Name: "i", Value: 4}}
	if v := mustGet(t, e, "h"); !slices.Equal(v.Fields, want) || v.Version != 3 {
		t.Fatalf("get %+v", v)
	}
	if _, ok, err := e.HGet("h", "f"); !ok || !errors.Is(err, contract.ErrNotInteger) {
		t.Fatalf("HGet of a float field: %v %v", ok, err)
	}
	if v, ok, err := e.HGet("h", "i"); v != 4 || !ok || err != nil {
		t.Fatalf("HGet of an integer field: %d %v %v", v, ok, err)
	}
	// An idempotent retry answers the first result; another text is
	// another request.
	wo := contract.WriteOptions{IdempotencyKey: "k1"}
	op := contract.Op{Type: contract.OpHAdd, ID: "h", Fields: []counter.FieldDelta{{Name: "g", Float: "0.25"}}}
	r1, err1 := e.Apply(bg, op, wo)
	r2, err2 := e.Apply(bg, op, wo)
	if err1 != nil || err2 != nil || !r2.Replayed || r2.Fields[0].Float != "2.75" || r1.Fields[0].Float != "2.75" {
		t.Fatalf("retry: %+v %v / %+v %v", r1, err1, r2, err2)
	}
	op.Fields[0].Float = "0.5"
	if _, err := e.Apply(bg, op, wo); !errors.Is(err, contract.ErrIdempotencyReuse) {
		t.Fatalf("same key, other increment: %v", err)
	}
	want[1].Float = "2.75"
	s, _, _ := e.Export("h")
	e = reopen(t, e, cfg)
	if v := mustGet(t, e, "h"); !slices.Equal(v.Fields, want) {
		t.Fatalf("after restart %+v", v.Fields)
	}
	r := openMem(t)
	if n, err := r.Merge(bg, []State{s}, contract.WriteOptions{}); err != nil || n != 1 {
		t.Fatal(n, err)
	}
	if v := mustGet(t, r, "h"); !slices.Equal(v.Fields, want) {
		t.Fatalf("replica %+v", v.Fields)
	}
}

// TestSetFloat: a set of a float's canonical text makes a float counter
// (Redis SET k 1.5); other texts are refused and change nothing.
func TestSetFloat(t *testing.T) {
	e := openMem(t)
	mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: "c", Delta: 5})
	r := mustApply(t, e, contract.Op{Type: contract.OpSet, ID: "c", Float: "1.5", TTL: time.Hour})
	if r.Kind != contract.KindFloat || r.Float != "1.5" {
		t.Fatalf("set float over a counter: %+v", r)
	}
	if v := mustGet(t, e, "c"); v.Kind != contract.KindFloat || v.Float != "1.5" || v.ExpiresAt.IsZero() {
		t.Fatalf("get %+v", v)
	}
	if r, _ := addFloat(e, "c", "0.5"); r.Float != "2" {
		t.Fatalf("add to a set float: %+v", r)
	}
	mustApply(t, e, contract.Op{Type: contract.OpSet, ID: "n", Float: "-0.25", SetMode: contract.SetIfAbsent})
	if v := mustGet(t, e, "n"); v.Float != "-0.25" {
		t.Fatalf("set nx float %+v", v)
	}
	for _, bad := range []contract.Op{{Type: contract.OpSet, ID: "n", Float: "1.50"}, {Type: contract.OpSet, ID: "n", Float: "1e3"}, {Type: contract.OpSet, ID: "n", Float: "1.5", Value: 1}} {
		if _, err := e.Apply(bg, bad, contract.WriteOptions{}); !errors.Is(err, contract.ErrInvalidArgument) {
			t.Fatalf("%+v: %v", bad, err)
		}
	}
	if v := mustGet(t, e, "n"); v.Float != "-0.25" || v.Version != 1 {
		t.Fatalf("refused sets changed %+v", v)
	}
	mustApply(t, e, contract.Op{Type: contract.OpSet, ID: "n", Value: 3})
	if v := mustGet(t, e, "n"); v.Kind != contract.KindCounter || v.Value != 3 {
		t.Fatalf("integer set over a float %+v", v)
	}
}
