package engine

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/rollup"
)

const day = 24 * time.Hour

// t0 is 2024-01-31 22:00 UTC: hour, day and month boundaries come soon.
var rollT0 = time.Date(2024, 1, 31, 22, 0, 0, 0, time.UTC)

func testSpec() rollup.Spec {
	s := rollup.DefaultSpec()
	s.Precision = 12
	return s
}

// diskEngine opens an engine on dir with the page_views and visitors
// namespaces rolled up; reopen it with the returned function.
func diskEngine(t *testing.T, clk *fakeClock, mod ...func(*Config)) (*Engine, func() *Engine) {
	t.Helper()
	dir := t.TempDir()
	open := func() *Engine {
		cfg := DefaultConfig()
		cfg.Dir = dir
		cfg.Clock = clk.Now
		cfg.FlushInterval = time.Hour // flushes only when asked
		cfg.Rollups = map[string]rollup.Spec{"page_views": testSpec(), "visitors": testSpec()}
		for _, m := range mod {
			m(&cfg)
		}
		return mustOpen(t, cfg)
	}
	return open(), open
}

func mustSeries(t *testing.T, e *Engine, id string, g rollup.Granularity, from, to time.Time) *rollup.Series {
	t.Helper()
	s, err := e.Series(id, g, from, to)
	if err != nil {
		t.Fatalf("Series(%q, %s): %v", id, g, err)
	}
	return s
}

// TestRollupSeries counts through hour, day and month boundaries, with
// flushes and restarts in the middle of open buckets, and checks every
// granularity.
func TestRollupSeries(t *testing.T) {
	clk := &fakeClock{t: rollT0}
	e, reopen := diskEngine(t, clk)
	id := "page_views:article_123"
	// 3 hits a minute for 3 hours (crossing 2024-02-01 00:00), restarting
	// every 47 minutes and flushing every 13.
	for m := range 180 {
		for range 3 {
			if _, err := e.Add(bg, id, 1, contract.WriteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if m%13 == 0 {
			e.Flush(bg)
		}
		if m%47 == 46 {
			e.Close()
			e = reopen()
		}
		clk.Advance(time.Minute)
	}
	now := clk.Now()
	s := mustSeries(t, e, id, rollup.Minute, rollT0, now)
	if len(s.Values) != 180 || s.Total != 540 {
		t.Fatalf("minutes: %d buckets, total %d", len(s.Values), s.Total)
	}
	for i, v := range s.Values {
		if v != 3 {
			t.Fatalf("minute %v: %d", s.Start(i), v)
		}
	}
	s = mustSeries(t, e, id, rollup.Hour, rollT0, now)
	if len(s.Values) != 3 || s.Values[0] != 180 || s.Values[2] != 180 || s.Source != rollup.Hour {
		t.Fatalf("hours: %v from %s", s.Values, s.Source)
	}
	s = mustSeries(t, e, id, rollup.Day, rollT0.Add(-day), now)
	if fmt.Sprint(s.Values) != "[0 360 180]" {
		t.Fatalf("days: %v", s.Values)
	}
	s = mustSeries(t, e, id, rollup.Month, rollT0, now)
	if fmt.Sprint(s.Values) != "[360 180]" || s.Total != 540 {
		t.Fatalf("months: %v", s.Values)
	}
	// The counter itself is unaffected.
	if v := mustGet(t, e, id); v.Value != 540 {
		t.Fatalf("value %d", v.Value)
	}
	// Decrements count as negative increments; sets do not count.
	e.Add(bg, id, -5, contract.WriteOptions{})
	mustApply(t, e, contract.Op{Type: contract.OpSet, ID: id, Value: 1000})
	if s := mustSeries(t, e, id, rollup.Day, now, now.Add(time.Second)); s.Total != 180-5 {
		t.Fatalf("after decrement and set: %v", s.Values)
	}
	// Other additive kinds keep rollups too.
	mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: "page_views:w", Kind: contract.KindWindow, Window: counter.WindowSpec{Granularity: time.Second, Span: 300 * time.Second}, Delta: 4})
	mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: "page_views:s", Kind: contract.KindSharded, Delta: 6})
	mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: "page_views:p", Kind: contract.KindPN, Delta: -2})
	for id, want := range map[string]int64{"page_views:w": 4, "page_views:s": 6, "page_views:p": -2} {
		if s := mustSeries(t, e, id, rollup.Hour, now, now.Add(time.Hour)); s.Total != want {
			t.Errorf("%s: %d", id, s.Total)
		}
	}
}

