package tiered_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/rollup"
	"github.com/counterd/counterd/internal/testutil/pgtest"
	"github.com/counterd/counterd/internal/tiered"
)

func testEveryKind(t *testing.T, s setup) {
	e := s.env(t, nil)
	allKinds(t, e.b)
	checkKinds(t, e.b, true)
	ctx := context.Background()
	if v := view(t, e.b, "sh"); len(v.Shards) != 8 {
		t.Errorf("shards = %v", v.Shards)
	}
	if n, se, err := e.b.PFCount(ctx, "u", "missing"); err != nil || n != 2 || se == 0 {
		t.Errorf("PFCount = %d %v %v", n, se, err)
	}
	// wrong kind, overflow: typed errors, nothing changed
	if _, err := e.b.Apply(ctx, add("h", contract.KindNone, 1), contract.WriteOptions{}); !errors.Is(err, contract.ErrWrongKind) {
		t.Errorf("add to hash: %v", err)
	}
	apply(t, e.b, contract.Op{Type: contract.OpSet, ID: "big", Value: math.MaxInt64 - 1})
	if _, err := e.b.Apply(ctx, add("big", contract.KindNone, 5), contract.WriteOptions{}); !errors.Is(err, contract.ErrOverflow) {
		t.Errorf("overflow: %v", err)
	}
	if v := view(t, e.b, "big"); v.Value != math.MaxInt64-1 {
		t.Errorf("big after overflow = %d", v.Value)
	}
	apply(t, e.b, contract.Op{Type: contract.OpSet, ID: "p53", Value: 1<<53 + 1})
	if r := apply(t, e.b, add("p53", contract.KindNone, 2)); r.Value != 1<<53+3 {
		t.Errorf("add above 2^53 = %d, want %d (exact int64)", r.Value, int64(1<<53+3))
	}
	if _, err := e.b.Apply(ctx, contract.Op{Type: contract.OpAdd, ID: ""}, contract.WriteOptions{}); !errors.Is(err, contract.ErrInvalidID) {
		t.Errorf("empty id: %v", err)
	}
	// set with version, NX, delete, expire, hdel, pfmerge
	if _, err := e.b.Apply(ctx, contract.Op{Type: contract.OpSet, ID: "c", Value: 1, CheckVersion: true, ExpectedVersion: 99}, contract.WriteOptions{}); !errors.Is(err, contract.ErrVersionConflict) {
		t.Errorf("set with stale version: %v", err)
	}
	if r := apply(t, e.b, contract.Op{Type: contract.OpSet, ID: "c", Value: 1, SetMode: contract.SetIfAbsent}); r.Changed {
		t.Errorf("SET NX on existing changed it: %+v", r)
	}
	apply(t, e.b, contract.Op{Type: contract.OpExpire, ID: "c", TTL: time.Hour})
	if ttl, has, ok, err := e.b.TTL(ctx, "c"); err != nil || !has || !ok || ttl < 59*time.Minute {
		t.Errorf("TTL = %v %v %v %v", ttl, has, ok, err)
	}
	if r := apply(t, e.b, contract.Op{Type: contract.OpHDel, ID: "h", Names: []string{"likes", "nope"}}); r.Value != 1 {
		t.Errorf("HDEL = %+v", r)
	}
	apply(t, e.b, contract.Op{Type: contract.OpPFAdd, ID: "u2", Items: [][]byte{[]byte("c")}})
	if r := apply(t, e.b, contract.Op{Type: contract.OpPFMerge, ID: "u3", Sources: []string{"u", "u2"}}); r.Value != 3 {
		t.Errorf("PFMERGE = %+v", r)
	}
	if r := apply(t, e.b, contract.Op{Type: contract.OpDelete, ID: "pn"}); !r.Changed {
		t.Errorf("DEL = %+v", r)
	}
	if v := view(t, e.b, "pn"); v.Exists {
		t.Errorf("pn after delete = %+v", v)
	}
}

