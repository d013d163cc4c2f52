package backendtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/backendtest"
	"github.com/counterd/counterd/internal/cluster/node/nodetest"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/ratelimit"
	"github.com/counterd/counterd/internal/testutil/pgtest"
	"github.com/counterd/counterd/internal/testutil/redistest"
	"github.com/counterd/counterd/internal/tiered"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// limiter is an in-memory rate limiter on clk, closed when t ends.
func limiter(t *testing.T, clk *backendtest.Clock) *ratelimit.Limiter {
	l, err := ratelimit.New(ratelimit.Config{Clock: clk.Now, EvictInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func TestEmbedded(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backendtest.Setup {
		clk := backendtest.NewClock(backendtest.Start())
		cfg := engine.DefaultConfig()
		cfg.Dir, cfg.Clock = t.TempDir(), clk.Now
		e, err := engine.Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		return backendtest.Setup{
			Backend:             engine.Local(e),
			Clock:               clk,
			ExpiryFollowsClock:  true,
			Checker:             limiter(t, clk),
			CheckerFollowsClock: true,
		}
	})
}

func TestCluster(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backendtest.Setup {
		clk := backendtest.NewClock(backendtest.Start())
		c := nodetest.Start(t, nodetest.Options{Clock: clk.Now}, "n1", "n2", "n3")
		var bs []engine.Backend
		for _, n := range c.Nodes() {
			bs = append(bs, n)
		}
		return backendtest.Setup{
			Backend:            backendtest.RoundRobin(bs...),
			Clock:              clk,
			ExpiryFollowsClock: true,
		}
	})
}

func TestTiered(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backendtest.Setup {
		return tieredSetup(t, redistest.New(t).URL)
	})
}

// TestTieredRedisCluster runs the suite on tiered over a Redis Cluster of
// three masters.
func TestTieredRedisCluster(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backendtest.Setup {
		return tieredSetup(t, redistest.NewCluster(t).URL())
	})
}

// tieredSetup opens the tiered backend on redisURL and a fresh database.
// Redis and PostgreSQL expire by the wall clock.
func tieredSetup(t *testing.T, redisURL string) backendtest.Setup {
	clk := backendtest.NewClock(backendtest.Start())
	o := tiered.Options{RedisURL: redisURL, PostgresDSN: pgtest.DSN(t), FlushInterval: 50 * time.Millisecond, NodeID: "t", Now: clk.Now}
	o.Postgres.MaintenanceInterval = -1
	b, err := tiered.Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return backendtest.Setup{Backend: b, Clock: clk}
}
