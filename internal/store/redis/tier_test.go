package redisstore_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/counter"
	redisstore "github.com/counterd/counterd/internal/store/redis"
	"github.com/counterd/counterd/internal/testutil/redistest"
)

// backing is an in-memory next tier for the read-through loader.
type backing struct {
	mu    sync.Mutex // guards recs
	recs  map[string]redisstore.Record
	calls atomic.Int64
}

func (b *backing) load(_ context.Context, id string) (redisstore.Record, bool, error) {
	b.calls.Add(1)
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.recs[id]
	return r, ok && r.Kind != "", nil // no kind: deleted at r.Life
}

func newBacking() *backing {
	return &backing{recs: map[string]redisstore.Record{
		"c": {Kind: redisstore.KindCounter, Value: 41, Version: 7, UpdatedAt: time.UnixMilli(1704708000000)},
		"s": {Kind: redisstore.KindSharded, Shards: []int64{1, 2, 3}, Version: 3},
		"h": {Kind: redisstore.KindHash, Fields: []counter.Field{{Name: "likes", Value: 2}, {Name: "views", Value: 9}}, Version: 4},
	}}
}

func testReadThrough(t *testing.T, tg *target) {
	b := newBacking()
	s := open(t, tg.url, redisstore.Options{Loader: b.load})
	ctx := context.Background()

	rec := get(t, s, "c")
	if rec.Value != 41 || rec.Version != 7 || !rec.UpdatedAt.Equal(time.UnixMilli(1704708000000)) {
		t.Fatalf("loaded = %+v", rec)
	}
	if b.calls.Load() != 1 {
		t.Fatalf("loader calls = %d, want 1", b.calls.Load())
	}
	// Record.TTL is the counter's own TTL (none); the cache TTL is only
	// on the keys.
	if rec.TTL != 0 {
		t.Fatalf("TTL of a cached counter = %v, want 0 (no user TTL)", rec.TTL)
	}
	for _, k := range []string{redisstore.ValueKey("c"), redisstore.MetaKey("c")} {
		d, err := tg.rdb.PTTL(ctx, k).Result()
		if err != nil || d <= 55*time.Second || d > 60*time.Second {
			t.Fatalf("PTTL %s = %v, %v", k, d, err)
		}
	}
	// A hit does not call the loader.
	if rec := get(t, s, "c"); rec.Value != 41 || b.calls.Load() != 1 {
		t.Fatalf("hit: %+v, loader calls %d", rec, b.calls.Load())
	}
	// Increments apply to the loaded value and bump its version.
	if v, ver, err := s.Add(ctx, "c", redisstore.KindAuto, 1, redisstore.AddOptions{}); err != nil || v != 42 || ver != 8 {
		t.Fatalf("Add on cached = %d, %d, %v", v, ver, err)
	}
	// A write to an uncached counter loads it first.
	if fs, ver, err := s.HAdd(ctx, "h", []counter.FieldDelta{{Name: "views", Delta: 1}}); err != nil || fs[0].Value != 10 || ver != 5 {
		t.Fatalf("HAdd on uncached = %v, %d, %v", fs, ver, err)
	}
	if rec := get(t, s, "s"); rec.Value != 6 || len(rec.Shards) != 3 {
		t.Fatalf("sharded loaded = %+v", rec)
	}
	if v, _, err := s.Add(ctx, "s", redisstore.KindSharded, 4, redisstore.AddOptions{}); err != nil || v != 10 {
		t.Fatalf("Add on cached sharded = %d, %v", v, err)
	}
	// Versioned Set of an uncached counter checks the loaded version
	// (evicted: a Delete would leave a tombstone, which is not read
	// through).
	if err := tg.rdb.Del(ctx, redisstore.ValueKey("c"), redisstore.MetaKey("c")).Err(); err != nil {
		t.Fatal(err)
	}
	zero := uint64(0)
	if _, err := s.Set(ctx, "c", 1, &zero, 0); !errors.Is(err, redisstore.ErrVersionConflict) {
		t.Fatalf("Set expecting absent, loader has v7: %v", err)
	}
	// Misses in both tiers: not found, counter created from scratch.
	calls := b.calls.Load()
	if _, found, err := s.Get(ctx, "none"); err != nil || found {
		t.Fatalf("Get none = %v, %v", found, err)
	}
	if v, ver, err := s.Add(ctx, "none", redisstore.KindAuto, 3, redisstore.AddOptions{}); err != nil || v != 3 || ver != 1 {
		t.Fatalf("Add none = %d, %d, %v", v, ver, err)
	}
	if got := b.calls.Load() - calls; got != 2 {
		t.Fatalf("loader calls for a missing counter = %d, want 2 (Get, Add)", got)
	}

	// FLUSHALL: the value comes back from the loader.
	tg.flushAll(t)
	if rec := get(t, s, "c"); rec.Value != 41 || rec.Version != 7 {
		t.Fatalf("after FLUSHALL: %+v", rec)
	}
}