func TestRollupErrors(t *testing.T) {
	clk := &fakeClock{t: rollT0}
	e := openMem(t, func(c *Config) {
		c.Clock = clk.Now
		c.Rollups = map[string]rollup.Spec{"page_views": {Hour: 48 * time.Hour}, "visitors": {UniqueDays: 30 * day}}
	})
	now := clk.Now()
	e.Add(bg, "other:x", 1, contract.WriteOptions{})
	mustApply(t, e, contract.Op{Type: contract.OpHAdd, ID: "page_views:h", Fields: []counter.FieldDelta{{Name: "a", Delta: 1}}})
	mustApply(t, e, contract.Op{Type: contract.OpPFAdd, ID: "visitors:a", Items: [][]byte{[]byte("u")}})
	for _, tc := range []struct {
		id   string
		g    rollup.Granularity
		want error
	}{
		{"other:x", rollup.Hour, contract.ErrNotFound},
		{"page_views:h", rollup.Hour, contract.ErrWrongKind},
		{"visitors:a", rollup.Hour, contract.ErrWrongKind},
		{"page_views:x", rollup.Minute, contract.ErrInvalidArgument}, // minutes are not kept
		{"", rollup.Hour, contract.ErrInvalidID},
	} {
		if _, err := e.Series(tc.id, tc.g, now.Add(-time.Hour), now); !errors.Is(err, tc.want) {
			t.Errorf("Series(%q, %s): %v, want %v", tc.id, tc.g, err, tc.want)
		}
	}
	// A missing counter of a rolled-up namespace reads as zeros.
	if s, err := e.Series("page_views:missing", rollup.Day, now.Add(-48*time.Hour), now); err != nil || s.Total != 0 || len(s.Values) != 3 {
		t.Fatalf("missing counter: %+v %v", s, err)
	}
	for _, tc := range []struct {
		id   string
		unit rollup.Granularity
		n    int
		want error
	}{
		{"visitors:a", rollup.Hour, 1, contract.ErrNotFound},
		{"visitors:a", rollup.Day, 31, contract.ErrInvalidArgument},
		{"visitors:a", rollup.Day, 0, contract.ErrInvalidArgument},
		{"page_views:x", rollup.Day, 1, contract.ErrNotFound},
		{"other:x", rollup.Day, 1, contract.ErrWrongKind},
	} {
		if _, err := e.Uniques(tc.id, tc.unit, tc.n); !errors.Is(err, tc.want) {
			t.Errorf("Uniques(%q, %s, %d): %v, want %v", tc.id, tc.unit, tc.n, err, tc.want)
		}
	}
	if est, err := e.Uniques("visitors:missing", rollup.Day, 7); err != nil || est.Value != 0 {
		t.Fatalf("missing hll: %+v %v", est, err)
	}
}

