package postgres

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/testutil/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func openStore(t testing.TB, dsn string, opts Options) *Store {
	t.Helper()
	if opts.MaxConns == 0 {
		opts.MaxConns = 4
	}
	s, err := Open(ctxT(t, 30*time.Second), dsn, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

func newStore(t testing.TB, opts Options) *Store {
	t.Helper()
	return openStore(t, pgtest.DSN(t), opts)
}

func value(t testing.TB, s *Store, id string) int64 {
	t.Helper()
	rec, ok, err := s.Load(ctxT(t, 10*time.Second), id)
	if err != nil {
		t.Fatalf("Load(%q): %v", id, err)
	}
	if !ok {
		return 0
	}
	return rec.Value
}

func queryInt(t testing.TB, s *Store, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := s.Pool().QueryRow(ctxT(t, 10*time.Second), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func TestMigrationsCreateSchema(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	s := openStore(t, dsn, Options{})
	for _, table := range []string{"counters", "counter_shards", "counter_timeseries", "counter_aggregates",
		"counter_sync_batches", "counter_snapshots", "counter_snapshot_sets", "counter_audit_log", "counter_hll", "counter_fields"} {
		if n := queryInt(t, s, `SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public' AND table_name = $1`, table); n != 1 {
			t.Errorf("table %s missing", table)
		}
	}
	for _, table := range []string{"counter_timeseries", "counter_audit_log"} {
		if n := queryInt(t, s, `SELECT count(*) FROM pg_partitioned_table p JOIN pg_class c ON c.oid = p.partrelid
			WHERE c.relname = $1 AND p.partstrat = 'r'`, table); n != 1 {
			t.Errorf("%s is not range-partitioned", table)
		}
	}
	for _, idx := range []string{"idx_counters_counter_type", "idx_counters_updated_at", "idx_counter_timeseries_time",
		"idx_counter_aggregates_period", "idx_counter_audit_log_counter", "idx_counter_snapshots_time"} {
		if n := queryInt(t, s, `SELECT count(*) FROM pg_indexes WHERE indexname = $1`, idx); n != 1 {
			t.Errorf("index %s missing", idx)
		}
	}
	for _, col := range []string{"counter_id", "value", "version", "counter_type", "shard_count", "created_at", "updated_at", "last_sync_at", "config"} {
		if n := queryInt(t, s, `SELECT count(*) FROM information_schema.columns WHERE table_name = 'counters' AND column_name = $1`, col); n != 1 {
			t.Errorf("counters.%s missing", col)
		}
	}
	if n := queryInt(t, s, `SELECT count(*) FROM information_schema.columns WHERE table_name = 'counters'
		AND column_name = 'updated_at' AND data_type = 'timestamp with time zone'`); n != 1 {
		t.Errorf("counters.updated_at is not timestamptz")
	}
	migs, err := filepath.Glob("migrations/*.sql")
	if err != nil || len(migs) == 0 {
		t.Fatalf("no migrations found: %v", err)
	}
	if v := queryInt(t, s, `SELECT max(version_id) FROM goose_db_version`); v != int64(len(migs)) {
		t.Errorf("goose version = %d, want %d (one per migration file)", v, len(migs))
	}
	if n := queryInt(t, s, `SELECT character_maximum_length FROM information_schema.columns
		WHERE table_name = 'counter_fields' AND column_name = 'field'`); n != int64(contract.MaxFieldLen) {
		t.Errorf("counter_fields.field holds %d characters, want %d (migration 00004)", n, contract.MaxFieldLen)
	}
	if n := queryInt(t, s, `SELECT count(*) FROM information_schema.tables WHERE table_name = 'counter_uniques'`); n != 1 {
		t.Errorf("table counter_uniques missing (migration 00003)")
	}
	if n := queryInt(t, s, `SELECT count(*) FROM information_schema.columns WHERE table_name = 'counters'
		AND column_name = 'expires_at'`); n != 1 {
		t.Errorf("counters.expires_at missing (migration 00002)")
	}
	// Opening again (another node, a restart) is a no-op migration.
	s2 := openStore(t, dsn, Options{})
	if v := queryInt(t, s2, `SELECT count(*) FROM goose_db_version WHERE version_id = 1`); v != 1 {
		t.Errorf("migration recorded %d times", v)
	}
}

func TestMigrationsConcurrentOpen(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := Open(ctxT(t, 30*time.Second), dsn, Options{MaxConns: 3})
			if err != nil {
				errs <- err
				return
			}
			s.Close()
			s.Close() // idempotent
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestPartitionsAhead(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	s := openStore(t, dsn, Options{PartitionsAhead: 2})
	now := time.Now()
	for _, table := range partitionedTables {
		for i := 0; i <= 2; i++ {
			name := partitionName(table, monthStart(now).AddDate(0, i, 0))
			if n := queryInt(t, s, `SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
				WHERE i.inhparent = $1::regclass AND c.relname = $2`, table, name); n != 1 {
				t.Errorf("partition %s missing", name)
			}
		}
		parts, err := s.partitions(ctxT(t, 10*time.Second), table)
		if err != nil {
			t.Fatal(err)
		}
		if len(parts) != 3 {
			t.Errorf("%s: %d partitions, want 3: %v", table, len(parts), parts)
		}
	}
	// Idempotent, also from a store with a cold cache, and extends ahead.
	s2 := openStore(t, dsn, Options{PartitionsAhead: 2})
	if err := s2.EnsurePartitions(ctxT(t, 10*time.Second), now, 5); err != nil {
		t.Fatal(err)
	}
	parts, err := s2.partitions(ctxT(t, 10*time.Second), "counter_timeseries")
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != 6 {
		t.Errorf("%d partitions, want 6", len(parts))
	}
	// The partition bounds are whole UTC months.
	var bound string
	if err := s.Pool().QueryRow(ctxT(t, 10*time.Second), `SELECT pg_get_expr(c.relpartbound, c.oid) FROM pg_class c WHERE relname = $1`,
		partitionName("counter_timeseries", time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))).Scan(&bound); err == nil {
		t.Logf("bound: %s", bound)
	}
}

func TestApplyExactlyOnce(t *testing.T) {
	t.Parallel()
	s := newStore(t, Options{})
	ctx := ctxT(t, 30*time.Second)
	at := time.Date(2026, 5, 17, 10, 30, 15, 0, time.UTC)
	b := Batch{ID: "node1-1", Deltas: []Delta{
		{CounterID: "page_views:a", Shard: -1, Delta: 5, At: at},
		{CounterID: "page_views:a", Shard: -1, Delta: 2, At: at.Add(time.Minute)},
		{CounterID: "page_views:b", Shard: -1, Delta: -3, At: at},
	}}
	applied, err := s.Apply(ctx, b)
	if err != nil || !applied {
		t.Fatalf("first Apply = %v, %v", applied, err)
	}
	applied, err = s.Apply(ctx, b)
	if err != nil || applied {
		t.Fatalf("second Apply = %v, %v; want false, nil", applied, err)
	}
	if v := value(t, s, "page_views:a"); v != 7 {
		t.Errorf("a = %d, want 7", v)
	}
	if v := value(t, s, "page_views:b"); v != -3 {
		t.Errorf("b = %d, want -3", v)
	}
	rec, _, _ := s.Load(ctx, "page_views:a")
	if rec.Version != 1 || rec.Kind != KindCounter {
		t.Errorf("record = %+v, want version 1 kind counter", rec)
	}
	if n := queryInt(t, s, `SELECT value FROM counter_timeseries WHERE counter_id = 'page_views:a' AND bucket_timestamp = $1`, at.Truncate(time.Minute)); n != 5 {
		t.Errorf("minute bucket = %d, want 5", n)
	}
	if n := queryInt(t, s, `SELECT value FROM counter_aggregates WHERE counter_id = 'page_views:a' AND granularity = 'hour' AND period_start = $1`, at.Truncate(time.Hour)); n != 7 {
		t.Errorf("hour aggregate = %d, want 7", n)
	}
	if n := queryInt(t, s, `SELECT value FROM counter_aggregates WHERE counter_id = 'page_views:a' AND granularity = 'month' AND period_start = '2026-05-01Z'`); n != 7 {
		t.Errorf("month aggregate = %d, want 7", n)
	}
	// a May partition was created on demand for the old delta
	if n := queryInt(t, s, `SELECT count(*) FROM counter_timeseries_p202605`); n != 3 {
		t.Errorf("May partition rows = %d, want 3", n)
	}
	// A second batch with a new id applies.
	if applied, err := s.Apply(ctx, Batch{ID: "node1-2", Deltas: []Delta{{CounterID: "page_views:a", Shard: -1, Delta: 1, At: at}}}); err != nil || !applied {
		t.Fatalf("Apply = %v, %v", applied, err)
	}
	rec, _, _ = s.Load(ctx, "page_views:a")
	if rec.Value != 8 || rec.Version != 2 {
		t.Errorf("record = %+v, want value 8 version 2", rec)
	}
	st := s.Stats()
	if st.Batches != 2 || st.Duplicates != 1 || st.Deltas != 4 {
		t.Errorf("stats = %+v", st)
	}
	if _, err := s.Apply(ctx, Batch{}); err == nil {
		t.Error("Apply without id succeeded")
	}
}

func TestApplyConcurrentSameBatch(t *testing.T) {
	t.Parallel()
	s := newStore(t, Options{MaxConns: 8})
	b := Batch{ID: "dup", Deltas: []Delta{{CounterID: "c:x", Shard: -1, Delta: 10}}}
	var wg sync.WaitGroup
	var mu sync.Mutex
	appliedN := 0
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := s.Apply(ctxT(t, 30*time.Second), b)
			if err != nil {
				t.Error(err)
			}
			if ok {
				mu.Lock()
				appliedN++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if appliedN != 1 {
		t.Errorf("applied %d times", appliedN)
	}
	if v := value(t, s, "c:x"); v != 10 {
		t.Errorf("value = %d, want 10", v)
	}
}

func TestAggregatorRetryAfterLostAck(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	fail := 1
	var ids []string
	s := newStore(t, Options{AfterCommit: func(id string) error {
		mu.Lock()
		defer mu.Unlock()
		ids = append(ids, id)
		if fail > 0 {
			fail--
			return errors.New("simulated: connection lost after COMMIT")
		}
		return nil
	}})
	a := s.NewAggregator(AggregatorOptions{FlushInterval: -1})
	ctx := ctxT(t, 30*time.Second)
	for i := 0; i < 100; i++ {
		a.Add("views:x", "", -1, 1, time.Time{})
	}
	if err := a.Flush(ctx); err == nil {
		t.Fatal("first flush succeeded; want the simulated lost acknowledgement")
	}
	// More deltas arrive meanwhile; they go into a later batch.
	a.Add("views:x", "", -1, 1, time.Time{})
	if err := a.Flush(ctx); err != nil {
		t.Fatalf("retry flush: %v", err)
	}
	if v := value(t, s, "views:x"); v != 101 {
		t.Fatalf("value = %d, want 101 (the retried batch must count once)", v)
	}
	st := s.Stats()
	if st.Duplicates != 1 || st.Batches != 2 {
		t.Errorf("stats = %+v, want 1 duplicate, 2 batches", st)
	}
	mu.Lock()
	if len(ids) != 2 || ids[0] == ids[1] {
		t.Errorf("committed batch ids = %v", ids)
	}
	mu.Unlock()
	if n := queryInt(t, s, `SELECT count(*) FROM counter_sync_batches`); n != 2 {
		t.Errorf("sync batches = %d, want 2", n)
	}
	if n := queryInt(t, s, `SELECT coalesce(sum(value), 0) FROM counter_timeseries WHERE counter_id = 'views:x'`); n != 101 {
		t.Errorf("time series sum = %d, want 101", n)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestShardedDeltas(t *testing.T) {
	t.Parallel()
	s := newStore(t, Options{})
	a := s.NewAggregator(AggregatorOptions{FlushInterval: -1})
	for i := 0; i < 40; i++ {
		a.Add("hot:article", KindSharded, i%4, int64(i%4+1), time.Time{})
	}
	if err := a.Flush(ctxT(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	rec, ok, err := s.Load(ctxT(t, 10*time.Second), "hot:article")
	if err != nil || !ok {
		t.Fatalf("Load = %v, %v", ok, err)
	}
	want := []int64{10, 20, 30, 40}
	if rec.Kind != KindSharded || rec.Value != 100 || fmt.Sprint(rec.Shards) != fmt.Sprint(want) {
		t.Errorf("record = %+v, want sharded 100 %v", rec, want)
	}
	if n := queryInt(t, s, `SELECT count(*) FROM counter_shards WHERE counter_id = 'hot:article'`); n != 4 {
		t.Errorf("%d shard rows, want 4", n)
	}
	if n := queryInt(t, s, `SELECT value FROM counters WHERE counter_id = 'hot:article'`); n != 0 {
		t.Errorf("parent row value = %d; sharded deltas must not touch it", n)
	}
	if n := queryInt(t, s, `SELECT shard_count FROM counters WHERE counter_id = 'hot:article'`); n != 4 {
		t.Errorf("shard_count = %d, want 4", n)
	}
	a.Add("hot:article", KindSharded, 6, 1, time.Time{})
	a.Add("hot:article", KindSharded, 0, 1, time.Time{})
	if err := a.Flush(ctxT(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	rec, _, _ = s.Load(ctxT(t, 10*time.Second), "hot:article")
	want = []int64{11, 20, 30, 40, 0, 0, 1}
	if rec.Value != 102 || fmt.Sprint(rec.Shards) != fmt.Sprint(want) {
		t.Errorf("record = %+v, want 102 %v", rec, want)
	}
}

func TestHashAndHLL(t *testing.T) {
	t.Parallel()
	s := newStore(t, Options{})
	a := s.NewAggregator(AggregatorOptions{FlushInterval: -1})
	a.AddField("article:1", "views", 3, time.Time{})
	a.AddField("article:1", "likes", 1, time.Time{})
	a.AddField("article:1", "views", 2, time.Time{})
	a.SetSketch("uv:1", []byte{1, 2, 3})
	a.SetSketch("uv:1", []byte{4, 5})
	if err := a.Flush(ctxT(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	rec, ok, err := s.Load(ctxT(t, 10*time.Second), "article:1")
	if err != nil || !ok || rec.Kind != KindHash || rec.Fields["views"] != 5 || rec.Fields["likes"] != 1 || rec.Value != 6 {
		t.Errorf("hash record = %+v, %v, %v", rec, ok, err)
	}
	rec, ok, err = s.Load(ctxT(t, 10*time.Second), "uv:1")
	if err != nil || !ok || rec.Kind != KindHLL || string(rec.Sketch) != string([]byte{4, 5}) {
		t.Errorf("hll record = %+v, %v, %v", rec, ok, err)
	}
	if _, ok, err := s.Load(ctxT(t, 10*time.Second), "missing"); ok || err != nil {
		t.Errorf("missing: %v %v", ok, err)
	}
}

func TestConcurrentAggregatorAdds(t *testing.T) {
	t.Parallel()
	s := newStore(t, Options{MaxConns: 6})
	// Two aggregators (two nodes) with fast loops flushing while adds run,
	// writing the same counters: sums must be exact and there must be no
	// deadlock between their transactions.
	aggs := []*Aggregator{
		s.NewAggregator(AggregatorOptions{FlushInterval: 5 * time.Millisecond, OnError: func(err error) { t.Error(err) }}),
		s.NewAggregator(AggregatorOptions{FlushInterval: 7 * time.Millisecond, OnError: func(err error) { t.Error(err) }}),
	}
	const goroutines, perG = 16, 500
	ids := []string{"c:a", "c:b", "c:c", "c:d"}
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			a := aggs[g%2]
			for i := 0; i < perG; i++ {
				a.Add(ids[i%len(ids)], "", -1, 1, time.Time{})
				a.Add("s:hot", KindSharded, (g+i)%8, 2, time.Time{})
				if i%25 == 0 {
					time.Sleep(time.Millisecond) // let flushes interleave with adds
				}
			}
		}(g)
	}
	wg.Wait()
	for _, a := range aggs {
		if err := a.Close(ctxT(t, 30*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		if v := value(t, s, id); v != int64(goroutines*perG/len(ids)) {
			t.Errorf("%s = %d, want %d", id, v, goroutines*perG/len(ids))
		}
	}
	if v := value(t, s, "s:hot"); v != 2*goroutines*perG {
		t.Errorf("s:hot = %d, want %d", v, 2*goroutines*perG)
	}
	var adds uint64
	for _, a := range aggs {
		adds += a.Stats().Adds
	}
	if adds != 2*goroutines*perG {
		t.Errorf("adds = %d", adds)
	}
	t.Logf("adds=%d statements=%d batches=%d", adds, s.Stats().Statements, s.Stats().Batches)
}

func TestAddSyncWaitsForCommit(t *testing.T) {
	t.Parallel()
	s := newStore(t, Options{})
	a := s.NewAggregator(AggregatorOptions{FlushInterval: time.Hour}) // only kicks flush
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.AddSync(ctxT(t, 20*time.Second), "sync:x", "", -1, 1, time.Time{}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if v := value(t, s, "sync:x"); v != 20 {
		t.Errorf("after AddSync returned, committed value = %d, want 20", v)
	}
	// Without a loop, AddSync flushes itself.
	b := s.NewAggregator(AggregatorOptions{FlushInterval: -1})
	if err := b.AddSync(ctxT(t, 20*time.Second), "sync:x", "", -1, 1, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if v := value(t, s, "sync:x"); v != 21 {
		t.Errorf("value = %d, want 21", v)
	}
}

func TestRestartKeepsSyncWritesAndReconnects(t *testing.T) {
	t.Parallel()
	srv := pgtest.StartServer(t)
	s := openStore(t, srv.DSN(t), Options{})
	a := s.NewAggregator(AggregatorOptions{FlushInterval: 20 * time.Millisecond})
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	if err := a.AddSync(ctxT(t, 20*time.Second), "r:x", "", -1, 42, time.Time{}); err != nil {
		t.Fatal(err)
	}
	srv.Restart(t) // immediate stop (crash) + start: crash recovery

	// The pool's connections died with the server; it must reconnect.
	deadline := time.Now().Add(20 * time.Second)
	var rec Record
	for {
		var ok bool
		var err error
		rec, ok, err = s.Load(ctxT(t, 5*time.Second), "r:x")
		if err == nil {
			if !ok {
				t.Fatal("committed sync write lost in restart")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("store did not reconnect: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if rec.Value != 42 {
		t.Fatalf("after restart value = %d, want 42", rec.Value)
	}
	if err := a.AddSync(ctxT(t, 20*time.Second), "r:x", "", -1, 1, time.Time{}); err != nil {
		t.Fatalf("AddSync after restart: %v", err)
	}
	if v := value(t, s, "r:x"); v != 43 {
		t.Fatalf("value = %d, want 43", v)
	}
}

func TestSnapshotsAndValueAt(t *testing.T) {
	t.Parallel()
	s := newStore(t, Options{})
	ctx := ctxT(t, 30*time.Second)
	apply := func(id string, d Delta) {
		t.Helper()
		if _, err := s.Apply(ctx, Batch{ID: id, Deltas: []Delta{d}}); err != nil {
			t.Fatal(err)
		}
	}
	before := time.Now().Add(-time.Hour)
	if _, ok, err := s.ValueAt(ctx, "snap:a", before); ok || err != nil {
		t.Fatalf("ValueAt before any snapshot = %v, %v", ok, err)
	}
	apply("b1", Delta{CounterID: "snap:a", Shard: -1, Delta: 10})
	apply("b2", Delta{CounterID: "snap:s", Kind: KindSharded, Shard: 3, Delta: 7})
	id1, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	mid := time.Now()
	time.Sleep(20 * time.Millisecond)
	apply("b3", Delta{CounterID: "snap:a", Shard: -1, Delta: 5})
	id2, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if id2 <= id1 {
		t.Errorf("snapshot ids %d, %d not increasing", id1, id2)
	}
	check := func(id string, at time.Time, want int64, wantOK bool) {
		t.Helper()
		v, ok, err := s.ValueAt(ctx, id, at)
		if err != nil || v != want || ok != wantOK {
			t.Errorf("ValueAt(%s, %v) = %d, %v, %v; want %d, %v", id, at, v, ok, err, want, wantOK)
		}
	}
	check("snap:a", mid, 10, true)
	check("snap:s", mid, 7, true)
	check("snap:a", time.Now().Add(time.Second), 15, true)
	check("snap:none", mid, 0, true)
	check("snap:a", before, 0, false)
	if n := queryInt(t, s, `SELECT counters FROM counter_snapshot_sets WHERE snapshot_id = $1`, id1); n != 2 {
		t.Errorf("snapshot 1 holds %d counters, want 2", n)
	}
	// Point-in-time restore to snapshot 1.
	apply("b4", Delta{CounterID: "snap:s", Kind: KindSharded, Shard: 1, Delta: 100})
	apply("b5", Delta{CounterID: "snap:new", Shard: -1, Delta: 1})
	n, err := s.RestoreSnapshot(ctx, id1)
	if err != nil || n != 2 {
		t.Fatalf("RestoreSnapshot = %d, %v; want 2", n, err)
	}
	if v := value(t, s, "snap:a"); v != 10 {
		t.Errorf("restored snap:a = %d, want 10", v)
	}
	if v := value(t, s, "snap:s"); v != 7 {
		t.Errorf("restored snap:s = %d, want 7", v)
	}
	if _, ok, _ := s.Load(ctx, "snap:new"); ok {
		t.Errorf("counter created after the snapshot survived the restore")
	}
	if _, err := s.RestoreSnapshot(ctx, 999999); err == nil {
		t.Errorf("restore of a missing snapshot succeeded")
	}
	// Retention of snapshots.
	if err := s.Retain(ctx, RetentionPolicy{Snapshots: time.Hour, Now: time.Now().Add(2 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, s, `SELECT count(*) FROM counter_snapshots`); n != 0 {
		t.Errorf("%d snapshot rows left", n)
	}
}

func TestRetainDropsAndDeletesOldData(t *testing.T) {
	t.Parallel()
	s := newStore(t, Options{AuditNamespaces: []string{"audited"}})
	ctx := ctxT(t, 30*time.Second)
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	old := now.AddDate(0, 0, -90)      // 2026-08-24: its partition is entirely expired
	straddle := now.AddDate(0, 0, -40) // 2026-10-13: in October, which straddles the cutoff
	recent := now.AddDate(0, 0, -10)
	b := Batch{ID: "r1", Deltas: []Delta{
		{CounterID: "ts:a", Shard: -1, Delta: 1, At: old},
		{CounterID: "ts:a", Shard: -1, Delta: 2, At: straddle},
		{CounterID: "ts:a", Shard: -1, Delta: 4, At: recent},
		{CounterID: "audited:x", Shard: -1, Delta: 1, At: recent},
	}}
	if _, err := s.Apply(ctx, b); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, Batch{ID: "r2", Deltas: []Delta{{CounterID: "audited:x", Shard: -1, Delta: 2}}}); err != nil {
		t.Fatal(err)
	}
	// audit log: only the audited namespace, with old/new values.
	if n := queryInt(t, s, `SELECT count(*) FROM counter_audit_log`); n != 2 {
		t.Errorf("%d audit rows, want 2", n)
	}
	if n := queryInt(t, s, `SELECT new_value FROM counter_audit_log WHERE batch_id = 'r2'`); n != 3 {
		t.Errorf("audit new_value = %d, want 3", n)
	}
	if n := queryInt(t, s, `SELECT old_value FROM counter_audit_log WHERE batch_id = 'r2'`); n != 1 {
		t.Errorf("audit old_value = %d, want 1", n)
	}
	aug := partitionName("counter_timeseries", monthStart(old))
	if n := queryInt(t, s, `SELECT count(*) FROM pg_class WHERE relname = $1`, aug); n != 1 {
		t.Fatalf("partition %s not created", aug)
	}
	if err := s.Retain(ctx, RetentionPolicy{Timeseries: 30 * 24 * time.Hour, Aggregates: 60 * 24 * time.Hour,
		SyncBatches: time.Hour, Now: now}); err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, s, `SELECT count(*) FROM pg_class WHERE relname = $1`, aug); n != 0 {
		t.Errorf("expired partition %s not dropped", aug)
	}
	if n := queryInt(t, s, `SELECT coalesce(sum(value), 0) FROM counter_timeseries WHERE counter_id = 'ts:a'`); n != 4 {
		t.Errorf("time series sum after retention = %d, want 4 (only the recent bucket)", n)
	}
	if n := queryInt(t, s, `SELECT count(*) FROM counter_aggregates WHERE counter_id = 'ts:a' AND granularity = 'day' AND period_start < $1`, now.AddDate(0, 0, -60)); n != 0 {
		t.Errorf("%d old day aggregates left", n)
	}
	if n := queryInt(t, s, `SELECT count(*) FROM counter_aggregates WHERE counter_id = 'ts:a' AND granularity = 'day'`); n != 2 {
		t.Errorf("%d day aggregates left, want 2", n)
	}
	// The counter itself is untouched by retention.
	if v := value(t, s, "ts:a"); v != 7 {
		t.Errorf("counter = %d, want 7", v)
	}
	// Late data for a dropped month recreates its partition.
	if _, err := s.Apply(ctx, Batch{ID: "late", Deltas: []Delta{{CounterID: "ts:a", Shard: -1, Delta: 1, At: old}}}); err != nil {
		t.Fatal(err)
	}
	// Audit retention drops partitions too.
	if err := s.Retain(ctx, RetentionPolicy{Audit: time.Hour, Now: time.Now().AddDate(0, 2, 0)}); err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, s, `SELECT count(*) FROM counter_audit_log`); n != 0 {
		t.Errorf("%d audit rows left", n)
	}
}

func TestRetainStaleCacheRecovers(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	s1 := openStore(t, dsn, Options{})
	s2 := openStore(t, dsn, Options{})
	ctx := ctxT(t, 30*time.Second)
	old := time.Now().AddDate(0, -6, 0)
	if _, err := s1.Apply(ctx, Batch{ID: "a", Deltas: []Delta{{CounterID: "x", Shard: -1, Delta: 1, At: old}}}); err != nil {
		t.Fatal(err)
	}
	if err := s2.Retain(ctx, RetentionPolicy{Timeseries: 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	// s1 still believes the partition exists: the first attempt fails, the
	// retry (same batch id) succeeds.
	b := Batch{ID: "b", Deltas: []Delta{{CounterID: "x", Shard: -1, Delta: 1, At: old}}}
	if _, err := s1.Apply(ctx, b); err == nil {
		t.Log("apply succeeded at once")
	}
	if _, err := s1.Apply(ctx, b); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if v := value(t, s1, "x"); v != 2 {
		t.Errorf("x = %d, want 2", v)
	}
}