func testCacheMissRestoresFromPostgres(t *testing.T, s setup) {
	e := s.env(t, nil)
	allKinds(t, e.b)
	apply(t, e.b, contract.Op{Type: contract.OpSet, ID: "ttl", Value: 4, TTL: time.Hour})
	apply(t, e.b, contract.Op{Type: contract.OpSet, ID: "gone", Value: 4})
	apply(t, e.b, contract.Op{Type: contract.OpDelete, ID: "gone"})
	before := view(t, e.b, "c").Version
	// No explicit flush: the loader flushes pending changes of an id first.
	e.flushRedis(t)
	checkKinds(t, e.b, false)
	if v := view(t, e.b, "w"); v.Exists {
		t.Errorf("window restored: %+v (windows live in Redis only)", v)
	}
	if v := view(t, e.b, "c"); v.Version < before {
		t.Errorf("version went back from %d to %d", before, v.Version)
	}
	if ttl, has, _, _ := e.b.TTL(context.Background(), "ttl"); !has || ttl < 59*time.Minute {
		t.Errorf("TTL after reload = %v %v", ttl, has)
	}
	if v := view(t, e.b, "gone"); v.Exists {
		t.Errorf("deleted counter came back: %+v", v)
	}
	// Increments after the reload count on top, once.
	apply(t, e.b, add("c", contract.KindNone, 10))
	if err := e.b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.flushRedis(t)
	if v := view(t, e.b, "c"); v.Value != 13 {
		t.Errorf("c after second reload = %d, want 13", v.Value)
	}
}

func testFlushRetryAfterLostAckAppliesOnce(t *testing.T, s setup) {
	var fail atomic.Int32
	fail.Store(1)
	e := s.env(t, func(o *tiered.Options) {
		o.FlushInterval = time.Hour // flushes only when asked
		o.Postgres.AfterCommit = func(string) error {
			if fail.Add(-1) >= 0 {
				return errors.New("injected: connection lost after COMMIT")
			}
			return nil
		}
	})
	ctx := context.Background()
	for i := 0; i < 100; i++ {
		apply(t, e.b, add("x", contract.KindNone, 1))
	}
	if err := e.b.Flush(ctx); err == nil {
		t.Fatal("first flush: want the injected error")
	}
	if err := e.b.Flush(ctx); err != nil { // retries the same batch id: a no-op
		t.Fatal(err)
	}
	st := e.b.Postgres().Stats()
	if st.Duplicates != 1 {
		t.Errorf("stats = %+v, want 1 duplicate batch", st)
	}
	e.flushRedis(t)
	if v := view(t, e.b, "x"); v.Value != 100 {
		t.Fatalf("x from PostgreSQL = %d, want 100", v.Value)
	}
}