// TestRollupCrashKeepsSyncWrites: rollup buckets of acknowledged sync
// writes survive power loss, because the flusher writes them in the batch
// that makes the increment durable.
func TestRollupCrashKeepsSyncWrites(t *testing.T) {
	fs := vfs.NewStrictMem()
	clk := &fakeClock{t: rollT0}
	cfg := DefaultConfig()
	cfg.Dir, cfg.FS, cfg.Clock = "/data", fs, clk.Now
	cfg.FlushInterval = time.Hour
	cfg.Rollups = map[string]rollup.Spec{"page_views": testSpec(), "visitors": testSpec()}
	if err := fs.MkdirAll("/data", 0o755); err != nil {
		t.Fatal(err)
	}
	root, _ := fs.OpenDir("/")
	root.Sync()
	root.Close()
	e, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 30 {
				if _, err := e.Add(bg, "page_views:a", 1, contract.WriteOptions{Durability: contract.Sync}); err != nil {
					t.Error(err)
				}
				if _, err := e.Apply(bg, contract.Op{Type: contract.OpPFAdd, ID: "visitors:a", Items: [][]byte{fmt.Appendf(nil, "u%d-%d", w, i)}}, contract.WriteOptions{Durability: contract.Sync}); err != nil {
					t.Error(err)
				}
			}
		}()
		if w == 1 {
			wg.Wait()
			clk.Advance(26 * time.Hour) // the next ones go to other buckets and days
		}
	}
	wg.Wait()
	fs.SetIgnoreSyncs(true)
	e.Add(bg, "page_views:a", 1000, contract.WriteOptions{Durability: contract.Async})
	e = reopenAfterPowerLoss(t, e, fs, cfg)
	defer e.Close()
	s := mustSeries(t, e, "page_views:a", rollup.Day, rollT0, clk.Now().Add(time.Second))
	if fmt.Sprint(s.Values) != "[60 0 60]" {
		t.Fatalf("days after the crash: %v, want the 120 acknowledged increments", s.Values)
	}
	want, _ := counter.NewHLL(testSpec().Precision)
	for w := range 4 {
		for i := range 30 {
			want.Add(fmt.Appendf(nil, "u%d-%d", w, i))
		}
	}
	est, err := e.Uniques("visitors:a", rollup.Day, 3)
	if err != nil || est.Value != want.Count() {
		t.Fatalf("uniques after the crash: %+v %v, want the sketch of the 120 acknowledged items (%d)", est, err, want.Count())
	}
}

// TestRollupIdempotentAndBatches: a replayed write does not count twice, a
// failed batch leaves the rollups as they were.
func TestRollupIdempotentAndBatches(t *testing.T) {
	clk := &fakeClock{t: rollT0}
	e, reopen := diskEngine(t, clk)
	wo := contract.WriteOptions{IdempotencyKey: "req-1"}
	for range 3 {
		if _, err := e.Add(bg, "page_views:a", 5, wo); err != nil {
			t.Fatal(err)
		}
	}
	e.Close()
	e = reopen()
	if r, err := e.Add(bg, "page_views:a", 5, wo); err != nil || !r.Replayed {
		t.Fatalf("replay after restart: %+v %v", r, err)
	}
	mustApply(t, e, contract.Op{Type: contract.OpSet, ID: "full", Value: 1 << 62})
	_, err := e.ApplyBatch(bg, []contract.Op{
		{Type: contract.OpAdd, ID: "page_views:a", Delta: 100},
		{Type: contract.OpPFAdd, ID: "visitors:b", Items: [][]byte{[]byte("x")}},
		{Type: contract.OpDelete, ID: "page_views:a"},
		{Type: contract.OpAdd, ID: "full", Delta: 1 << 62},
	}, contract.WriteOptions{})
	if !errors.Is(err, contract.ErrOverflow) {
		t.Fatalf("batch: %v", err)
	}
	e.Flush(bg)
	if s := mustSeries(t, e, "page_views:a", rollup.Hour, rollT0, clk.Now().Add(time.Minute)); s.Total != 5 {
		t.Fatalf("after replays and a failed batch: %d", s.Total)
	}
	if _, err := e.Uniques("visitors:b", rollup.Day, 1); err != nil {
		t.Fatal(err)
	}
	if est, _ := e.Uniques("visitors:b", rollup.Day, 1); est.Value != 0 {
		t.Fatalf("failed batch left a unique: %d", est.Value)
	}
}

