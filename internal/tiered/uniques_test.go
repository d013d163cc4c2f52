package tiered_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/api/httpapi"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/rollup"
	"github.com/counterd/counterd/internal/testutil/pgtest"
	"github.com/counterd/counterd/internal/testutil/redistest"
	"github.com/counterd/counterd/internal/tiered"
)

// uniquesBase is "now" of the unique-count tests (injected clock).
var uniquesBase = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

// fakeClock is an injectable clock starting at uniquesBase.
type fakeClock struct{ ns atomic.Int64 }

func newClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(uniquesBase.UnixNano())
	return c
}

func (c *fakeClock) now() time.Time  { return time.Unix(0, c.ns.Load()).UTC() }
func (c *fakeClock) set(t time.Time) { c.ns.Store(t.UnixNano()) }
func (c *fakeClock) daysAgo(d int)   { c.set(uniquesBase.AddDate(0, 0, -d)) }
func (c *fakeClock) options() func(o *tiered.Options) {
	return func(o *tiered.Options) { o.Now = c.now }
}

// fillDays adds, for each of the days days before uniquesBase (and its
// day), perDay items of that day only and common items shared by every
// day: the last n days hold perDay*n + common distinct items.
func fillDays(tb testing.TB, b *tiered.Backend, c *fakeClock, id string, days, perDay, common int) {
	tb.Helper()
	ctx := context.Background()
	for d := days - 1; d >= 0; d-- {
		c.daysAgo(d)
		items := make([][]byte, 0, perDay+common)
		for k := range perDay {
			items = append(items, fmt.Appendf(nil, "day%d-item%d", d, k))
		}
		for k := range common {
			items = append(items, fmt.Appendf(nil, "common%d", k))
		}
		if _, err := b.Apply(ctx, contract.Op{Type: contract.OpPFAdd, ID: id, Items: items}, contract.WriteOptions{}); err != nil {
			tb.Fatal(err)
		}
	}
	c.set(uniquesBase)
}

// newUniquesEnv opens a backend on a fake clock with spec set for ns.
func newUniquesEnv(t *testing.T, s setup, ns string, spec rollup.Spec) (*env, *fakeClock) {
	t.Helper()
	c := newClock()
	e := s.env(t, c.options())
	if err := e.b.SetRollup(context.Background(), ns, spec); err != nil {
		t.Fatal(err)
	}
	return e, c
}

func uniques(t *testing.T, b *tiered.Backend, id string, unit rollup.Granularity, n int) *rollup.Estimate {
	t.Helper()
	est, err := b.Uniques(context.Background(), id, unit, n)
	if err != nil {
		t.Fatalf("uniques %s last %d %s: %v", id, n, unit, err)
	}
	return est
}

// within3 checks est against want within 3 standard errors.
func within3(t *testing.T, what string, est *rollup.Estimate, want int) {
	t.Helper()
	if d := math.Abs(float64(est.Value) - float64(want)); d > 3*est.StdError*float64(want)+1 {
		t.Errorf("%s = %d, want %d within 3 standard errors (%.2f%%)", what, est.Value, want, 300*est.StdError)
	}
}

func testUniquesTiered(t *testing.T, s setup) {
	e, c := newUniquesEnv(t, s, "visits", rollup.DefaultSpec())
	const perDay, common = 40, 60
	fillDays(t, e.b, c, "visits:home", 400, perDay, common)
	today := uniquesBase.Truncate(24 * time.Hour)
	got := map[int]uint64{}
	for _, n := range []int{1, 7, 30, 365, 400} {
		est := uniques(t, e.b, "visits:home", rollup.Day, n)
		within3(t, fmt.Sprintf("last %dd", n), est, perDay*n+common)
		if est.Precision != 14 || math.Abs(est.StdError-0.0081) > 0.0001 || est.N != n || est.Unit != rollup.Day ||
			!est.To.Equal(today.AddDate(0, 0, 1)) || !est.From.Equal(today.AddDate(0, 0, 1-n)) {
			t.Errorf("last %dd: %+v", n, est)
		}
		if est.Merged > 2*rollup.Levels(rollup.Day)+n>>rollup.Levels(rollup.Day)+1 {
			t.Errorf("last %dd merged %d sketches", n, est.Merged)
		}
		got[n] = est.Value
	}
	// Hours: the adds were at 12:00 of each day.
	within3(t, "last 1h", uniques(t, e.b, "visits:home", rollup.Hour, 1), perDay+common)
	within3(t, "last 48h", uniques(t, e.b, "visits:home", rollup.Hour, 48), 2*perDay+common)

	// The Redis tier is lost: the sketches come back from PostgreSQL,
	// register for register.
	e.flushRedis(t)
	for n, want := range got {
		if est := uniques(t, e.b, "visits:home", rollup.Day, n); est.Value != want {
			t.Errorf("last %dd after FLUSHALL = %d, want %d", n, est.Value, want)
		}
	}
	// Adds after a loss land in sketches that are then filled from
	// PostgreSQL, not replaced.
	e.flushRedis(t)
	apply(t, e.b, contract.Op{Type: contract.OpPFAdd, ID: "visits:home", Items: [][]byte{[]byte("late")}})
	within3(t, "last 1d after FLUSHALL and an add", uniques(t, e.b, "visits:home", rollup.Day, 1), perDay+common+1)

	// A reopened backend (empty memory, flushed on Close) reads the same.
	want := uniques(t, e.b, "visits:home", rollup.Day, 365).Value
	if err := e.b.Close(); err != nil {
		t.Fatal(err)
	}
	e.flushRedis(t)
	b2 := e.open(t, c.options())
	if est := uniques(t, b2, "visits:home", rollup.Day, 365); est.Value != want {
		t.Errorf("last 365d after reopen = %d, want %d", est.Value, want)
	}
}