func testIdempotency(t *testing.T, s setup) {
	e := s.env(t, nil)
	ctx := context.Background()
	wo := contract.WriteOptions{IdempotencyKey: "order-1"}
	op := add("o", contract.KindNone, 5)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ { // concurrent retries apply once
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := e.b.Apply(ctx, op, wo); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	r, err := e.b.Apply(ctx, op, wo)
	if err != nil || !r.Replayed || r.Value != 5 {
		t.Fatalf("replay = %+v, %v", r, err)
	}
	if _, err := e.b.Apply(ctx, add("o", contract.KindNone, 6), wo); !errors.Is(err, contract.ErrIdempotencyReuse) {
		t.Fatalf("reuse: %v", err)
	}
	// A new backend (a restarted counterd) still knows the key.
	b2 := e.open(t, nil)
	if r, err := b2.Apply(ctx, op, wo); err != nil || !r.Replayed {
		t.Fatalf("replay after restart = %+v, %v", r, err)
	}
	if v := view(t, e.b, "o"); v.Value != 5 {
		t.Fatalf("o = %d, want 5", v.Value)
	}
	// A failed op frees its key.
	bad := contract.WriteOptions{IdempotencyKey: "bad"}
	apply(t, e.b, contract.Op{Type: contract.OpHAdd, ID: "hh", Fields: []counter.FieldDelta{{Name: "f", Delta: 1}}})
	if _, err := e.b.Apply(ctx, add("hh", contract.KindNone, 1), bad); !errors.Is(err, contract.ErrWrongKind) {
		t.Fatal(err)
	}
	if _, err := e.b.Apply(ctx, add("ok", contract.KindNone, 1), bad); err != nil {
		t.Fatal(err)
	}
}

func testBatchUndoesAddsOnFailure(t *testing.T, s setup) {
	e := s.env(t, nil)
	ctx := context.Background()
	apply(t, e.b, contract.Op{Type: contract.OpHAdd, ID: "h", Fields: []counter.FieldDelta{{Name: "f", Delta: 1}}})
	_, err := e.b.ApplyBatch(ctx, []contract.Op{add("a", contract.KindNone, 3), add("h", contract.KindNone, 1)}, contract.WriteOptions{})
	var be *contract.BatchError
	if !errors.As(err, &be) || be.Index != 1 || !errors.Is(err, contract.ErrWrongKind) {
		t.Fatalf("batch: %v", err)
	}
	if v := view(t, e.b, "a"); v.Value != 0 {
		t.Fatalf("a = %d after failed batch, want 0", v.Value)
	}
	res, err := e.b.ApplyBatch(ctx, []contract.Op{add("a", contract.KindNone, 3), add("b", contract.KindNone, 4)}, contract.WriteOptions{Durability: contract.Sync})
	if err != nil || res[1].Value != 4 {
		t.Fatalf("batch = %+v, %v", res, err)
	}
}

func testSyncWaitsForCommit(t *testing.T, s setup) {
	e := s.env(t, func(o *tiered.Options) { o.FlushInterval = time.Hour; o.Durability = contract.Sync })
	apply(t, e.b, add("s", contract.KindNone, 3)) // kicks a flush and waits for it
	rec, ok, err := e.b.Postgres().Load(context.Background(), "s")
	if err != nil || !ok || rec.Value != 3 {
		t.Fatalf("PostgreSQL after a sync add: %+v %v %v", rec, ok, err)
	}
}

func testScanLenAggregateFlushAll(t *testing.T, s setup) {
	e := s.env(t, nil)
	ctx := context.Background()
	for i := 0; i < 25; i++ {
		apply(t, e.b, add(fmt.Sprintf("p:%02d", i), contract.KindNone, int64(i)))
	}
	apply(t, e.b, add("q", contract.KindSharded, 100))
	if n, err := e.b.Len(ctx); err != nil || n != 26 {
		t.Fatalf("Len = %d %v", n, err)
	}
	a, err := e.b.Aggregate(ctx, "p:")
	if err != nil || a.Count != 25 || a.Value != 300 {
		t.Fatalf("Aggregate = %+v %v", a, err)
	}
	var got []string
	for cur := uint64(0); ; {
		ids, next, err := e.b.Scan(ctx, cur, "p:1*", 7)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ids...)
		if cur = next; cur == 0 {
			break
		}
	}
	if len(got) != 10 {
		t.Fatalf("scan p:1* = %v", got)
	}
	if k := counterKeys(t, e); k < 52 {
		t.Fatalf("%d counter keys in Redis before FlushAll, want at least 52", k)
	}
	if err := e.b.FlushAll(ctx, contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if k := counterKeys(t, e); k != 0 {
		t.Fatalf("%d counter keys left in Redis after FlushAll", k)
	}
	if n, _ := e.b.Len(ctx); n != 0 || view(t, e.b, "q").Exists {
		t.Fatalf("after FlushAll: len %d", n)
	}
}

func testSeriesFromPostgres(t *testing.T, su setup) {
	now := time.Date(2026, 11, 22, 10, 30, 0, 0, time.UTC)
	var clock atomic.Int64
	clock.Store(now.UnixNano())
	e := su.env(t, func(o *tiered.Options) { o.Now = func() time.Time { return time.Unix(0, clock.Load()) } })
	ctx := context.Background()
	apply(t, e.b, add("views:a", contract.KindNone, 3))
	clock.Add(int64(2 * time.Hour))
	apply(t, e.b, add("views:a", contract.KindNone, 4))
	s, err := e.b.Series(ctx, "views:a", rollup.Hour, now.Add(-time.Hour), now.Add(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if s.Total != 7 || len(s.Values) != 4 || s.Values[1] != 3 || s.Values[3] != 4 || !s.Start(1).Equal(now.Truncate(time.Hour)) {
		t.Fatalf("series = %+v", s)
	}
	if m, err := e.b.Series(ctx, "views:a", rollup.Minute, now, now.Add(time.Minute)); err != nil || m.Total != 3 {
		t.Fatalf("minute series = %+v %v", m, err)
	}
	if err := e.b.SetRollup(ctx, "views", rollup.DefaultSpec()); err != nil {
		t.Fatal(err)
	}
	if all, err := e.b.Rollups(ctx); err != nil || len(all) != 1 {
		t.Fatalf("rollups = %v %v", all, err)
	}
	if _, err := e.b.Uniques(ctx, "views:a", rollup.Day, 7); !errors.Is(err, contract.ErrWrongKind) {
		t.Fatalf("uniques: %v", err)
	}
}

func testSnapshotAndValueAt(t *testing.T, s setup) {
	e := s.env(t, func(o *tiered.Options) { o.SnapshotInterval = 20 * time.Millisecond })
	ctx := context.Background()
	apply(t, e.b, add("snap", contract.KindNone, 11))
	id, err := e.b.Snapshot(ctx)
	if err != nil || id == 0 {
		t.Fatal(id, err)
	}
	at := time.Now()
	apply(t, e.b, add("snap", contract.KindNone, 1))
	if v, ok, err := e.b.ValueAt(ctx, "snap", at); err != nil || !ok || v != 11 {
		t.Fatalf("ValueAt = %d %v %v", v, ok, err)
	}
	// Scheduled snapshots run too (every 20 ms; a loaded machine may take
	// seconds to get to one).
	var n int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err := e.b.Postgres().Pool().QueryRow(ctx, `SELECT count(*) FROM counter_snapshot_sets`).Scan(&n)
		if err == nil && n >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("snapshot sets = %d %v", n, err)
		}
	}
}

func TestRedisDownIsUnavailable(t *testing.T) {
	e := newEnv(t, func(o *tiered.Options) {
		o.Redis.DialTimeout, o.Redis.ReadTimeout, o.Redis.WriteTimeout = 200*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond
	})
	if e.rd.External() {
		t.Skip("needs a private redis-server")
	}
	ctx := context.Background()
	apply(t, e.b, add("r", contract.KindNone, 2))
	if err := e.b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	e.rd.Stop(t)
	if err := e.b.Ready(); !isUnavailable(err) {
		t.Fatalf("Ready with Redis down: %v", err)
	}
	_, err := e.b.Apply(ctx, add("r", contract.KindNone, 1), contract.WriteOptions{})
	if !isUnavailable(err) {
		t.Fatalf("Apply with Redis down: %v", err)
	}
	// Clients read a clean message; the log gets the cause.
	if strings.Contains(err.Error(), e.redisURL()[len("redis://"):]) || strings.Contains(err.Error(), "redisstore") || !strings.HasPrefix(err.Error(), "engine: unavailable: ") {
		t.Errorf("Apply with Redis down: message %q leaks the store's internals", err)
	}
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Error("failed", "err", err)
	if !strings.Contains(logged.String(), "cause: ") {
		t.Errorf("log of the failure %q has no cause", logged.String())
	}
	e.rd.Start(t) // comes back empty: values come back from PostgreSQL
	if err := e.b.Ready(); err != nil {
		t.Fatal(err)
	}
	if v := view(t, e.b, "r"); v.Value != 2 {
		t.Fatalf("r = %d, want 2", v.Value)
	}
}

func TestPostgresRestartKeepsSyncWrites(t *testing.T) {
	pg := pgtest.StartServer(t)
	e := &env{dsn: pg.DSN(t)}
	e.rd = newEnv(t, nil).rd // a private Redis
	e.b = e.open(t, func(o *tiered.Options) {
		o.Durability, o.SyncTimeout = contract.Sync, 500*time.Millisecond
		o.Postgres.ConnectTimeout = 300 * time.Millisecond
	})
	ctx := context.Background()
	acked := 0
	for i := 0; i < 20; i++ {
		apply(t, e.b, add("k", contract.KindNone, 1))
		acked++
	}
	pg.Stop(t)
	if _, err := e.b.Apply(ctx, add("k", contract.KindNone, 1), contract.WriteOptions{}); !isUnavailable(err) {
		t.Fatalf("sync add with PostgreSQL down: %v", err)
	}
	if err := e.b.Ready(); !isUnavailable(err) {
		t.Fatalf("Ready with PostgreSQL down: %v", err)
	}
	// The failed write-behind flushes are counted
	// (counterd_engine_flush_failures_total).
	for deadline := time.Now().Add(10 * time.Second); e.b.Stats().FlushFailures == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no flush failure counted with PostgreSQL down")
		}
		time.Sleep(20 * time.Millisecond)
	}
	pg.Start(t)
	deadline := time.Now().Add(10 * time.Second)
	for e.b.Ready() != nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	apply(t, e.b, add("k", contract.KindNone, 1)) // the unacked one is written too
	acked++
	rec, _, err := e.b.Postgres().Load(ctx, "k")
	if err != nil || rec.Value < int64(acked) || rec.Value > int64(acked)+1 {
		t.Fatalf("PostgreSQL k = %d (%v), acked %d", rec.Value, err, acked)
	}
}

