package backendtest_test

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/api/ratelimitapi"
	"github.com/counterd/counterd/internal/backendtest"
	"github.com/counterd/counterd/internal/cluster/node"
	"github.com/counterd/counterd/internal/cluster/node/nodetest"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/ratelimit"
	"github.com/counterd/counterd/internal/ratelimit/redisrl"
	"github.com/counterd/counterd/internal/testutil/pgtest"
	"github.com/counterd/counterd/internal/testutil/redistest"
	"github.com/counterd/counterd/internal/tiered"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// limiter is an in-memory rate limiter on clk, closed when t ends;
// keepKeys as a cluster node's (its state moves with the ring).
// tab, when not nil, is the engine index it keeps its state in (as the
// server wires it).
func limiter(t *testing.T, clk *backendtest.Clock, keepKeys bool, tab *engine.Limiters) *ratelimit.Limiter {
	l, err := ratelimit.New(ratelimit.Config{Clock: clk.Now, EvictInterval: -1, KeepKeys: keepKeys, Table: tab})
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
		fs := backendtest.NewDiskFS()
		cfg.FS, cfg.DiskCheckInterval = fs, 10*time.Millisecond
		e, err := engine.Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		b := engine.Local(e)
		// The engine's hot tier is its memory (index, idempotency table):
		// a restart keeps only what is on disk, which is what a crash
		// leaves of an acknowledged sync write (its change and record
		// were synced before the ack).
		// Each loss restarts the engine the last one left (the hottier
		// cases lose it one after the other).
		cur := e
		lose := func(lt testing.TB, _ string) contract.Backend {
			if err := cur.Close(); err != nil {
				lt.Fatal(err)
			}
			e2, err := engine.Open(cfg)
			if err != nil {
				lt.Fatal(err)
			}
			t.Cleanup(func() { _ = e2.Close() })
			cur = e2
			return engine.Local(e2)
		}
		return backendtest.Setup{
			LoseHotTier:         lose,
			Backend:             b,
			Clock:               clk,
			ExpiryFollowsClock:  true,
			Checker:             limiter(t, clk, false, e.Limiters()),
			CheckerFollowsClock: true,
			Quotas:              b.(contract.QuotaBackend),
			QuotaExpiryBound:    time.Second, // the janitor's pass
			FillDisk:            backendtest.FillEngines([]*backendtest.DiskFS{fs}, []*engine.Engine{e}),
		}
	})
}

// TestCluster runs the suite on a 3-node cluster, sending each call to the
// next node. Rate limits: each node's Router decides on the key's owner,
// forwarding to the owner's rate-limit HTTP API (as the server wires it).
func TestCluster(t *testing.T) {
	var routers []*ratelimit.Router
	defer func() {
		var st ratelimit.RouterStats
		for _, r := range routers {
			s := r.Stats()
			st.Local, st.Forwarded, st.Fallback = st.Local+s.Local, st.Forwarded+s.Forwarded, st.Fallback+s.Fallback
		}
		if st == (ratelimit.RouterStats{}) {
			return // the rate-limit subtests did not run (-run)
		}
		if st.Forwarded == 0 || st.Local == 0 || st.Fallback != 0 {
			t.Errorf("router stats %+v: want checks decided on their owners, some forwarded, none by fallback", st)
		}
	}()
	backendtest.Run(t, func(t *testing.T) backendtest.Setup {
		clk := backendtest.NewClock(backendtest.Start())
		ids := []string{"n1", "n2", "n3"}
		lims := map[string]*ratelimit.Limiter{}
		for _, id := range ids {
			lims[id] = limiter(t, clk, true, nil)
		}
		fss := map[string]*backendtest.DiskFS{}
		c := nodetest.Start(t, nodetest.Options{
			Clock: clk.Now,
			Engine: func(id string, c *engine.Config) {
				fss[id] = backendtest.NewDiskFS()
				c.FS, c.DiskCheckInterval = fss[id], 10*time.Millisecond
			},
			HTTP: func(id string) http.Handler {
				return ratelimitapi.NewHTTPHandler(lims[id], ratelimitapi.HTTPOptions{})
			},
			// As the server wires it: limiter state follows the ring.
			BeforeStart: func(id string, n *node.Node) { n.SetRateLimit(node.RateLimit{Limiter: lims[id]}) },
		}, ids...)
		var bs []contract.Backend
		var cs []ratelimit.Checker
		for i, n := range c.Nodes() {
			bs = append(bs, n)
			r, err := ratelimit.NewRouter(lims[ids[i]], ratelimit.RouterConfig{Owner: n.KeyOwner, Fallback: ratelimit.FallbackError})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = r.Close() })
			cs, routers = append(cs, r), append(routers, r)
		}
		var disks []*backendtest.DiskFS
		for _, id := range ids {
			disks = append(disks, fss[id])
		}
		// A node's hot tier is its memory: the owner of the id restarts
		// as after a crash (the others detect it dead, then it rejoins on
		// its data).
		lose := func(t testing.TB, id string) contract.Backend {
			owner := c.Nodes()[0].Ring().Owner(id)
			i := slices.Index(ids, owner)
			if i < 0 {
				t.Fatalf("owner %q of %q is not a node", owner, id)
			}
			c.Restart(t, i)
			var nodes []contract.Backend
			for _, n := range c.Nodes() {
				nodes = append(nodes, n)
			}
			return backendtest.RoundRobin(nodes...)
		}
		return backendtest.Setup{
			LoseHotTier:         lose,
			Backend:             backendtest.RoundRobin(bs...),
			Clock:               clk,
			ExpiryFollowsClock:  true,
			Checker:             backendtest.RoundRobinChecker(cs...),
			CheckerFollowsClock: true,
			FillDisk:            backendtest.FillEngines(disks, c.Engines()),
			Quotas:              clusterQuotas(c.Nodes()),
			QuotaExpiryBound:    2 * time.Second, // the owner's janitor pass, then the count's write
		}
	})
}

