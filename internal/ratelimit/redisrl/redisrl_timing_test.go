package redisrl_test

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/counterd/counterd/internal/ratelimit"
	"github.com/counterd/counterd/internal/testutil/redistest"
)

// BenchmarkCheck compares checks/s of the embedded decider (the in-memory
// Limiter) with the tiered one (one script per check on a private Redis,
// and on a private 3-master Redis Cluster), in the same run: 16
// goroutines per P over 64Ki keys, one limit per check ("multi": a
// per-second token bucket and a per-day sliding window atomically).
func BenchmarkCheck(b *testing.B) {
	single := func() redis.UniversalClient {
		opt, _ := redis.ParseURL(redistest.New(b).URL)
		opt.PoolSize = 64
		c := redis.NewClient(opt)
		b.Cleanup(func() { c.Close() })
		return c
	}
	cases := []struct {
		name string
		hits func(key string) []ratelimit.Hit
	}{
		{"fixed_window", one(ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: 1 << 30, Period: time.Minute})},
		{"sliding_window", one(ratelimit.Limit{Algorithm: ratelimit.SlidingWindow, Limit: 1 << 30, Period: time.Minute})},
		{"sliding_log", one(ratelimit.Limit{Algorithm: ratelimit.SlidingLog, Limit: 1000, Period: time.Second})},
		{"token_bucket", one(ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Limit: 1e6, Period: time.Second, Burst: 1 << 30})},
		{"multi", func(key string) []ratelimit.Hit {
			return []ratelimit.Hit{
				{Key: key, Limit: ratelimit.Limit{Name: "s", Algorithm: ratelimit.TokenBucket, Limit: 1e6, Period: time.Second, Burst: 1 << 30}, Cost: 1},
				{Key: key, Limit: ratelimit.Limit{Name: "d", Algorithm: ratelimit.SlidingWindow, Limit: 1 << 40, Period: 24 * time.Hour}, Cost: 1},
			}
		}},
	}
	deciders := []struct {
		name string
		open func(b *testing.B) ratelimit.Checker
	}{
		{"embedded", func(b *testing.B) ratelimit.Checker { return newLimiter(b, nil) }},
		{"redis", func(b *testing.B) ratelimit.Checker { return newDecider(b, single(), newLimiter(b, nil), nil) }},
		{"cluster", func(b *testing.B) ratelimit.Checker {
			c := newClusterClient(b)
			return newDecider(b, c, newLimiter(b, nil), nil)
		}},
	}
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%08d", i)
	}
	for _, d := range deciders {
		b.Run(d.name, func(b *testing.B) {
			c := d.open(b)
			for _, tc := range cases {
				b.Run(tc.name, func(b *testing.B) {
					var seq atomic.Uint64
					b.ReportAllocs()
					b.SetParallelism(16)
					b.ResetTimer()
					b.RunParallel(func(pb *testing.PB) {
						i := seq.Add(1 << 20)
						for pb.Next() {
							hits := tc.hits(keys[i&(1<<16-1)])
							i++
							if _, err := c.CheckMultiContext(b.Context(), hits, nil); err != nil {
								b.Error(err)
								return
							}
						}
					})
					b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "checks/s")
				})
			}
		})
	}
}

func one(lim ratelimit.Limit) func(string) []ratelimit.Hit {
	return func(key string) []ratelimit.Hit { return []ratelimit.Hit{{Key: key, Limit: lim, Cost: 1}} }
}

// BenchmarkRedisBytesPerKey reports Redis' memory (INFO used_memory) per
// active (key, limit) state: 10,000 keys of 13 bytes, one hit each.
func BenchmarkRedisBytesPerKey(b *testing.B) {
	for _, lim := range []ratelimit.Limit{
		{Algorithm: ratelimit.FixedWindow, Limit: 100, Period: time.Hour},
		{Algorithm: ratelimit.SlidingWindow, Limit: 100, Period: time.Hour},
		{Algorithm: ratelimit.SlidingLog, Limit: 100, Period: time.Hour},
		{Algorithm: ratelimit.TokenBucket, Limit: 100, Period: time.Hour},
	} {
		b.Run(lim.Algorithm.String(), func(b *testing.B) {
			opt, _ := redis.ParseURL(redistest.New(b).URL)
			c := redis.NewClient(opt)
			b.Cleanup(func() { c.Close() })
			d := newDecider(b, c, newLimiter(b, nil), nil)
			const n = 10000
			for b.Loop() {
				if err := c.FlushAll(b.Context()).Err(); err != nil {
					b.Fatal(err)
				}
				before := usedMemory(b, c)
				for i := range n {
					if _, err := d.CheckMultiContext(b.Context(), []ratelimit.Hit{{Key: fmt.Sprintf("user:%08d", i), Limit: lim, Cost: 1}}, nil); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(usedMemory(b, c)-before)/n, "B/key")
			}
		})
	}
}

func usedMemory(b *testing.B, c redis.UniversalClient) int64 {
	s, err := c.Info(b.Context(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(s, "\r\n") {
		if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("no used_memory in INFO memory")
	return 0
}
