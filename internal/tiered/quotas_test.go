package tiered_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/quota"
	"github.com/counterd/counterd/internal/testutil/pgtest"
	"github.com/counterd/counterd/internal/testutil/redistest"
	"github.com/counterd/counterd/internal/tiered"
	"github.com/redis/go-redis/v9"
)

func useQuotas(t testing.TB, yaml string, bs ...*tiered.Backend) {
	t.Helper()
	var c *quota.Config
	if yaml != "" {
		var err error
		if c, err = quota.Parse(strings.NewReader(yaml)); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range bs {
		if err := b.SetQuotas(c); err != nil {
			t.Fatal(err)
		}
	}
}

// usage is quota name's count as b reports it (-1: not listed).
func usage(t *testing.T, b *tiered.Backend, name string) int64 {
	t.Helper()
	us, err := b.Quotas(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range us {
		if u.Quota == name {
			return u.Keys
		}
	}
	return -1
}

// second opens another tiered node on e's Redis and PostgreSQL.
func (e *env) second(t *testing.T, tweak func(*tiered.Options)) *tiered.Backend {
	return e.open(t, func(o *tiered.Options) {
		o.NodeID = "t2"
		if tweak != nil {
			tweak(o)
		}
	})
}

func wantQuotaRefusal(t *testing.T, what string, err error, max int64) {
	t.Helper()
	var qe *quota.ExceededError
	if !errors.Is(err, contract.ErrQuotaExceeded) || !errors.As(err, &qe) || qe.Quota != "q:*" || qe.Limit != "max_keys" || qe.Max != max {
		t.Fatalf("%s: %v, want a refusal by q:* (max_keys %d)", what, err, max)
	}
}

// testQuotasTwoNodesAlternate: two nodes creating keys in turn share one
// count: the (max+1)th key is refused on either node, the count survives
// both nodes' restart, and a Redis that lost everything is recounted from
// PostgreSQL before the next creation.
func testQuotasTwoNodesAlternate(t *testing.T, s setup) {
	e := s.env(t, nil)
	b2 := e.second(t, nil)
	nodes := []*tiered.Backend{e.b, b2}
	const q = "namespaces:\n  \"q:*\": {max_keys: 10}\n"
	useQuotas(t, q, nodes...)
	ctx := context.Background()
	for i := range 10 {
		apply(t, nodes[i%2], add(fmt.Sprintf("q:%d", i), contract.KindNone, 1))
	}
	for i, b := range nodes {
		_, err := b.Apply(ctx, add("q:10", contract.KindNone, 1), contract.WriteOptions{})
		wantQuotaRefusal(t, fmt.Sprintf("node %d, 11th key", i), err, 10)
		if v := view(t, b, "q:10"); v.Exists {
			t.Fatalf("the refused key exists: %+v", v)
		}
		apply(t, b, add("q:3", contract.KindNone, 1)) // existing keys take adds
		if n := usage(t, b, "q:*"); n != 10 {
			t.Fatalf("node %d counts %d keys, want 10", i, n)
		}
	}
	// Restart: every node closed, a new one counts what is stored.
	for _, b := range nodes {
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}
	b3 := e.open(t, nil)
	useQuotas(t, q, b3)
	_, err := b3.Apply(ctx, add("q:10", contract.KindNone, 1), contract.WriteOptions{})
	wantQuotaRefusal(t, "11th key after a restart", err, 10)
	apply(t, b3, contract.Op{Type: contract.OpDelete, ID: "q:0"})
	apply(t, b3, add("q:10", contract.KindNone, 1))
	if err := b3.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Redis loses everything (counts included): the next creation recounts
	// from PostgreSQL first.
	e.flushRedis(t)
	_, err = b3.Apply(ctx, add("q:11", contract.KindNone, 1), contract.WriteOptions{})
	wantQuotaRefusal(t, "11th key after Redis lost its data", err, 10)
	if n := usage(t, b3, "q:*"); n != 10 {
		t.Fatalf("after the recount: %d keys, want 10", n)
	}
}

// testQuotasConcurrentCreates: creations racing on two nodes never pass
// max_keys, and two nodes creating the same key count it once (every
// writer that found it missing reserves; all but the creator release).
func testQuotasConcurrentCreates(t *testing.T, s setup) {
	e := s.env(t, nil)
	b2 := e.second(t, nil)
	nodes := []*tiered.Backend{e.b, b2}
	useQuotas(t, "namespaces:\n  \"q:*\": {max_keys: 10}\n  \"same:*\": {max_keys: 60}\n", nodes...)
	ctx := context.Background()
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := nodes[i%2].Apply(ctx, add(fmt.Sprintf("q:%d", i), contract.KindNone, 1), contract.WriteOptions{})
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, contract.ErrQuotaExceeded):
				refused.Add(1)
			default:
				t.Error(err)
			}
		}()
	}
	// The same 3 keys from both nodes at once, 8 writes each.
	for i := range 48 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := nodes[i%2].Apply(ctx, add(fmt.Sprintf("same:%d", i%3), contract.KindNone, 1), contract.WriteOptions{}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 10 || refused.Load() != 30 {
		t.Fatalf("%d creations passed and %d were refused, want 10 and 30", ok.Load(), refused.Load())
	}
	exist := 0
	for i := range 40 {
		if view(t, e.b, fmt.Sprintf("q:%d", i)).Exists {
			exist++
		}
	}
	if exist != 10 || usage(t, e.b, "q:*") != 10 {
		t.Fatalf("%d keys exist and %d are counted, want 10", exist, usage(t, e.b, "q:*"))
	}
	if n := usage(t, b2, "same:*"); n != 3 {
		t.Fatalf("3 keys created by both nodes are counted %d times", n)
	}
	var sum int64
	for i := range 3 {
		sum += view(t, e.b, fmt.Sprintf("same:%d", i)).Value
	}
	if sum != 48 {
		t.Fatalf("the shared keys sum to %d, want 48", sum)
	}
}