// TestTiered runs the suite on tiered over a private Redis; its hot tier
// is lost by a restart of that Redis, which comes back empty.
func TestTiered(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backendtest.Setup {
		rd := redistest.New(t)
		s := tieredSetup(t, rd.URL)
		s.LoseHotTier = loseRedis(rd, &s)
		return s
	})
}

// loseRedis loses the hot tier of s, a setup over rd: a restart of rd,
// which comes back empty, or a FLUSHALL when rd is an external server.
func loseRedis(rd *redistest.Server, s *backendtest.Setup) func(testing.TB, string) contract.Backend {
	return func(t testing.TB, _ string) contract.Backend {
		if rd.External() {
			rd.FlushAll(t)
		} else {
			rd.Restart(t)
		}
		return s.Backend
	}
}

// TestTieredRedisCluster runs the suite on tiered over a Redis Cluster of
// three masters; its hot tier is lost by a FLUSHALL of every master.
func TestTieredRedisCluster(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backendtest.Setup {
		cl := redistest.NewCluster(t)
		s := tieredSetup(t, cl.URL())
		s.LoseHotTier = func(t testing.TB, _ string) contract.Backend {
			cl.FlushAll(t)
			return s.Backend
		}
		return s
	})
}

// TestTieredTwoNodes runs the suite on two tiered nodes sharing one
// private Redis and one database, each call going to the next node in
// turn, as clients behind a load balancer do: what one node writes,
// deletes or flushes, the other must see (a delete is ordered against the
// other node's read-through and write-behind by the counter's lives,
// docs/redis-tier.md "Deletes and lives"). Its hot tier is lost by a
// restart of that Redis.
func TestTieredTwoNodes(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backendtest.Setup {
		rd := redistest.New(t)
		dsn := pgtest.DSN(t)
		a := tieredSetupOn(t, rd.URL, dsn, "a", nil)
		b := tieredSetupOn(t, rd.URL, dsn, "b", a.Clock)
		s := a
		s.Backend = backendtest.RoundRobin(a.Backend, b.Backend)
		// Exact across nodes: the data path (Redis scripts, lives,
		// write-behind). Not: what each node keeps for itself.
		config := "rollup specs are each node's configuration"
		s.SkipGroups = map[string]string{
			"errors":     config,
			"rollups":    config,
			"eventtime":  config,
			"quotas":     "quotas are each node's configuration",
			"aggregates": "listings and aggregates read PostgreSQL and the node's own unflushed writes: another node's writes show after its flush (docs/redis-tier.md)",
		}
		s.LoseHotTier = loseRedis(rd, &s)
		return s
	})
}

// tieredSetup opens the tiered backend on redisURL and a fresh database.
// Redis and PostgreSQL expire by the wall clock. Rate limits are decided
// in Redis (redisrl) at the suite's clock.
func tieredSetup(t *testing.T, redisURL string) backendtest.Setup {
	return tieredSetupOn(t, redisURL, pgtest.DSN(t), "t", nil)
}

// tieredSetupOn opens a tiered node named node on redisURL and the
// database dsn, at clk (a new clock when nil).
func tieredSetupOn(t *testing.T, redisURL, dsn, node string, clk *backendtest.Clock) backendtest.Setup {
	if clk == nil {
		clk = backendtest.NewClock(backendtest.Start())
	}
	o := tiered.Options{RedisURL: redisURL, PostgresDSN: dsn, FlushInterval: 50 * time.Millisecond, NodeID: node, Now: clk.Now}
	o.Postgres.MaintenanceInterval = -1
	b, err := tiered.Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	// Two deciders, as two counterd nodes would have, checks alternating
	// between them: one limit for both.
	var cs []ratelimit.Checker
	for range 2 {
		d, err := redisrl.New(redisrl.Config{Client: b.Redis().Client(), Local: limiter(t, clk, false, nil), Clock: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Close() })
		cs = append(cs, d)
	}
	return backendtest.Setup{Backend: b, Clock: clk, Checker: backendtest.RoundRobinChecker(cs...), CheckerFollowsClock: true,
		// Counted in Redis; an expired key's room returns at the next
		// sweep (tiered.Options.QuotaSweepInterval, 1 s).
		Quotas: b, QuotaExpiryBound: 2 * time.Second}
}
