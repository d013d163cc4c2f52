package main

// End-to-end tests of counterd --redis --postgres (tiered mode) on a
// private redis-server and a private PostgreSQL server.

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/counterd/counterd/internal/testutil/pgtest"
	"github.com/counterd/counterd/internal/testutil/redistest"
)

// tieredEnv is a Redis and a PostgreSQL database for counterd to tier on.
type tieredEnv struct {
	rd   *redistest.Server
	dsn  string
	pool *pgxpool.Pool
}

func newTieredEnv(t *testing.T) *tieredEnv {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	env := &tieredEnv{rd: redistest.New(t), dsn: pgtest.StartServer(t).DSN(t)}
	pool, err := pgxpool.New(context.Background(), env.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	env.pool = pool
	return env
}

// start runs counterd in tiered mode with extra flags.
func (env *tieredEnv) start(t *testing.T, args ...string) *proc {
	t.Helper()
	return start(t, t.TempDir(), append([]string{"--redis", env.rd.URL, "--postgres", env.dsn}, args...)...)
}

// pgValue is id's value committed in PostgreSQL (0 if absent).
func (env *tieredEnv) pgValue(t *testing.T, id string) int64 {
	t.Helper()
	var v int64
	err := env.pool.QueryRow(context.Background(), `SELECT COALESCE(sum(value), 0)::bigint FROM counters WHERE counter_id = $1`, id).Scan(&v)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestTieredServesHTTPAndRESP: the binary creates the schema and serves
// the same HTTP and Redis-protocol API over Redis and PostgreSQL.
func TestTieredServesHTTPAndRESP(t *testing.T) {
	env := newTieredEnv(t)
	respAddr := "127.0.0.1:" + freePort(t)
	p := env.start(t, "--resp", respAddr)
	var tables int
	if err := env.pool.QueryRow(context.Background(), `SELECT count(*) FROM information_schema.tables
		WHERE table_name IN ('counters', 'counter_shards', 'counter_timeseries', 'counter_aggregates',
		'counter_sync_batches', 'counter_snapshots', 'counter_audit_log')`).Scan(&tables); err != nil || tables != 7 {
		t.Fatalf("schema after start: %d of 7 tables (%v)", tables, err)
	}
	if code, _, _, err := post(p.addr+"/counters/page_views:a/increment", "", `{"delta": 2}`); err != nil || code != 200 {
		t.Fatalf("increment: %d %v", code, err)
	}
	conn, err := net.Dial("tcp", respAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rd := bufio.NewReader(conn)
	if got := respCmd(t, conn, rd, "INCRBY", "page_views:a", "3"); got != ":5" {
		t.Fatalf("INCRBY over RESP = %q", got)
	}
	if got := respCmd(t, conn, rd, "PFADD", "uv:a", "x", "y"); got != ":1" {
		t.Fatalf("PFADD = %q", got)
	}
	if got := respCmd(t, conn, rd, "HINCRBY", "counter:a", "views", "4"); got != ":4" {
		t.Fatalf("HINCRBY = %q", got)
	}
	env.rd.FlushAll(t)
	if v := getValue(t, p.addr, "page_views:a"); v != 5 {
		t.Fatalf("value after FLUSHALL of Redis = %d, want 5 (from PostgreSQL)", v)
	}
	if got := respCmd(t, conn, rd, "PFCOUNT", "uv:a"); got != ":2" {
		t.Fatalf("PFCOUNT after FLUSHALL = %q", got)
	}
	p.term(t)
	if v := env.pgValue(t, "page_views:a"); v != 5 {
		t.Fatalf("PostgreSQL after SIGTERM = %d, want 5", v)
	}
}

// TestTieredCrash SIGKILLs counterd under concurrent increments, wipes the
// Redis tier so every value is read back from PostgreSQL, and restarts:
//   - sync: the value is at least every acknowledged increment;
//   - async: at least what PostgreSQL had committed before the kill (at
//     most the unflushed window is lost), and before the wipe, with Redis
//     intact, at least every acknowledged increment.
//
// In both modes it is at most the number sent (nothing counted twice).
// TestTieredSnapshotsAndAudit: --snapshot-interval takes scheduled
// snapshots and --audit-namespaces writes only the named namespaces'
// changes to the audit log.
func TestTieredSnapshotsAndAudit(t *testing.T) {
	env := newTieredEnv(t)
	p := env.start(t, "--snapshot-interval", "300ms", "--audit-namespaces", "audited", "--flush-interval", "100ms")
	for _, id := range []string{"audited:a", "quiet:a"} {
		if code, _, _, err := post(p.addr+"/counters/"+id+"/increment?durability=sync", "", `{"delta": 2}`); err != nil || code != 200 {
			t.Fatalf("increment %s: %d %v", id, code, err)
		}
	}
	ctx := context.Background()
	count := func(q string) (n int) {
		if err := env.pool.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	if err := poll(10*time.Second, func() error {
		if n := count(`SELECT count(DISTINCT snapshot_id) FROM counter_snapshots WHERE counter_id = 'audited:a'`); n < 1 {
			return fmt.Errorf("%d scheduled snapshots hold audited:a", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n := count(`SELECT count(*) FROM counter_audit_log WHERE counter_id = 'audited:a'`); n < 1 {
		t.Errorf("audited:a: %d audit rows, want at least 1", n)
	}
	if n := count(`SELECT count(*) FROM counter_audit_log WHERE counter_id = 'quiet:a'`); n != 0 {
		t.Errorf("quiet:a: %d audit rows, want 0 (namespace not audited)", n)
	}
}

func TestTieredCrash(t *testing.T) {
	for _, mode := range []string{"sync", "async"} {
		t.Run(mode, func(t *testing.T) {
			env := newTieredEnv(t)
			var acked, sent int64
			for round := 0; round < 3; round++ {
				p := env.start(t, "--durability", mode, "--flush-interval", "200ms")
				stop := hammer(t, p, 8, 100)
				// Kill between flushes: after one committed (async), so
				// PostgreSQL holds some and the rest is the unflushed window.
				for end := time.Now().Add(5 * time.Second); env.pgValue(t, "crash") <= acked && time.Now().Before(end); {
					time.Sleep(20 * time.Millisecond)
				}
				time.Sleep(50 * time.Millisecond)
				committed := env.pgValue(t, "crash")
				p.kill(t) // with increments in flight
				ra, rs := stop()
				acked, sent = acked+ra, sent+rs
				p = env.start(t)
				if v := getValue(t, p.addr, "crash"); v < acked || v > sent {
					t.Fatalf("round %d, Redis intact: value %d outside [acked %d, sent %d]", round, v, acked, sent)
				}
				p.kill(t)
				env.rd.FlushAll(t)
				p = env.start(t)
				v := getValue(t, p.addr, "crash")
				lo := acked
				if mode == "async" {
					lo = committed
				}
				t.Logf("round %d: acked %d sent %d committed before kill %d; after wipe %d", round, acked, sent, committed, v)
				if v < lo || v > sent {
					t.Fatalf("round %d, from PostgreSQL: value %d outside [%d, sent %d]", round, v, lo, sent)
				}
				p.kill(t)
				acked, sent = v, v // later rounds count from what survived

			}
		})
	}
}

// TestTieredCrashJournal SIGKILLs an async tiered counterd under
// concurrent increments, with Redis intact, and restarts it: once the
// write-behind journal's recovery replayed the dead process's writes
// (its lease runs out within 15 s; a round every 10 s), PostgreSQL holds
// exactly Redis's value, which holds every acknowledged increment; with
// Redis then wiped, the value read back from PostgreSQL is the same.
func TestTieredCrashJournal(t *testing.T) {
	env := newTieredEnv(t)
	p := env.start(t, "--durability", "async", "--flush-interval", "1s")
	stop := hammer(t, p, 8, 2000)
	time.Sleep(300 * time.Millisecond)
	p.kill(t) // with increments in flight and the window unflushed
	acked, sent := stop()
	committed := env.pgValue(t, "crash")
	p = env.start(t)
	v := getValue(t, p.addr, "crash")
	if v < acked || v > sent {
		t.Fatalf("Redis intact: value %d outside [acked %d, sent %d]", v, acked, sent)
	}
	end := time.Now().Add(60 * time.Second)
	for env.pgValue(t, "crash") != v && time.Now().Before(end) {
		time.Sleep(200 * time.Millisecond)
	}
	pg := env.pgValue(t, "crash")
	t.Logf("acked %d sent %d; Redis %d; PostgreSQL %d at the kill, %d after recovery", acked, sent, v, committed, pg)
	if pg != v {
		t.Fatalf("PostgreSQL = %d after recovery, Redis %d", pg, v)
	}
	p.kill(t)
	env.rd.FlushAll(t)
	p = env.start(t)
	if got := getValue(t, p.addr, "crash"); got != v {
		t.Fatalf("from PostgreSQL after the wipe: %d, want %d", got, v)
	}
	p.kill(t)
}

// hammer sends increments of "crash" from workers goroutines and returns
// once at least n are acknowledged; they keep going until stop, which
// returns how many were acknowledged and sent.
func hammer(t *testing.T, p *proc, workers int, n int64) (stop func() (acked, sent int64)) {
	t.Helper()
	var a, s atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				s.Add(1)
				code, _, _, err := post(p.addr+"/counters/crash/increment", "", `{"delta": 1}`)
				if err == nil && code == 200 {
					a.Add(1)
				}
			}
		}()
	}
	deadline := time.Now().Add(20 * time.Second)
	for a.Load() < n && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	return func() (int64, int64) {
		close(done)
		wg.Wait()
		return a.Load(), s.Load()
	}
}
