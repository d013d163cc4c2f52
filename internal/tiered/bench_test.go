package tiered_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/testutil/pgtest"
	"github.com/counterd/counterd/internal/testutil/redistest"
	"github.com/counterd/counterd/internal/tiered"
)

const (
	benchCounters    = 100
	benchParallelism = 32 // goroutines per GOMAXPROCS: concurrent clients
)

// BenchmarkTiered compares, against one PostgreSQL in one run, increments
// through the tiered backend (Redis Lua script + write-behind, async and
// sync) with the naive path (one autocommit UPDATE per increment), from
// 32*GOMAXPROCS goroutines (concurrent clients) over 100 counters:
//
//	go test -run '^$' -bench Tiered -benchtime 5s ./internal/tiered/
//
// Every sub-benchmark checks at the end that PostgreSQL holds exactly b.N
// increments; the tiered timings include the final flush.
func BenchmarkTiered(b *testing.B) {
	rd, dsn := redistest.New(b), pgtest.DSN(b)
	open := func(b *testing.B, d contract.Durability) *tiered.Backend {
		o := tiered.Options{RedisURL: rd.URL, PostgresDSN: dsn, Durability: d, NodeID: "bench"}
		o.Postgres.MaintenanceInterval, o.Postgres.MaxConns = -1, 8
		be, err := tiered.Open(context.Background(), o)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = be.Close() })
		return be
	}
	ids := make([]string, benchCounters)
	for i := range ids {
		ids[i] = fmt.Sprintf("bench:c%03d", i)
	}
	for _, d := range []contract.Durability{contract.Async, contract.Sync} {
		b.Run("tiered-"+d.String(), func(b *testing.B) {
			rd.FlushAll(b)
			benchIncrements(b, open(b, d), ids, "")
		})
	}
	// Each increment under its own idempotency key (claim, record in
	// Redis and, written behind, in PostgreSQL): as usual (every slot's
	// marker passed), and fresh (no markers: the first claim of each
	// slot records it in PostgreSQL).
	for _, fresh := range []bool{false, true} {
		name := "tiered-async-keyed"
		if fresh {
			name += "-fresh"
		}
		b.Run(name, func(b *testing.B) {
			rd.FlushAll(b)
			be := open(b, contract.Async)
			if !fresh {
				if err := tiered.PassMarkers(context.Background(), be); err != nil {
					b.Fatal(err)
				}
			}
			benchIncrements(b, be, ids, fmt.Sprintf("bench-%d-", time.Now().UnixNano()))
		})
	}
	// Each increment a marked op with one dedupe mark of its own (the
	// pipeline consumer's ApplyCounterMarked, one op per call: the
	// journal's cost per op at its largest; the pipeline coalesces).
	b.Run("tiered-async-marked", func(b *testing.B) {
		rd.FlushAll(b)
		be := open(b, contract.Async)
		if err := tiered.PassMarkers(context.Background(), be); err != nil {
			b.Fatal(err)
		}
		benchIncrements(b, be, ids, markedBench)
	})
	b.Run("naive-update", func(b *testing.B) {
		be := open(b, contract.Async)
		ctx := context.Background()
		truncate(b, be)
		pool := be.Postgres().Pool()
		for _, id := range ids {
			if _, err := pool.Exec(ctx, `INSERT INTO counters (counter_id, counter_type) VALUES ($1, 'counter')`, id); err != nil {
				b.Fatal(err)
			}
		}
		var next, stmts atomic.Uint64
		b.SetParallelism(benchParallelism)
		b.ResetTimer()
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				stmts.Add(1)
				if _, err := pool.Exec(ctx, `UPDATE counters SET value = value + 1, version = version + 1, updated_at = now() WHERE counter_id = $1`,
					ids[next.Add(1)%benchCounters]); err != nil {
					b.Error(err)
					return
				}
			}
		})
		report(b, time.Since(start), stmts.Load())
		checkSum(b, be)
	})
}