// testQuotaRecountClosesCrashWindow: a reservation left by a node that
// died between reserving and creating (simulated: one more key counted in
// Redis) is corrected by the periodic recount.
func testQuotaRecountClosesCrashWindow(t *testing.T, s setup) {
	e := s.env(t, func(o *tiered.Options) { o.QuotaRecountInterval = 100 * time.Millisecond })
	useQuotas(t, "namespaces:\n  \"q:*\": {max_keys: 3}\n", e.b)
	ctx := context.Background()
	apply(t, e.b, add("q:a", contract.KindNone, 1))
	apply(t, e.b, add("q:b", contract.KindNone, 1))
	// The crash window: a reservation without its key.
	if err := e.b.Redis().Client().(redis.UniversalClient).HIncrBy(ctx, "{counterd:quotas}:keys", "r:q:*", 1).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for usage(t, e.b, "q:*") != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the leaked reservation is still counted: %d keys", usage(t, e.b, "q:*"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	apply(t, e.b, add("q:c", contract.KindNone, 1))
	_, err := e.b.Apply(ctx, add("q:d", contract.KindNone, 1), contract.WriteOptions{})
	wantQuotaRefusal(t, "4th key", err, 3)
}

// testQuotaHashFieldsAcrossNodes: max_hash_fields holds for a hash that
// two nodes add fields to, and a hash known only to PostgreSQL.
func testQuotaHashFieldsAcrossNodes(t *testing.T, s setup) {
	e := s.env(t, nil)
	b2 := e.second(t, nil)
	useQuotas(t, "namespaces:\n  \"h:*\": {max_hash_fields: 3}\n", e.b, b2)
	ctx := context.Background()
	hadd := func(b *tiered.Backend, f string) error {
		_, err := b.Apply(ctx, contract.Op{Type: contract.OpHAdd, ID: "h:1", Fields: []counter.FieldDelta{{Name: f, Delta: 1}}}, contract.WriteOptions{})
		return err
	}
	for i, f := range []string{"a", "b", "c"} {
		if err := hadd([]*tiered.Backend{e.b, b2}[i%2], f); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	e.flushRedis(t) // the hash is in PostgreSQL only now
	var qe *quota.ExceededError
	if err := hadd(b2, "d"); !errors.As(err, &qe) || qe.Limit != "max_hash_fields" || qe.Max != 3 {
		t.Fatalf("4th field: %v", err)
	}
	if err := hadd(e.b, "a"); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkQuotaAdd measures, in one run against one real Redis and
// PostgreSQL, adds to existing counters (the hot path) without quotas and
// with a quota over every id, and creations with and without quotas;
// roundtrips/op counts the commands and pipelines the node sent to Redis
// (a go-redis hook), so an extra round trip would show as +1:
//
//	go test -run '^$' -bench QuotaAdd -benchtime 20000x ./internal/tiered/
func BenchmarkQuotaAdd(b *testing.B) {
	rd, dsn := redistest.New(b), pgtest.DSN(b)
	o := tiered.Options{RedisURL: rd.URL, PostgresDSN: dsn, NodeID: "bench"}
	o.Postgres.MaintenanceInterval = -1
	be, err := tiered.Open(context.Background(), o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = be.Close() })
	ctx := context.Background()
	ids := make([]string, benchCounters)
	for i := range ids {
		ids[i] = fmt.Sprintf("bench:c%03d", i)
		if _, err := be.Apply(ctx, add(ids[i], contract.KindNone, 1), contract.WriteOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	var trips atomic.Int64 // round trips: one per command or pipeline sent
	be.Redis().Client().(redis.UniversalClient).AddHook(tripCounter{&trips})
	commands := func() int64 { return trips.Load() }
	run := func(b *testing.B, op func(i int) contract.Op) {
		c0 := commands()
		b.ResetTimer()
		for i := range b.N {
			if _, err := be.Apply(ctx, op(i), contract.WriteOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(commands()-c0)/float64(b.N), "roundtrips/op")
	}
	existing := func(i int) contract.Op { return add(ids[i%benchCounters], contract.KindNone, 1) }
	b.Run("add-existing/no-quotas", func(b *testing.B) { run(b, existing) })
	useQuotas(b, "namespaces:\n  \"bench:*\": {max_keys: 100000000}\ndefault: {max_keys: 100000000}\n", be)
	b.Run("add-existing/quotas", func(b *testing.B) { run(b, existing) })
	var n atomic.Int64
	b.Run("create/quotas", func(b *testing.B) {
		run(b, func(int) contract.Op { return add(fmt.Sprintf("bench:new%d", n.Add(1)), contract.KindNone, 1) })
	})
	useQuotas(b, "", be)
	b.Run("create/no-quotas", func(b *testing.B) {
		run(b, func(int) contract.Op { return add(fmt.Sprintf("bench:new%d", n.Add(1)), contract.KindNone, 1) })
	})
}

// tripCounter is a go-redis hook counting round trips.
type tripCounter struct{ n *atomic.Int64 }

func (h tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(1); return next(ctx, cmds) }
}