// TestCancelledWritesStayConsistent: callers that give up (context ended)
// while their increment is in flight never leave Redis and PostgreSQL
// disagreeing: a sent script's reply is awaited and its delta written
// behind.
func testCancelledWritesStayConsistent(t *testing.T, s setup) {
	e := s.env(t, nil)
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%5)*50*time.Microsecond)
				_, _ = e.b.Apply(ctx, add("cx", contract.KindNone, 1), contract.WriteOptions{})
				cancel()
			}
		}()
	}
	wg.Wait()
	ctx := context.Background()
	if err := e.b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	v := view(t, e.b, "cx")
	rec, _, err := e.b.Postgres().Load(ctx, "cx")
	if err != nil || rec.Value != v.Value {
		t.Fatalf("Redis %d, PostgreSQL %d (%v)", v.Value, rec.Value, err)
	}
}

// TestErrorsDoNotLeakInternals: a conflict or wrong kind reported by a
// Redis script reaches clients as the engine's sentinel with a clean
// message (no package prefixes, no script reply codes), and nothing
// changes.
func TestErrorsDoNotLeakInternals(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	apply(t, e.b, contract.Op{Type: contract.OpSet, ID: "v", Value: 7})
	apply(t, e.b, contract.Op{Type: contract.OpPFAdd, ID: "u", Items: [][]byte{[]byte("a")}})
	for _, c := range []struct {
		name string
		op   contract.Op
		want error
		msg  string
	}{
		{"stale version", contract.Op{Type: contract.OpSet, ID: "v", Value: 9, CheckVersion: true, ExpectedVersion: 5}, contract.ErrVersionConflict,
			`engine: version conflict: "v": version is 1, not 5`},
		{"add to an hll", add("u", contract.KindNone, 1), contract.ErrWrongKind, `engine: operation against a counter of the wrong kind: "u": `},
	} {
		_, err := e.b.Apply(ctx, c.op, contract.WriteOptions{})
		if !errors.Is(err, c.want) {
			t.Fatalf("%s: %v, want %v", c.name, err, c.want)
		}
		if !strings.HasPrefix(err.Error(), c.msg) {
			t.Errorf("%s: message %q, want it to start %q", c.name, err, c.msg)
		}
		for _, leak := range []string{"redisstore", "VERSIONCONFLICT", "WRONGKIND", "redis:"} {
			if strings.Contains(err.Error(), leak) {
				t.Errorf("%s: message %q leaks %q", c.name, err, leak)
			}
		}
	}
	if v := view(t, e.b, "v"); v.Value != 7 || v.Version != 1 {
		t.Fatalf("v = %d (version %d) after the refused ops, want 7 (version 1)", v.Value, v.Version)
	}
}
