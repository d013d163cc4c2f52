package redisrl_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/counterd/counterd/internal/api/ratelimitapi"
	"github.com/counterd/counterd/internal/ratelimit"
	"github.com/counterd/counterd/internal/ratelimit/redisrl"
	redisstore "github.com/counterd/counterd/internal/store/redis"
	"github.com/counterd/counterd/internal/testutil/redistest"
)

// clock is a settable clock shared by both deciders of a test.
type clock struct{ ns atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// newClient returns a client of a private Redis server.
func newClient(t testing.TB) redis.UniversalClient {
	t.Helper()
	srv := redistest.New(t)
	opt, err := redis.ParseURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

func newLimiter(t testing.TB, clk func() time.Time, ps ...ratelimit.Policy) *ratelimit.Limiter {
	t.Helper()
	l, err := ratelimit.New(ratelimit.Config{Clock: clk, EvictInterval: -1, Policies: ps})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func newDecider(t testing.TB, rdb redis.UniversalClient, l *ratelimit.Limiter, clk func() time.Time) *redisrl.Decider {
	t.Helper()
	d, err := redisrl.New(redisrl.Config{Client: rdb, Local: l, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

var algorithms = []ratelimit.Algorithm{ratelimit.FixedWindow, ratelimit.SlidingWindow, ratelimit.SlidingLog,
	ratelimit.TokenBucket, ratelimit.LeakyBucket}

// genLimit draws a valid limit: small limits mostly (so that sequences
// reach them), large ones and odd periods (ns) sometimes, to exercise the
// script's big-integer arithmetic.
func genLimit(t *rapid.T, label string) ratelimit.Limit {
	alg := rapid.SampledFrom(algorithms).Draw(t, label+".alg")
	lim := ratelimit.Limit{Algorithm: alg, Name: rapid.SampledFrom([]string{"", "a", "b"}).Draw(t, label+".name")}
	switch rapid.IntRange(0, 4).Draw(t, label+".size") {
	case 0:
		lim.Limit = rapid.Int64Range(1, 1<<40).Draw(t, label+".limit")
	default:
		lim.Limit = rapid.Int64Range(1, 12).Draw(t, label+".limit")
	}
	if alg == ratelimit.SlidingLog {
		lim.Limit = min(lim.Limit, 12)
	}
	switch rapid.IntRange(0, 5).Draw(t, label+".period") {
	case 0:
		lim.Period = time.Duration(rapid.Int64Range(int64(time.Millisecond), int64(10*time.Second)).Draw(t, label+".ns"))
	case 1:
		lim.Period = ratelimit.MaxPeriod
	case 2:
		lim.Period = time.Duration(rapid.Int64Range(int64(time.Hour), int64(ratelimit.MaxPeriod)).Draw(t, label+".ns"))
	default:
		lim.Period = rapid.SampledFrom([]time.Duration{time.Millisecond, 7 * time.Millisecond, time.Second, 1500 * time.Millisecond, time.Minute}).Draw(t, label+".p")
	}
	if (alg == ratelimit.TokenBucket || alg == ratelimit.LeakyBucket) && rapid.Bool().Draw(t, label+".hasBurst") {
		lim.Burst = rapid.Int64Range(1, 2*min(lim.Limit, 1<<39)).Draw(t, label+".burst")
	}
	if lim.Validate() != nil {
		t.Skip("invalid limit drawn")
	}
	return lim
}

// newClusterClient returns a client of a private 3-master Redis Cluster.
func newClusterClient(t testing.TB) redis.UniversalClient {
	t.Helper()
	cl := redistest.NewCluster(t)
	co, _, err := redisstore.ParseURL(cl.URL())
	if err != nil || co == nil {
		t.Fatalf("cluster URL %q: %v", cl.URL(), err)
	}
	c := redis.NewClusterClient(co)
	t.Cleanup(func() { c.Close() })
	return c
}

// TestEquivalence runs random sequences of checks through the in-memory
// Limiter and through Redis on the same clock and requires the same
// decisions, statuses and errors at every step, on one Redis and on a
// Redis Cluster.
func TestEquivalence(t *testing.T) {
	t.Run("Redis", func(t *testing.T) { testEquivalence(t, newClient(t)) })
	t.Run("Cluster", func(t *testing.T) { testEquivalence(t, newClusterClient(t)) })
}

func testEquivalence(t *testing.T, rdb redis.UniversalClient) {
	var run atomic.Int64
	rapid.Check(t, func(rt *rapid.T) {
		clk := new(clock)
		clk.ns.Store(rapid.Int64Range(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano(),
			time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()).Draw(rt, "start"))
		mem := newLimiter(t, clk.Now)
		red := newDecider(t, rdb, newLimiter(t, clk.Now), clk.Now)
		// All keys of one check share a hash tag, so the Redis state of a
		// (key, limit) pair does not depend on the check (see Tag).
		r := run.Add(1)
		tags := []string{fmt.Sprintf("r%dx", r), fmt.Sprintf("r%dy", r)}
		limits := make([]ratelimit.Limit, rapid.IntRange(1, 3).Draw(rt, "limits"))
		maxP := time.Duration(0)
		for i := range limits {
			limits[i] = genLimit(rt, fmt.Sprintf("limit%d", i))
			maxP = max(maxP, limits[i].Period)
		}
		steps := rapid.IntRange(1, 40).Draw(rt, "steps")
		for step := range steps {
			switch rapid.IntRange(0, 3).Draw(rt, "advance") {
			case 0:
			case 1:
				clk.Advance(time.Duration(rapid.Int64Range(0, int64(maxP)/4+1).Draw(rt, "small")))
			case 2:
				clk.Advance(time.Duration(rapid.Int64Range(0, 3*int64(maxP)).Draw(rt, "large")))
			default:
				clk.Advance(time.Duration(rapid.Int64Range(0, int64(time.Millisecond)).Draw(rt, "tiny")))
			}
			tag := rapid.SampledFrom(tags).Draw(rt, "tag")
			keys := []string{tag, "{" + tag + "}:a", "{" + tag + "}:b"}
			hits := make([]ratelimit.Hit, rapid.IntRange(1, 4).Draw(rt, "hits"))
			for i := range hits {
				lim := rapid.SampledFrom(limits).Draw(rt, "limit")
				capa := lim.Capacity()
				var cost int64
				switch rapid.IntRange(0, 9).Draw(rt, "costKind") {
				case 0:
					cost = rapid.Int64Range(0, capa).Draw(rt, "anyCost")
				case 1:
					cost = rapid.SampledFrom([]int64{-1, capa + 1, 0}).Draw(rt, "edgeCost")
				default:
					cost = rapid.Int64Range(0, min(capa, 3)).Draw(rt, "cost")
				}
				hits[i] = ratelimit.Hit{Key: rapid.SampledFrom(keys).Draw(rt, "key"), Limit: lim, Cost: cost}
			}
			want := make([]ratelimit.Status, len(hits))
			got := make([]ratelimit.Status, len(hits))
			ws, werr := mem.CheckMulti(hits, want)
			gs, gerr := red.CheckMultiContext(context.Background(), hits, got)
			if (werr == nil) != (gerr == nil) || (werr != nil && sentinel(werr) != sentinel(gerr)) {
				rt.Fatalf("step %d: %v\nmemory error: %v\nredis error:  %v", step, hits, werr, gerr)
			}
			if werr != nil {
				continue
			}
			if ws != gs {
				rt.Fatalf("step %d at %d: %v\nbinding memory %+v\nbinding redis  %+v", step, clk.ns.Load(), hits, ws, gs)
			}
			for i := range hits {
				if want[i] != got[i] {
					rt.Fatalf("step %d at %d: hit %d of %v\nmemory %+v\nredis  %+v", step, clk.ns.Load(), i, hits, want[i], got[i])
				}
			}
		}
	})
}

// sentinel is the package sentinel err wraps.
func sentinel(err error) error {
	for _, s := range []error{ratelimit.ErrClosed, ratelimit.ErrInvalidKey, ratelimit.ErrInvalidLimit,
		ratelimit.ErrInvalidCost, ratelimit.ErrInvalidRequest, ratelimit.ErrTooManyLimits, ratelimit.ErrUnknownPolicy,
		ratelimit.ErrNoPolicy, ratelimit.ErrDeciderUnavailable} {
		if errors.Is(err, s) {
			return s
		}
	}
	return err
}

// Invalid checks fail with the Limiter's typed errors and change nothing.
func TestErrors(t *testing.T) {
	clk := new(clock)
	clk.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	rdb := newClient(t)
	mem := newLimiter(t, clk.Now)
	red := newDecider(t, rdb, newLimiter(t, clk.Now), clk.Now)
	ok := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: 3, Period: time.Minute}
	many := make([]ratelimit.Hit, ratelimit.MaxHits+1)
	for i := range many {
		many[i] = ratelimit.Hit{Key: "k", Limit: ok, Cost: 1}
	}
	cases := []struct {
		name string
		hits []ratelimit.Hit
		out  []ratelimit.Status
		want error
	}{
		{"no hits", nil, nil, ratelimit.ErrInvalidRequest},
		{"empty key", []ratelimit.Hit{{Key: "", Limit: ok, Cost: 1}}, nil, ratelimit.ErrInvalidKey},
		{"long key", []ratelimit.Hit{{Key: strings.Repeat("k", ratelimit.MaxKeyLen+1), Limit: ok, Cost: 1}}, nil, ratelimit.ErrInvalidKey},
		{"negative cost", []ratelimit.Hit{{Key: "k", Limit: ok, Cost: -1}}, nil, ratelimit.ErrInvalidCost},
		{"cost above capacity", []ratelimit.Hit{{Key: "k", Limit: ok, Cost: 4}}, nil, ratelimit.ErrInvalidCost},
		{"listed twice above capacity", []ratelimit.Hit{{Key: "k", Limit: ok, Cost: 2}, {Key: "k", Limit: ok, Cost: 2}}, nil, ratelimit.ErrInvalidCost},
		{"zero limit", []ratelimit.Hit{{Key: "k", Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Period: time.Second}, Cost: 1}}, nil, ratelimit.ErrInvalidLimit},
		{"no algorithm", []ratelimit.Hit{{Key: "k", Limit: ratelimit.Limit{Limit: 1, Period: time.Second}, Cost: 1}}, nil, ratelimit.ErrInvalidLimit},
		{"burst on a window", []ratelimit.Hit{{Key: "k", Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: 1, Period: time.Second, Burst: 2}, Cost: 1}}, nil, ratelimit.ErrInvalidLimit},
		{"too many", many, nil, ratelimit.ErrTooManyLimits},
		{"out too short", []ratelimit.Hit{{Key: "k", Limit: ok, Cost: 1}, {Key: "j", Limit: ok, Cost: 1}}, make([]ratelimit.Status, 1), ratelimit.ErrInvalidRequest},
		{"second hit bad", []ratelimit.Hit{{Key: "k", Limit: ok, Cost: 1}, {Key: "", Limit: ok, Cost: 1}}, nil, ratelimit.ErrInvalidKey},
	}
	for _, c := range cases {
		_, merr := mem.CheckMulti(c.hits, c.out)
		_, rerr := red.CheckMultiContext(t.Context(), c.hits, c.out)
		if !errors.Is(merr, c.want) || !errors.Is(rerr, c.want) {
			t.Errorf("%s: memory %v, redis %v; want %v", c.name, merr, rerr, c.want)
		}
	}
	if n, err := rdb.DBSize(t.Context()).Result(); err != nil || n != 0 {
		t.Errorf("invalid checks left %d keys (err %v)", n, err)
	}
	// RL.CHECK: the same replies and errors.
	for _, args := range [][]string{{"k", "3", "60000"}, {"k", "3", "60000", "2"}, {"k", "3", "60000", "1", "token_bucket", "5"},
		{"k", "x", "1000"}, {"k", "3"}, {"k", "3", "1000", "9"}, {"k", "3", "1000", "1", "nope"}} {
		b := make([][]byte, len(args))
		for i, a := range args {
			b[i] = []byte(a)
		}
		mr, merr := mem.CheckArgs(b)
		rr, rerr := red.CheckArgs(b)
		if mr != rr || (merr == nil) != (rerr == nil) || (merr != nil && ratelimitapi.RESPError(merr) != ratelimitapi.RESPError(rerr)) {
			t.Errorf("RL.CHECK %q: memory %v %v, redis %v %v", args, mr, merr, rr, rerr)
		}
	}
	red.Close()
	if _, err := red.CheckMultiContext(t.Context(), []ratelimit.Hit{{Key: "k", Limit: ok, Cost: 1}}, nil); !errors.Is(err, ratelimit.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}

// Deciders on separate connections admit exactly the limit, whatever the
// interleaving: the script runs atomically in Redis. On a Redis Cluster a
// multi-key check runs in one slot.
func TestConcurrentExact(t *testing.T) {
	t.Run("Redis", func(t *testing.T) {
		srv := redistest.New(t)
		testConcurrentExact(t, func() redis.UniversalClient {
			opt, _ := redis.ParseURL(srv.URL)
			return redis.NewClient(opt)
		})
	})
	t.Run("Cluster", func(t *testing.T) {
		cl := redistest.NewCluster(t)
		testConcurrentExact(t, func() redis.UniversalClient {
			co, _, _ := redisstore.ParseURL(cl.URL())
			return redis.NewClusterClient(co)
		})
	})
}

func testConcurrentExact(t *testing.T, dial func() redis.UniversalClient) {
	var deciders []*redisrl.Decider
	for range 3 {
		c := dial()
		t.Cleanup(func() { c.Close() })
		deciders = append(deciders, newDecider(t, c, newLimiter(t, nil), nil))
	}
	// Two keys of different slots in one check: all-or-nothing, exactly
	// the tighter limit admitted.
	perUser := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: 7, Period: time.Hour}
	perIP := ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Limit: 100, Period: time.Hour}
	admitted := 0
	for i := range 20 {
		s, err := deciders[i%3].CheckMultiContext(t.Context(), []ratelimit.Hit{{Key: "user:1", Limit: perUser, Cost: 1}, {Key: "ip:10.0.0.1", Limit: perIP, Cost: 1}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if s.Allowed {
			admitted++
		}
	}
	if admitted != 7 {
		t.Errorf("multi-key check: %d admitted, want 7", admitted)
	}
	for _, alg := range algorithms {
		lim := ratelimit.Limit{Algorithm: alg, Limit: 50, Period: time.Hour}
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for g := range 12 {
			wg.Go(func() {
				d := deciders[g%len(deciders)]
				for range 20 {
					s, err := d.CheckMultiContext(t.Context(), []ratelimit.Hit{{Key: "shared", Limit: lim, Cost: 1}}, nil)
					if err != nil {
						t.Error(err)
						return
					}
					if s.Allowed {
						admitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if n := admitted.Load(); n != 50 {
			t.Errorf("%s: %d of 240 checks admitted, want exactly 50", alg, n)
		}
	}
}

// With Redis' clock, state expires in Redis when it is fresh again.
func TestTTL(t *testing.T) {
	rdb := newClient(t)
	d := newDecider(t, rdb, newLimiter(t, nil), nil)
	lim := ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Limit: 10, Period: 10 * time.Second}
	if _, err := d.CheckMultiContext(t.Context(), []ratelimit.Hit{{Key: "user:1", Limit: lim, Cost: 3}}, nil); err != nil {
		t.Fatal(err)
	}
	key := redisrl.StateKey(redisrl.Tag("user:1"), "user:1", lim)
	ttl, err := rdb.PTTL(t.Context(), key).Result()
	if err != nil || ttl <= 2*time.Second || ttl > 3*time.Second {
		t.Fatalf("PTTL %s = %v, %v; want the 3 s until the bucket is full again", key, ttl, err)
	}
	// A query (cost 0) of fresh state stores nothing.
	log := ratelimit.Limit{Algorithm: ratelimit.SlidingLog, Limit: 5, Period: time.Minute}
	if _, err := d.CheckMultiContext(t.Context(), []ratelimit.Hit{{Key: "user:2", Limit: log, Cost: 0}}, nil); err != nil {
		t.Fatal(err)
	}
	if n, _ := rdb.Exists(t.Context(), redisrl.StateKey("user:2", "user:2", log)).Result(); n != 0 {
		t.Fatal("a query of fresh state created a key")
	}
	if _, err := d.CheckMultiContext(t.Context(), []ratelimit.Hit{{Key: "user:2", Limit: log, Cost: 2}}, nil); err != nil {
		t.Fatal(err)
	}
	sk := redisrl.StateKey("user:2", "user:2", log)
	for _, k := range []string{sk, "rlog" + strings.TrimPrefix(sk, "rl")} {
		if ttl, err := rdb.PTTL(t.Context(), k).Result(); err != nil || ttl <= 59*time.Second || ttl > time.Minute {
			t.Errorf("PTTL %s = %v, %v; want about 1 minute", k, ttl, err)
		}
	}
}

func TestKeyLayout(t *testing.T) {
	lim := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: 1, Period: time.Second}
	id := fmt.Sprintf("%016x", lim.ID())
	for _, c := range []struct{ first, key, want string }{
		{"user:1", "user:1", "rl:{user:1}:" + id},
		{"user:1", "ip:9", "rl:{user:1}:" + id + ":ip:9"},
		{"{u1}:api", "{u1}:api", "rl:{u1}:" + id + ":{u1}:api"},
		{"{u1}:api", "u1", "rl:{u1}:" + id},
		{"a}b", "a}b", "rl:{a%7Db}:" + id},
		{"50%", "50%", "rl:{50%25}:" + id},
		{"{}x", "{}x", "rl:{{%7Dx}:" + id},
	} {
		if got := redisrl.StateKey(redisrl.Tag(c.first), c.key, lim); got != c.want {
			t.Errorf("StateKey(Tag(%q), %q) = %q, want %q", c.first, c.key, got, c.want)
		}
	}
}

// With Redis down a check fails with ErrDeciderUnavailable (HTTP 503,
// RESP TRYAGAIN) instead of being decided approximately, and works again
// once Redis is back.
func TestRedisDown(t *testing.T) {
	srv := redistest.New(t)
	opt, _ := redis.ParseURL(srv.URL)
	opt.MaxRetries = -1
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	d, err := redisrl.New(redisrl.Config{Client: c, Local: newLimiter(t, nil), Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	hits := []ratelimit.Hit{{Key: "k", Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: 5, Period: time.Minute}, Cost: 1}}
	if _, err := d.CheckMultiContext(t.Context(), hits, nil); err != nil {
		t.Fatal(err)
	}
	srv.Stop(t)
	_, err = d.CheckMultiContext(t.Context(), hits, nil)
	if !errors.Is(err, ratelimit.ErrDeciderUnavailable) {
		t.Fatalf("Redis down: %v, want ErrDeciderUnavailable", err)
	}
	if msg := ratelimitapi.RESPError(err); !strings.HasPrefix(msg, "TRYAGAIN ") {
		t.Errorf("RESP error %q, want TRYAGAIN", msg)
	}
	rec := httptest.NewRecorder()
	ratelimitapi.NewHTTPHandler(d, ratelimitapi.HTTPOptions{}).ServeHTTP(rec, httptest.NewRequest("POST", "/ratelimit/check",
		strings.NewReader(`{"key":"k","limits":[{"algorithm":"fixed_window","limit":5,"period":"1m"}]}`)))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("HTTP check with Redis down: %d %s", rec.Code, rec.Body)
	}
	srv.Start(t)
	if _, err := d.CheckMultiContext(t.Context(), hits, nil); err != nil {
		t.Fatalf("after Redis is back: %v", err)
	}
}

// redisTag is the part of a Redis key that Redis Cluster hashes.
func redisTag(k string) string {
	if i := strings.IndexByte(k, '{'); i >= 0 {
		if j := strings.IndexByte(k[i+1:], '}'); j > 0 {
			return k[i+1 : i+1+j]
		}
	}
	return k
}

// The key layout is injective (two (tag, key) pairs share a Redis key only
// if they are equal) and every key of a check hashes to its tag's slot,
// whatever braces and percent signs the keys hold.
func TestKeyLayoutProperties(t *testing.T) {
	lim := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: 1, Period: time.Second}
	key := rapid.StringOfN(rapid.SampledFrom([]rune{'a', 'b', '{', '}', '%', ':', '7', 'D'}), 1, 8, -1)
	rapid.Check(t, func(rt *rapid.T) {
		f1, k1, f2, k2 := key.Draw(rt, "f1"), key.Draw(rt, "k1"), key.Draw(rt, "f2"), key.Draw(rt, "k2")
		t1, t2 := redisrl.Tag(f1), redisrl.Tag(f2)
		s1, s2 := redisrl.StateKey(t1, k1, lim), redisrl.StateKey(t2, k2, lim)
		if (s1 == s2) != (t1 == t2 && k1 == k2) {
			rt.Fatalf("(%q, %q) -> %q and (%q, %q) -> %q", t1, k1, s1, t2, k2, s2)
		}
		if redisTag(s1) != t1 || redisTag(redisrl.StateKey(t1, f1, lim)) != t1 {
			rt.Fatalf("key %q of tag %q hashes on %q", s1, t1, redisTag(s1))
		}
		if strings.Contains(t1, "}") {
			rt.Fatalf("tag %q holds a '}'", t1)
		}
	})
}

// A sliding log longer than the script reads at once (64 hits) decides
// like the Limiter: denied checks of every size find their retry time deep
// in the log.
func TestSlidingLogLong(t *testing.T) {
	clk := new(clock)
	clk.ns.Store(time.Date(2026, 3, 1, 0, 0, 0, 123, time.UTC).UnixNano())
	mem := newLimiter(t, clk.Now)
	red := newDecider(t, newClient(t), newLimiter(t, clk.Now), clk.Now)
	lim := ratelimit.Limit{Algorithm: ratelimit.SlidingLog, Limit: 500, Period: 10 * time.Second}
	check := func(cost int64) {
		t.Helper()
		hits := []ratelimit.Hit{{Key: "log", Limit: lim, Cost: cost}}
		want, werr := mem.CheckMulti(hits, nil)
		got, gerr := red.CheckMultiContext(t.Context(), hits, nil)
		if werr != nil || gerr != nil || want != got {
			t.Fatalf("cost %d at %d: memory %+v %v, redis %+v %v", cost, clk.ns.Load(), want, werr, got, gerr)
		}
	}
	for range 450 {
		check(1) // one hit per instant
		clk.Advance(7 * time.Millisecond)
	}
	for _, cost := range []int64{60, 51, 100, 300, 500, 1, 0} {
		check(cost)
	}
	clk.Advance(7 * time.Second)
	for _, cost := range []int64{400, 200, 120, 1} {
		check(cost)
		clk.Advance(time.Millisecond)
	}
}