func TestUniquesPrecisionAndUnits(t *testing.T) {
	e, c := newUniquesEnv(t, setup{}, "hours", rollup.Spec{UniqueHours: 24 * time.Hour, Precision: 12})
	ctx := context.Background()
	fillDays(t, e.b, c, "hours:x", 1, 500, 0)
	est := uniques(t, e.b, "hours:x", rollup.Hour, 24)
	within3(t, "last 24h at p=12", est, 500)
	if est.Precision != 12 || math.Abs(est.StdError-1.04/64) > 1e-9 {
		t.Errorf("p=12 estimate: %+v", est)
	}
	if _, err := e.b.Uniques(ctx, "hours:x", rollup.Day, 1); !errors.Is(err, contract.ErrNotFound) {
		t.Errorf("day uniques of an hours-only spec: %v, want ErrNotFound", err)
	}
	if _, err := e.b.Uniques(ctx, "hours:x", rollup.Hour, 25); !errors.Is(err, contract.ErrInvalidArgument) {
		t.Errorf("25h of a 24h retention: %v, want ErrInvalidArgument", err)
	}
	// A missing counter under a spec counts 0.
	if est := uniques(t, e.b, "hours:none", rollup.Hour, 3); est.Value != 0 || est.Merged != 0 {
		t.Errorf("missing counter: %+v", est)
	}
}