// TestRollupDeleteForgets: deleting a counter deletes its history, also
// when it is recreated before the flush, and after restarts.
func TestRollupDeleteForgets(t *testing.T) {
	clk := &fakeClock{t: rollT0}
	e, reopen := diskEngine(t, clk)
	id := "page_views:a"
	for range 3 {
		e.Add(bg, id, 7, contract.WriteOptions{})
		clk.Advance(time.Hour)
	}
	e.Flush(bg)
	from, to := rollT0, rollT0.Add(5*time.Hour)
	if s := mustSeries(t, e, id, rollup.Hour, from, to); s.Total != 21 {
		t.Fatalf("before delete: %d", s.Total)
	}
	mustApply(t, e, contract.Op{Type: contract.OpDelete, ID: id})
	e.Add(bg, id, 1, contract.WriteOptions{}) // recreated before the flush
	if s := mustSeries(t, e, id, rollup.Hour, from, to); s.Total != 1 {
		t.Fatalf("recreated before the flush: %v", s.Values)
	}
	e.Flush(bg)
	if s := mustSeries(t, e, id, rollup.Hour, from, to); s.Total != 1 {
		t.Fatalf("recreated, flushed: %v", s.Values)
	}
	e.Close()
	e = reopen()
	if s := mustSeries(t, e, id, rollup.Hour, from, to); s.Total != 1 {
		t.Fatalf("recreated, restarted: %v", s.Values)
	}
	// Expiry deletes the history too.
	mustApply(t, e, contract.Op{Type: contract.OpExpire, ID: id, TTL: time.Minute})
	clk.Advance(2 * time.Minute)
	e.Add(bg, id, 2, contract.WriteOptions{})
	e.Flush(bg)
	e.Close()
	e = reopen()
	if s := mustSeries(t, e, id, rollup.Hour, from, to); s.Total != 2 {
		t.Fatalf("after expiry: %v", s.Values)
	}
	if n := countKeys(t, e, prefixRollupChunk) + countKeys(t, e, prefixRollupSketch); n != 0 {
		t.Fatalf("%d stored chunks of deleted lives remain", n)
	}
}

func countKeys(t *testing.T, e *Engine, prefix byte) int {
	t.Helper()
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefix}, UpperBound: []byte{prefix + 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for it.First(); it.Valid(); it.Next() {
		n++
	}
	return n
}

// TestSetRollupRuntime: a spec set at runtime applies to existing
// counters, survives a restart, and deleting it deletes the rollups.
func TestSetRollupRuntime(t *testing.T) {
	clk := &fakeClock{t: rollT0}
	e, reopen := diskEngine(t, clk, func(c *Config) { c.Rollups = nil })
	e.Add(bg, "likes:a", 1, contract.WriteOptions{})
	if _, err := e.Series("likes:a", rollup.Hour, rollT0, rollT0.Add(time.Hour)); !errors.Is(err, contract.ErrNotFound) {
		t.Fatalf("before SetRollup: %v", err)
	}
	if err := e.SetRollup("likes", rollup.Spec{Minute: 2 * time.Hour, Hour: 10 * day}); err != nil {
		t.Fatal(err)
	}
	if err := e.SetRollup("likes", rollup.Spec{Minute: -1}); !errors.Is(err, contract.ErrInvalidArgument) {
		t.Fatalf("bad spec: %v", err)
	}
	if err := e.SetRollup("", rollup.Spec{}); !errors.Is(err, contract.ErrInvalidID) {
		t.Fatalf("bad key: %v", err)
	}
	e.Add(bg, "likes:a", 2, contract.WriteOptions{})
	e.Add(bg, "likes:b", 3, contract.WriteOptions{})
	clk.Advance(2 * time.Hour)
	e.Add(bg, "likes:a", 4, contract.WriteOptions{})
	// An id's own spec overrides its namespace's.
	if err := e.SetRollup("likes:b", rollup.Spec{Day: 10 * day}); err != nil {
		t.Fatal(err)
	}
	e.Flush(bg)
	e.Close()
	e = reopen()
	if s, ok := e.Rollup("likes"); !ok || s.Minute != 2*time.Hour {
		t.Fatalf("spec after restart: %+v %v", s, ok)
	}
	if s, ok := e.RollupOf("likes:b"); !ok || s.Day != 10*day || len(e.Rollups()) != 2 {
		t.Fatalf("RollupOf: %+v %v", s, ok)
	}
	if s := mustSeries(t, e, "likes:a", rollup.Hour, rollT0, clk.Now().Add(time.Minute)); fmt.Sprint(s.Values) != "[2 0 4]" {
		t.Fatalf("likes:a hours: %v (the increment before SetRollup is not counted)", s.Values)
	}
	if s := mustSeries(t, e, "likes:b", rollup.Day, rollT0, clk.Now()); s.Total != 0 {
		t.Fatalf("likes:b days: %v (its own spec started empty)", s.Values)
	}
	if ok, err := e.DeleteRollup("likes"); !ok || err != nil {
		t.Fatalf("DeleteRollup: %v %v", ok, err)
	}
	if ok, _ := e.DeleteRollup("likes"); ok {
		t.Fatal("second DeleteRollup found a spec")
	}
	if _, err := e.Series("likes:a", rollup.Hour, rollT0, clk.Now()); !errors.Is(err, contract.ErrNotFound) {
		t.Fatalf("after DeleteRollup: %v", err)
	}
	e.Flush(bg)
	if n := countKeys(t, e, prefixRollupHead); n != 1 { // likes:b's
		t.Fatalf("%d heads after DeleteRollup, want 1", n)
	}
}