// BenchmarkTieredRedisCluster compares, in one run against one
// PostgreSQL, async tiered increments on one Redis with the same on a
// 3-master Redis Cluster (both private, on this machine), from
// 32*GOMAXPROCS goroutines over 100 counters (spread over every master):
//
//	go test -run '^$' -bench TieredRedisCluster -count 5 ./internal/tiered/
func BenchmarkTieredRedisCluster(b *testing.B) {
	rd, cl, dsn := redistest.New(b), redistest.NewCluster(b), pgtest.DSN(b)
	ids := make([]string, benchCounters)
	for i := range ids {
		ids[i] = fmt.Sprintf("bench:c%03d", i)
	}
	for _, c := range []struct {
		name, url string
		flush     func(testing.TB)
	}{{"redis=single", rd.URL, rd.FlushAll}, {"redis=cluster", cl.URL(), cl.FlushAll}} {
		b.Run(c.name, func(b *testing.B) {
			c.flush(b)
			o := tiered.Options{RedisURL: c.url, PostgresDSN: dsn, Durability: contract.Async, NodeID: "bench"}
			o.Postgres.MaintenanceInterval, o.Postgres.MaxConns = -1, 8
			be, err := tiered.Open(context.Background(), o)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = be.Close() })
			benchIncrements(b, be, ids, "")
		})
	}
}

// benchIncrements runs b.N increments over ids from 32*GOMAXPROCS
// goroutines on an emptied PostgreSQL, flushes, reports the rates and the
// CPU time per increment (this process and its redis-servers), and checks
// that PostgreSQL holds exactly b.N. A keyPrefix gives each increment an
// idempotency key of its own.
// markedBench as benchIncrements' keyPrefix: marked ops.
const markedBench = "\x00marked"

func benchIncrements(b *testing.B, be *tiered.Backend, ids []string, keyPrefix string) {
	ctx := context.Background()
	truncate(b, be)
	st0 := be.Postgres().Stats().Statements
	var next atomic.Uint64
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n := next.Add(1)
			op := contract.Op{Type: contract.OpAdd, ID: ids[n%uint64(len(ids))], Delta: 1}
			var wo contract.WriteOptions
			if keyPrefix == markedBench {
				mo := []contract.MarkedOp{{Op: op, Marks: []string{strconv.FormatUint(n, 36)}}}
				if _, err := be.ApplyCounterMarked(ctx, mo, time.Hour, wo); err != nil {
					b.Error(err)
					return
				}
				continue
			}
			if keyPrefix != "" {
				wo.IdempotencyKey = keyPrefix + strconv.FormatUint(n, 36)
			}
			if _, err := be.Apply(ctx, op, wo); err != nil {
				b.Error(err)
				return
			}
		}
	})
	if err := be.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	report(b, time.Since(start), be.Postgres().Stats().Statements-st0)
	if cpu := cpuTime() - cpu0; cpu > 0 {
		// This process and its redis-servers; PostgreSQL is not counted.
		b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/increment")
	}
	checkSum(b, be)
}

func truncate(b *testing.B, be *tiered.Backend) {
	if err := be.Postgres().Truncate(context.Background()); err != nil {
		b.Fatal(err)
	}
}

func checkSum(b *testing.B, be *tiered.Backend) {
	b.StopTimer()
	var sum int64
	if err := be.Postgres().Pool().QueryRow(context.Background(), `SELECT coalesce(sum(value), 0) FROM counters`).Scan(&sum); err != nil {
		b.Fatal(err)
	}
	if sum != int64(b.N) {
		b.Fatalf("PostgreSQL sum = %d, want %d", sum, b.N)
	}
}

func report(b *testing.B, el time.Duration, stmts uint64) {
	sec := el.Seconds()
	b.ReportMetric(float64(b.N)/sec, "increments/s")
	b.ReportMetric(float64(stmts)/sec, "pg-statements/s")
	b.ReportMetric(float64(b.N)/float64(max(stmts, 1)), "increments/statement")
}