func TestUniquesBadInput(t *testing.T) {
	e, _ := newUniquesEnv(t, setup{}, "v", rollup.DefaultSpec())
	ctx := context.Background()
	apply(t, e.b, contract.Op{Type: contract.OpPFAdd, ID: "v:a", Items: [][]byte{[]byte("x")}})
	apply(t, e.b, add("v:count", contract.KindNone, 1))
	apply(t, e.b, contract.Op{Type: contract.OpPFAdd, ID: "nospec:a", Items: [][]byte{[]byte("x")}})
	cases := []struct {
		id   string
		unit rollup.Granularity
		n    int
		want error
	}{
		{"v:a", rollup.Day, 0, contract.ErrInvalidArgument},
		{"v:a", rollup.Day, -1, contract.ErrInvalidArgument},
		{"v:a", rollup.Day, 401, contract.ErrInvalidArgument},
		{"v:a", rollup.Hour, 49, contract.ErrInvalidArgument}, // DefaultSpec keeps 48h
		{"v:a", rollup.Minute, 1, contract.ErrInvalidArgument},
		{"v:a", rollup.Month, 1, contract.ErrInvalidArgument},
		{"v:a", rollup.Granularity(9), 1, contract.ErrInvalidArgument},
		{"v:count", rollup.Day, 1, contract.ErrWrongKind},
		{"nospec:a", rollup.Day, 1, contract.ErrNotFound},
		{"", rollup.Day, 1, contract.ErrInvalidID},
		{"}a", rollup.Day, 1, contract.ErrInvalidID},
	}
	for _, tc := range cases {
		if _, err := e.b.Uniques(ctx, tc.id, tc.unit, tc.n); !errors.Is(err, tc.want) {
			t.Errorf("Uniques(%q, %s, %d) = %v, want %v", tc.id, tc.unit, tc.n, err, tc.want)
		}
	}
	if est := uniques(t, e.b, "v:a", rollup.Day, 400); est.Value != 1 {
		t.Errorf("last 400d = %+v", est)
	}
	// Deleting the spec stops the sketches.
	if _, err := e.b.DeleteRollup(ctx, "v"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.b.Uniques(ctx, "v:a", rollup.Day, 1); !errors.Is(err, contract.ErrNotFound) {
		t.Errorf("after DeleteRollup: %v, want ErrNotFound", err)
	}
}

// TestUniquesDeletedWithCounter: deleting an hll counter deletes its
// sketches (Redis, pending and PostgreSQL), as in the embedded engine.
func testUniquesDeletedWithCounter(t *testing.T, s setup) {
	e, c := newUniquesEnv(t, s, "v", rollup.DefaultSpec())
	ctx := context.Background()
	fillDays(t, e.b, c, "v:a", 30, 3, 0)
	if est := uniques(t, e.b, "v:a", rollup.Day, 30); est.Value != 90 {
		t.Fatalf("before delete: %+v", est)
	}
	apply(t, e.b, contract.Op{Type: contract.OpDelete, ID: "v:a"})
	for _, flush := range []bool{false, true} {
		if flush {
			e.flushRedis(t)
		}
		if est := uniques(t, e.b, "v:a", rollup.Day, 30); est.Value != 0 {
			t.Errorf("after delete (Redis flushed: %v): %+v", flush, est)
		}
	}
	apply(t, e.b, contract.Op{Type: contract.OpPFAdd, ID: "v:a", Items: [][]byte{[]byte("new")}})
	if est := uniques(t, e.b, "v:a", rollup.Day, 30); est.Value != 1 {
		t.Errorf("new counter: %+v", est)
	}
	if err := e.b.FlushAll(ctx, contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if est := uniques(t, e.b, "v:a", rollup.Day, 30); est.Value != 0 {
		t.Errorf("after FlushAll: %+v", est)
	}
}

// TestHTTPUniques serves GET /counters/{id}/uniques over the tiered backend.
func TestHTTPUniques(t *testing.T) {
	e, c := newUniquesEnv(t, setup{}, "visits", rollup.DefaultSpec())
	fillDays(t, e.b, c, "visits:a", 10, 5, 5)
	srv := httptest.NewServer(httpapi.New(e.b, httpapi.Options{}))
	defer srv.Close()
	u := srv.URL + "/counters/"
	code, m := httpDo(t, "GET", u+"visits:a/uniques?last=7d", "")
	if code != 200 || m["value"] != 40.0 || m["precision"] == nil || m["from"] != "2026-11-16T00:00:00.000Z" {
		t.Errorf("GET uniques?last=7d: %d %v", code, m)
	}
	if code, m := httpDo(t, "GET", u+"visits:a/uniques", ""); code != 200 || m["value"] != 10.0 {
		t.Errorf("GET uniques (1d): %d %v", code, m)
	}
	if code, m := httpDo(t, "GET", u+"visits:a/uniques?last=2h", ""); code != 200 || m["value"] != 10.0 {
		t.Errorf("GET uniques?last=2h: %d %v", code, m)
	}
	for q, want := range map[string]int{"visits:a/uniques?last=401d": 400, "visits:a/uniques?last=0d": 400,
		"visits:a/uniques?last=7w": 400, "other:a/uniques?last=1d": 404} {
		if code, m := httpDo(t, "GET", u+q, ""); code != want {
			t.Errorf("GET %s: %d %v, want %d", q, code, m, want)
		}
	}
}

// BenchmarkUniques365d measures Uniques over the last 365 days of a
// counter with a year of day sketches (warm Redis: each query is one MGET
// of 6 to 13 keys (at most 2*8+n/256+1) and a merge of their registers), and reports
// the latency percentiles:
//
//	go test -run '^$' -bench Uniques365d -benchtime 2000x ./internal/tiered/
func BenchmarkUniques365d(b *testing.B) {
	rd, dsn := redistest.New(b), pgtest.DSN(b)
	c := newClock()
	o := tiered.Options{RedisURL: rd.URL, PostgresDSN: dsn, NodeID: "bench", Now: c.now}
	o.Postgres.MaintenanceInterval = -1
	be, err := tiered.Open(context.Background(), o)
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	ctx := context.Background()
	if err := be.SetRollup(ctx, "bench", rollup.DefaultSpec()); err != nil {
		b.Fatal(err)
	}
	fillDays(b, be, c, "bench:u", 365, 100, 20)
	if _, err := be.Uniques(ctx, "bench:u", rollup.Day, 365); err != nil { // fills and flushes
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		est, err := be.Uniques(ctx, "bench:u", rollup.Day, 365)
		lat = append(lat, time.Since(start))
		if err != nil || est.Value == 0 {
			b.Fatal(est, err)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) }
	b.ReportMetric(pct(0.5), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
}

// TestMaxRegisters checks the 8-at-a-time register maximum against the
// plain one, on every pair of register values.
func TestMaxRegisters(t *testing.T) {
	var a, b []byte
	for x := range 64 {
		for y := range 64 {
			a, b = append(a, byte(x)), append(b, byte(y))
		}
	}
	a, b = append(a, 5, 63, 0), append(b, 9, 1, 0) // a tail shorter than 8
	want := make([]byte, len(a))
	for i := range a {
		want[i] = max(a[i], b[i])
	}
	tiered.MaxRegisters(a, string(b))
	if string(a) != string(want) {
		t.Fatalf("got %v\nwant %v", a, want)
	}
}