// TestUniquesEngine adds visitors day after day and checks last-N-days
// against the sketch of exactly those visitors, through flushes and
// restarts.
func TestUniquesEngine(t *testing.T) {
	clk := &fakeClock{t: rollT0.Add(-20 * time.Hour)}
	e, reopen := diskEngine(t, clk)
	id := "visitors:article_123"
	spec := testSpec()
	perDay := map[int][]string{}
	for d := range 40 {
		for i := range 30 {
			u := fmt.Sprintf("user-%d", (d*17+i*7)%400) // overlapping days
			perDay[d] = append(perDay[d], u)
			mustApply(t, e, contract.Op{Type: contract.OpPFAdd, ID: id, Items: [][]byte{[]byte(u)}})
		}
		if d%5 == 0 {
			e.Flush(bg)
		}
		if d%11 == 10 {
			e.Close()
			e = reopen()
		}
		if d < 39 {
			clk.Advance(day)
		}
	}
	for _, n := range []int{1, 2, 7, 30, 40, 100} {
		est, err := e.Uniques(id, rollup.Day, n)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := counter.NewHLL(spec.Precision)
		for d := max(0, 40-n); d < 40; d++ {
			for _, u := range perDay[d] {
				want.Add([]byte(u))
			}
		}
		if est.Value != want.Count() {
			t.Errorf("last %d days: %d, want %d (the sketch of exactly those days)", n, est.Value, want.Count())
		}
		if est.Merged > 2*8+2 {
			t.Errorf("last %d days merged %d sketches", n, est.Merged)
		}
	}
	// The hour sketches answer the last hours.
	if est, err := e.Uniques(id, rollup.Hour, 1); err != nil || est.Value != 30 {
		t.Fatalf("last hour: %+v %v", est, err)
	}
	// PFMERGE into a rolled-up hll counts the sources' items today.
	mustApply(t, e, contract.Op{Type: contract.OpPFAdd, ID: "other", Items: [][]byte{[]byte("new-1"), []byte("new-2")}})
	mustApply(t, e, contract.Op{Type: contract.OpPFMerge, ID: id, Sources: []string{"other"}})
	if est, _ := e.Uniques(id, rollup.Hour, 1); est.Value != 32 {
		t.Fatalf("after pfmerge: %d", est.Value)
	}
	// A PFADD that changes no register of the counter still counts today.
	clk.Advance(day)
	r := mustApply(t, e, contract.Op{Type: contract.OpPFAdd, ID: id, Items: [][]byte{[]byte(perDay[39][0])}})
	if est, _ := e.Uniques(id, rollup.Day, 1); r.Changed || est.Value != 1 {
		t.Fatalf("known item on a new day: changed %v, today %d", r.Changed, est.Value)
	}
	e.Flush(bg)
	e.Close()
	e = reopen()
	if est, _ := e.Uniques(id, rollup.Day, 1); est.Value != 1 {
		t.Fatalf("today after restart: %d", est.Value)
	}
}