// TestFillDoesNotOverwrite: a record loaded before a concurrent write
// created the counter must not replace it.
func testFillDoesNotOverwrite(t *testing.T, tg *target) {
	var s *redisstore.Store
	var once sync.Once
	loader := func(ctx context.Context, id string) (redisstore.Record, bool, error) {
		// Simulate a slow load during which another client writes.
		once.Do(func() {
			other, err := redisstore.Open(ctx, tg.url, redisstore.Options{})
			if err != nil {
				t.Error(err)
				return
			}
			defer other.Close()
			if _, _, err := other.Add(ctx, id, redisstore.KindCounter, 1000, redisstore.AddOptions{}); err != nil {
				t.Error(err)
			}
		})
		return redisstore.Record{Kind: redisstore.KindCounter, Value: 5, Version: 1}, true, nil
	}
	s = open(t, tg.url, redisstore.Options{Loader: loader})
	rec := get(t, s, "c")
	if rec.Value != 1000 {
		t.Fatalf("Get = %+v, want the concurrent write (1000) kept", rec)
	}
}

func TestRedisDownAndBack(t *testing.T) {
	srv := redistest.New(t)
	if srv.External() {
		t.Skip("needs a private redis-server")
	}
	s := open(t, srv.URL, redisstore.Options{DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond,
		WriteTimeout: 200 * time.Millisecond})
	ctx := context.Background()
	if _, _, err := s.Add(ctx, "c", redisstore.KindAuto, 1, redisstore.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	srv.Stop(t)
	start := time.Now()
	_, _, err := s.Add(ctx, "c", redisstore.KindAuto, 1, redisstore.AddOptions{})
	if !errors.Is(err, redisstore.ErrUnavailable) {
		t.Fatalf("Add with Redis down = %v, want ErrUnavailable", err)
	}
	if _, _, err := s.Get(ctx, "c"); !errors.Is(err, redisstore.ErrUnavailable) {
		t.Fatalf("Get with Redis down = %v, want ErrUnavailable", err)
	}
	if err := s.Ready(ctx); err == nil || !errors.Is(err, redisstore.ErrUnavailable) {
		t.Fatalf("Ready with Redis down = %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("three failing calls took %v", d)
	}
	srv.Start(t) // comes back empty: persistence is off
	if err := s.Ready(ctx); err != nil {
		t.Fatalf("Ready after restart = %v", err)
	}
	if v, _, err := s.Add(ctx, "c", redisstore.KindAuto, 1, redisstore.AddOptions{}); err != nil || v != 1 {
		t.Fatalf("Add after restart = %d, %v", v, err)
	}
	s.Close()
	if err := s.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if _, _, err := s.Get(ctx, "c"); !errors.Is(err, redisstore.ErrClosed) {
		t.Fatalf("Get after Close = %v, want ErrClosed", err)
	}
}

func TestOpenUnavailable(t *testing.T) {
	srv := redistest.New(t)
	if srv.External() {
		t.Skip("needs a private redis-server")
	}
	srv.Stop(t)
	start := time.Now()
	_, err := redisstore.Open(context.Background(), srv.URL, redisstore.Options{})
	if !errors.Is(err, redisstore.ErrUnavailable) {
		t.Fatalf("Open = %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Open took %v", d)
	}
}

func TestObserve(t *testing.T) {
	srv := redistest.New(t)
	var mu sync.Mutex
	ops := map[string]int{}
	s := open(t, srv.URL, redisstore.Options{Observe: func(op string, _ time.Duration, _ error) {
		mu.Lock()
		ops[op]++
		mu.Unlock()
	}})
	ctx := context.Background()
	s.Add(ctx, "c", redisstore.KindAuto, 1, redisstore.AddOptions{})
	s.Get(ctx, "c")
	mu.Lock()
	defer mu.Unlock()
	if ops["add"] != 1 || ops["get"] != 1 {
		t.Fatalf("observed %v", ops)
	}
}

func BenchmarkAdd(b *testing.B) {
	srv := redistest.New(b)
	s := open(b, srv.URL, redisstore.Options{})
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(8) // 8 goroutines per CPU, as a busy server would have
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, _, err := s.Add(ctx, "bench", redisstore.KindCounter, 1, redisstore.AddOptions{}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// testTombstones: a delete leaves a tombstone that reads answer as missing
// without reading through (the next tier may still hold the value), a
// write creates the counter's next life over it, and a counter the next
// tier reports deleted at a life continues from it.
func testTombstones(t *testing.T, tg *target) {
	b := newBacking()
	s := open(t, tg.url, redisstore.Options{Loader: b.load})
	ctx := context.Background()
	lifeOf := func(write func(ctx context.Context) error) uint64 {
		t.Helper()
		var l uint64
		if err := write(redisstore.WithLife(ctx, &l)); err != nil {
			t.Fatal(err)
		}
		return l
	}
	add := func(id string, d int64) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			_, _, err := s.Add(ctx, id, redisstore.KindAuto, d, redisstore.AddOptions{})
			return err
		}
	}
	if l := lifeOf(add("c", 1)); l != 1 { // loaded: no life recorded, the first
		t.Fatalf("life of a loaded counter = %d, want 1", l)
	}
	existed, life, err := s.DeleteLife(ctx, "c")
	if err != nil || !existed || life != 1 {
		t.Fatalf("DeleteLife = %v, %d, %v; want true, 1", existed, life, err)
	}
	calls := b.calls.Load()
	if _, found, err := s.Get(ctx, "c"); err != nil || found {
		t.Fatalf("Get after delete = %v, %v; want missing", found, err)
	}
	if l := lifeOf(add("c", 5)); l != 2 {
		t.Fatalf("life after a delete = %d, want 2", l)
	}
	if rec := get(t, s, "c"); rec.Value != 5 {
		t.Fatalf("c after delete and add 5 = %d, want 5 (not the loader's 41)", rec.Value)
	}
	if n := b.calls.Load() - calls; n != 0 {
		t.Fatalf("loader calls after the delete = %d, want 0", n)
	}
	// A Delete of a deleted counter: nothing existed, the tombstone stays.
	if _, _, err := s.DeleteLife(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if existed, _, err := s.DeleteLife(ctx, "c"); err != nil || existed {
		t.Fatalf("second delete = %v, %v", existed, err)
	}
	// The loader's record of a deleted counter: its life continues.
	b.mu.Lock()
	b.recs["gone"] = redisstore.Record{Life: 4}
	b.recs["old"] = redisstore.Record{Kind: redisstore.KindCounter, Value: 10, Version: 3, Life: 3}
	b.mu.Unlock()
	if _, found, err := s.Get(ctx, "gone"); err != nil || found {
		t.Fatalf("Get gone = %v, %v", found, err)
	}
	if l := lifeOf(add("gone", 1)); l != 5 {
		t.Fatalf("life of a counter deleted at life 4 = %d, want 5", l)
	}
	if l := lifeOf(add("old", 1)); l != 3 {
		t.Fatalf("life of a loaded counter of life 3 = %d, want 3", l)
	}
}
