package tiered_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/testutil/pgtest"
	"github.com/counterd/counterd/internal/testutil/redistest"
	"github.com/counterd/counterd/internal/tiered"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// env is one tiered backend over a private Redis and a fresh database.
type env struct {
	rd  *redistest.Server
	dsn string
	b   *tiered.Backend
}

// newEnv opens a backend; tweak adjusts the options (may be nil).
func newEnv(t *testing.T, tweak func(*tiered.Options)) *env {
	t.Helper()
	e := &env{rd: redistest.New(t), dsn: pgtest.DSN(t)}
	e.b = e.open(t, tweak)
	return e
}

func (e *env) open(t *testing.T, tweak func(*tiered.Options)) *tiered.Backend {
	t.Helper()
	o := tiered.Options{RedisURL: e.rd.URL, PostgresDSN: e.dsn, FlushInterval: 50 * time.Millisecond, NodeID: "t"}
	o.Postgres.MaintenanceInterval = -1
	if tweak != nil {
		tweak(&o)
	}
	b, err := tiered.Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func apply(t *testing.T, b *tiered.Backend, op engine.Op) engine.Result {
	t.Helper()
	r, err := b.Apply(context.Background(), op, engine.WriteOptions{})
	if err != nil {
		t.Fatalf("apply %+v: %v", op, err)
	}
	return r
}

func view(t *testing.T, b *tiered.Backend, id string) engine.View {
	t.Helper()
	v, err := b.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return v
}

func add(id string, k engine.Kind, d int64) engine.Op {
	return engine.Op{Type: engine.OpAdd, ID: id, Kind: k, Delta: d}
}

// allKinds writes one counter of every kind and returns their ids.
func allKinds(t *testing.T, b *tiered.Backend) {
	t.Helper()
	apply(t, b, add("c", engine.KindNone, 5))
	apply(t, b, add("c", engine.KindCounter, -2))
	for i := 0; i < 10; i++ {
		apply(t, b, add("sh", engine.KindSharded, 1))
	}
	apply(t, b, add("pn", engine.KindPN, 7))
	apply(t, b, add("pn", engine.KindPN, -10))
	apply(t, b, engine.Op{Type: engine.OpAdd, ID: "w", Kind: engine.KindWindow, Delta: 4,
		Window: counter.WindowSpec{Granularity: time.Second, Span: time.Minute}})
	apply(t, b, engine.Op{Type: engine.OpPFAdd, ID: "u", Items: [][]byte{[]byte("a"), []byte("b"), []byte("a")}})
	apply(t, b, engine.Op{Type: engine.OpHAdd, ID: "h", Fields: []counter.FieldDelta{{Name: "likes", Delta: 2}, {Name: "views", Delta: 9}}})
}

// checkKinds checks what allKinds wrote (withWindow: the window too, which
// lives in Redis only).
func checkKinds(t *testing.T, b *tiered.Backend, withWindow bool) {
	t.Helper()
	want := map[string]struct {
		kind engine.Kind
		val  int64
	}{"c": {engine.KindCounter, 3}, "sh": {engine.KindSharded, 10}, "pn": {engine.KindPN, -3}, "u": {engine.KindHLL, 2}}
	if withWindow {
		want["w"] = struct {
			kind engine.Kind
			val  int64
		}{engine.KindWindow, 4}
	}
	for id, w := range want {
		if v := view(t, b, id); !v.Exists || v.Kind != w.kind || v.Value != w.val {
			t.Errorf("%s = %+v, want %s %d", id, v, w.kind, w.val)
		}
	}
	if v, ok, err := b.HGet(context.Background(), "h", "views"); err != nil || !ok || v != 9 {
		t.Errorf("HGet h views = %d %v %v", v, ok, err)
	}
}

func isUnavailable(err error) bool {
	return errors.Is(err, tiered.ErrUnavailable) && errors.Is(err, engine.ErrUnavailable)
}