// TestRollupPurge checks that stored rollups past their retention leave
// Pebble and that what is within it reads the same.
func TestRollupPurge(t *testing.T) {
	clk := &fakeClock{t: rollT0}
	e, _ := diskEngine(t, clk, func(c *Config) {
		c.Rollups = map[string]rollup.Spec{
			"p": {Minute: 3 * time.Hour, Hour: 2 * day},
			"v": {UniqueHours: 6 * time.Hour, UniqueDays: 3 * day, Precision: 10},
		}
	})
	for range 5 * 24 {
		e.Add(bg, "p:a", 1, contract.WriteOptions{})
		mustApply(t, e, contract.Op{Type: contract.OpPFAdd, ID: "v:a", Items: [][]byte{fmt.Appendf(nil, "%d", clk.Now().Unix())}})
		e.Flush(bg)
		clk.Advance(time.Hour)
	}
	now := clk.Now()
	before := mustSeries(t, e, "p:a", rollup.Minute, now.Add(-3*time.Hour), now)
	beforeU, _ := e.Uniques("v:a", rollup.Day, 3)
	chunks, sketches := countKeys(t, e, prefixRollupChunk), countKeys(t, e, prefixRollupSketch)
	if err := e.purgeRollups(); err != nil {
		t.Fatal(err)
	}
	after := mustSeries(t, e, "p:a", rollup.Minute, now.Add(-3*time.Hour), now)
	afterU, _ := e.Uniques("v:a", rollup.Day, 3)
	if before.Total != after.Total || beforeU.Value != afterU.Value {
		t.Fatalf("purge changed visible data: %d -> %d, %d -> %d", before.Total, after.Total, beforeU.Value, afterU.Value)
	}
	c2, s2 := countKeys(t, e, prefixRollupChunk), countKeys(t, e, prefixRollupSketch)
	t.Logf("chunks %d -> %d, sketches %d -> %d", chunks, c2, sketches, s2)
	// Left: minute chunks of the last 3-4 hours, hour chunks of the last
	// 2-3 days; hour sketches of the last 6 hours (+ unions), day sketches
	// of the last 3 days (+ unions).
	if c2 > 4+3 || s2 > 20 || c2 >= chunks || s2 >= sketches {
		t.Fatalf("purge left %d chunks and %d sketches (of %d and %d)", c2, s2, chunks, sketches)
	}
	if err := e.purgeRollups(); err != nil {
		t.Fatal(err)
	}
}

