package node

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/counterd/counterd/internal/cluster/membership"
	"github.com/counterd/counterd/internal/engine"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Pebble and gRPC park a few goroutines process-wide.
		goleak.IgnoreAnyFunction("github.com/cockroachdb/pebble/internal/invariants.init.0.func1"),
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
	)
}

// testCluster is an in-process cluster on loopback: each node has its own
// engine in a temporary directory, gossip and gRPC on 127.0.0.1:0, and fast
// gossip timings.
type testCluster struct {
	t     testing.TB
	mu    sync.Mutex
	nodes map[string]*testNode
	// rl gives every node started from now on a Limiter and a PolicyLog
	// (ratelimit_test.go).
	rl bool
	// rlReplication is Config.LimitReplication (0: the default).
	rlReplication time.Duration
	// antiEntropy is Config.AntiEntropyInterval (0: 300 ms).
	antiEntropy time.Duration
	// tune, when set, adjusts every node's Config before New (lease_test.go).
	tune func(*Config)
	// wrapStore, when set, wraps every node's store (epoch_test.go).
	wrapStore func(Store) Store
	// advertise, when set, is the gRPC address node id gossips for its
	// listener at addr (a proxy in front of it: blackhole_test.go).
	advertise func(id, addr string) string
	// clock, when set, is every engine's clock (digestcache_test.go).
	clock func() time.Time
}

type testNode struct {
	id   string
	dir  string
	eng  *engine.Engine
	n    *Node
	gs   *grpc.Server
	rl   RateLimit // with testCluster.rl
	once sync.Once
}

func newTestCluster(t testing.TB, ids ...string) *testCluster {
	return startTestCluster(&testCluster{t: t, nodes: map[string]*testNode{}}, ids...)
}

// newClusterNoAntiEntropy is newTestCluster without anti-entropy (an hour
// apart), for tests that play a partition or a lost push by hand:
// anti-entropy would heal it behind their back.
func newClusterNoAntiEntropy(t testing.TB, ids ...string) *testCluster {
	return startTestCluster(&testCluster{t: t, nodes: map[string]*testNode{}, antiEntropy: time.Hour}, ids...)
}

func startTestCluster(c *testCluster, ids ...string) *testCluster {
	t := c.t
	t.Cleanup(c.closeAll)
	for _, id := range ids {
		c.start(id, "")
	}
	c.waitRing(ids...)
	return c
}

func testLogger(id string) *slog.Logger {
	if testing.Verbose() && os.Getenv("CLUSTER_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("test_node", id)
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// start starts node id (in dir, or a new temporary directory), joining the
// running nodes.
func (c *testCluster) start(id, dir string) *testNode {
	t := c.t
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	ecfg := engine.DefaultConfig()
	ecfg.Dir, ecfg.NodeID, ecfg.Logger = dir, id, testLogger(id)
	if c.clock != nil {
		ecfg.Clock = c.clock
	}
	eng, err := engine.Open(ecfg)
	if err != nil {
		t.Fatal(err)
	}
	var join []string
	c.mu.Lock()
	for _, o := range c.nodes {
		join = append(join, o.n.members.Load().Addr())
	}
	c.mu.Unlock()
	ae := c.antiEntropy
	if ae == 0 {
		ae = 300 * time.Millisecond
	}
	cfg := Config{
		NodeID:              id,
		Gossip:              "127.0.0.1:0",
		Join:                join,
		AntiEntropyInterval: ae,
		RejoinInterval:      200 * time.Millisecond,
		RPCTimeout:          2 * time.Second,
		FenceTimeout:        2 * time.Second,
		LimitReplication:    c.rlReplication,
		// Long enough that a loaded -race run does not lose leases to
		// slow renewals; a new owner then waits up to about a second
		// after detection for a killed owner's lease.
		LeaseDuration: 2 * time.Second,
		Membership: membership.Config{
			// Fast, but not so fast that a loaded -race run suspects
			// healthy nodes: a killed node is dead in about a second.
			ProbeInterval:    200 * time.Millisecond,
			ProbeTimeout:     150 * time.Millisecond,
			GossipInterval:   20 * time.Millisecond,
			PushPullInterval: 500 * time.Millisecond,
			SuspicionMult:    3,
			TCPTimeout:       time.Second,
			DeadRetention:    time.Second,
		},
		Logger: testLogger(id),
	}
	if c.tune != nil {
		c.tune(&cfg)
	}
	store := EngineStore(eng)
	if c.wrapStore != nil {
		store = c.wrapStore(store)
	}
	n, err := New(cfg, store)
	if err != nil {
		t.Fatal(err)
	}
	var rl RateLimit
	if c.rl {
		rl = newTestRateLimit(t, eng, id)
		n.SetRateLimit(rl)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	n.Register(gs)
	go func() { _ = gs.Serve(lis) }()
	grpcAddr := lis.Addr().String()
	if c.advertise != nil {
		grpcAddr = c.advertise(id, grpcAddr)
	}
	if err := n.Start(Meta{GRPC: grpcAddr, HTTP: "127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	tn := &testNode{id: id, dir: dir, eng: eng, n: n, gs: gs, rl: rl}
	c.mu.Lock()
	c.nodes[id] = tn
	c.mu.Unlock()
	return tn
}

// node returns the running node id.
func (c *testCluster) node(id string) *testNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id]
}

// running returns the running nodes, sorted by id.
func (c *testCluster) running() []*testNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*testNode
	for _, n := range c.nodes {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b *testNode) int {
		if a.id < b.id {
			return -1
		}
		if a.id > b.id {
			return 1
		}
		return 0
	})
	return out
}

// kill stops node id without leaving: the others detect it as dead.
func (c *testCluster) kill(id string) {
	tn := c.remove(id)
	tn.shutdown(nil)
}

// leave drains node id (graceful leave with handoff) and stops it.
func (c *testCluster) leave(id string) {
	tn := c.remove(id)
	tn.shutdown(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := tn.n.Drain(ctx); err != nil {
			c.t.Errorf("drain %s: %v", id, err)
		}
	})
}

func (c *testCluster) remove(id string) *testNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	tn := c.nodes[id]
	delete(c.nodes, id)
	return tn
}

func (tn *testNode) shutdown(drain func()) {
	tn.once.Do(func() {
		if drain != nil {
			drain()
		}
		_ = tn.n.Close()
		tn.gs.Stop()
		if tn.rl.Limiter != nil {
			_ = tn.rl.Limiter.Close()
		}
		_ = tn.eng.Close()
	})
}

func (c *testCluster) closeAll() {
	for _, tn := range c.running() {
		c.remove(tn.id)
		tn.shutdown(nil)
	}
}

// waitRing waits until every running node's ring holds exactly ids.
func (c *testCluster) waitRing(ids ...string) {
	c.t.Helper()
	want := slices.Clone(ids)
	slices.Sort(want)
	eventually(c.t, 10*time.Second, "rings converge", func() bool {
		for _, tn := range c.running() {
			if !slices.Equal(tn.n.Ring().Nodes(), want) {
				return false
			}
		}
		return true
	})
}

// eventually polls cond every 10ms until it holds or within passes.
func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