// TestWindowRestartMidWindow restarts the engine in the middle of a 60 x 1
// minute sliding window and of a fixed window: the sum continues.
func TestWindowRestartMidWindow(t *testing.T) {
	clk := &fakeClock{t: time.Date(2024, 1, 8, 10, 0, 0, 0, time.UTC)}
	dir := t.TempDir()
	open := func() *Engine {
		cfg := DefaultConfig()
		cfg.Dir, cfg.Clock = dir, clk.Now
		e, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	e := open()
	sliding := contract.Op{Type: contract.OpAdd, ID: "api_requests:user_123", Kind: contract.KindWindow, Window: counter.WindowSpec{Granularity: time.Minute, Span: time.Hour}, Delta: 1}
	fixed := contract.Op{Type: contract.OpAdd, ID: "api_requests:fixed", Kind: contract.KindWindow, Window: counter.WindowSpec{Granularity: time.Minute, Span: time.Hour, Fixed: true}, Delta: 1}
	for range 30 { // 10:00 .. 10:29
		mustApply(t, e, sliding)
		mustApply(t, e, fixed)
		clk.Advance(time.Minute)
	}
	e.Close() // a restart at 10:30, in the middle of both windows
	e = open()
	defer func() { e.Close() }()
	if v := mustGet(t, e, sliding.ID); v.Value != 30 || len(v.Buckets) != 30 {
		t.Fatalf("sliding after restart: %d in %d buckets", v.Value, len(v.Buckets))
	}
	for range 40 { // 10:30 .. 11:09
		mustApply(t, e, sliding)
		mustApply(t, e, fixed)
		clk.Advance(time.Minute)
	}
	// At 11:10 the sliding window holds 10:11 .. 11:09 (59 hits); the
	// fixed window restarted at 11:00 (10 hits).
	if v := mustGet(t, e, sliding.ID); v.Value != 59 {
		t.Fatalf("sliding: %d, want 59", v.Value)
	}
	if v := mustGet(t, e, fixed.ID); v.Value != 10 {
		t.Fatalf("fixed: %d, want 10", v.Value)
	}
	// A restart with a gap longer than the window: everything left it.
	e.Close()
	clk.Advance(2 * time.Hour)
	e = open()
	if v := mustGet(t, e, sliding.ID); v.Value != 0 || len(v.Buckets) != 0 {
		t.Fatalf("after a 2h gap: %+v", v)
	}
	if r := mustApply(t, e, sliding); r.Value != 1 {
		t.Fatalf("first hit after the gap: %d", r.Value)
	}
}

// TestHitCounterScript is the seed's hit counter (hit(t), getHits(t) over
// the last 300 seconds) driven through the engine, with many hits in one
// second and a gap longer than the window.
func TestHitCounterScript(t *testing.T) {
	base := time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC)
	clk := &fakeClock{t: base}
	e := openMem(t, func(c *Config) { c.Clock = clk.Now })
	at := func(s int) { clk.t = base.Add(time.Duration(s) * time.Second) }
	hit := func(s int) {
		t.Helper()
		at(s)
		mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: "hits", Kind: contract.KindWindow, Window: counter.WindowSpec{Granularity: time.Second, Span: 300 * time.Second}, Delta: 1})
	}
	getHits := func(s int) int64 {
		t.Helper()
		at(s)
		return mustGet(t, e, "hits").Value
	}
	for _, step := range []struct {
		hit  []int
		get  int
		want int64
	}{
		// The classic script: hits at 1, 2, 3; getHits(4) = 3; hit at
		// 300; getHits(300) = 4; getHits(301) = 3.
		{hit: []int{1, 2, 3}, get: 4, want: 3},
		{hit: []int{300}, get: 300, want: 4},
		{get: 301, want: 3},
		{get: 302, want: 2},
		{get: 303, want: 1},
		// Many hits in one second.
		{hit: []int{400, 400, 400, 400, 400, 400, 400, 400, 400, 400}, get: 400, want: 11},
		{get: 599, want: 11},
		{get: 600, want: 10}, // 300 has left
		{get: 699, want: 10},
		{get: 700, want: 0}, // 400 has left
		// A gap longer than the window.
		{hit: []int{5000}, get: 5000, want: 1},
		{get: 5299, want: 1},
		{get: 5300, want: 0},
	} {
		for _, s := range step.hit {
			hit(s)
		}
		if got := getHits(step.get); got != step.want {
			t.Fatalf("getHits(%d) = %d, want %d", step.get, got, step.want)
		}
	}
}

// TestFixedWindowBurst is seed 000's boundary example: a limit of 1000 per
// hour in a fixed window lets 1000 requests through at 10:59:59 and 1000
// more at 11:00:00, 2000 in one second; the sliding window sees all 2000.
func TestFixedWindowBurst(t *testing.T) {
	clk := &fakeClock{t: time.Date(2024, 1, 8, 10, 59, 59, 0, time.UTC)}
	e := openMem(t, func(c *Config) { c.Clock = clk.Now })
	hour := counter.WindowSpec{Granularity: time.Second, Span: time.Hour}
	fixed, sliding := hour, hour
	fixed.Fixed = true
	add := func(id string, spec counter.WindowSpec) int64 {
		return mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: id, Kind: contract.KindWindow, Window: spec, Delta: 1000}).Value
	}
	if add("fixed", fixed) != 1000 || add("sliding", sliding) != 1000 {
		t.Fatal("first burst")
	}
	clk.Advance(time.Second) // 11:00:00: a new fixed window
	if got := add("fixed", fixed); got != 1000 {
		t.Fatalf("fixed window after the boundary: %d, want 1000 (the 2x burst)", got)
	}
	if got := add("sliding", sliding); got != 2000 {
		t.Fatalf("sliding window: %d, want 2000", got)
	}
}
