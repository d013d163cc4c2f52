// Package nodetest runs an in-process peer cluster on loopback for tests
// outside package node: each node has its own embedded engine in a
// temporary directory, gossip and gRPC on 127.0.0.1:0 and fast gossip
// timings. It is the exported form of package node's own test cluster
// (helpers_test.go), which cannot import it (import cycle).
package nodetest

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/counterd/counterd/internal/cluster/membership"
	"github.com/counterd/counterd/internal/cluster/node"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
)

// Options tune the cluster. The zero value is valid.
type Options struct {
	// Clock, when set, is every engine's clock (Config.Clock).
	Clock func() time.Time
	// Logger receives the nodes' logs (default: discarded).
	Logger *slog.Logger
	// HTTP, when set, returns the HTTP handler of node id (such as the
	// rate-limit API that ratelimit.Router forwards checks to); the node
	// serves it on a loopback port and gossips that address. Default: no
	// HTTP server.
	HTTP func(id string) http.Handler
	// BeforeStart, when set, is called with each node before it starts
	// (for what must be attached first, such as Node.SetRateLimit).
	BeforeStart func(id string, n *node.Node)
	// Engine, when set, adjusts node id's engine configuration before it
	// opens (such as a filesystem that can be made full).
	Engine func(id string, c *engine.Config)
}

// Cluster is a running test cluster. It is stopped by t.Cleanup; its
// methods are safe for concurrent use.
type Cluster struct {
	t    testing.TB
	opts Options
	log  *slog.Logger

	mu    sync.Mutex
	ids   []string
	nodes []*node.Node
	engs  []*engine.Engine
	dirs  []string
	stops []func() // stop node i (node, gRPC server, engine); once
}

// Start starts one node per id, each joining those started before it, and
// waits (up to 10 s) until every node's ring holds all ids. It fails t on
// any error.
func Start(t testing.TB, opts Options, ids ...string) *Cluster {
	t.Helper()
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c := &Cluster{t: t, opts: opts, log: log}
	for _, id := range ids {
		n, eng, dir, stop := c.startNode(id, t.TempDir(), c.joinAddrs(-1))
		c.ids, c.nodes, c.engs = append(c.ids, id), append(c.nodes, n), append(c.engs, eng)
		c.dirs, c.stops = append(c.dirs, dir), append(c.stops, stop)
	}
	c.waitRing(t, ids)
	return c
}

// joinAddrs are the gossip addresses of the running nodes but skip.
func (c *Cluster) joinAddrs(skip int) []string {
	var join []string
	for i, n := range c.nodes {
		if i != skip {
			join = append(join, gossipAddr(n))
		}
	}
	return join
}

// startNode starts node id on the engine data in dir, joining join.
func (c *Cluster) startNode(id, dir string, join []string) (*node.Node, *engine.Engine, string, func()) {
	t, opts, log := c.t, c.opts, c.log
	t.Helper()
	ecfg := engine.DefaultConfig()
	ecfg.Dir, ecfg.NodeID, ecfg.Logger, ecfg.Clock = dir, id, log.With("node", id), opts.Clock
	if opts.Engine != nil {
		opts.Engine(id, &ecfg)
	}
	eng, err := engine.Open(ecfg)
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(node.Config{
		NodeID:              id,
		Gossip:              "127.0.0.1:0",
		Join:                join,
		AntiEntropyInterval: 300 * time.Millisecond,
		RejoinInterval:      200 * time.Millisecond,
		RPCTimeout:          2 * time.Second,
		FenceTimeout:        2 * time.Second,
		Membership: membership.Config{
			// Fast, but slow enough that a loaded -race run does not
			// suspect healthy nodes.
			ProbeInterval:    200 * time.Millisecond,
			ProbeTimeout:     150 * time.Millisecond,
			GossipInterval:   20 * time.Millisecond,
			PushPullInterval: 500 * time.Millisecond,
			SuspicionMult:    3,
			TCPTimeout:       time.Second,
			DeadRetention:    time.Second,
		},
		Logger: log.With("node", id),
	}, node.EngineStore(eng))
	if err != nil {
		_ = eng.Close()
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	n.Register(gs)
	go func() { _ = gs.Serve(lis) }()
	var once sync.Once
	var hs *httptest.Server
	stop := func() {
		once.Do(func() {
			_ = n.Close()
			gs.Stop()
			if hs != nil {
				hs.Close()
			}
			_ = eng.Close()
		})
	}
	t.Cleanup(stop)
	meta := node.Meta{GRPC: lis.Addr().String(), HTTP: "127.0.0.1:1"}
	if opts.HTTP != nil {
		hs = httptest.NewServer(opts.HTTP(id))
		meta.HTTP = hs.Listener.Addr().String()
	}
	if opts.BeforeStart != nil {
		opts.BeforeStart(id, n)
	}
	if err := n.Start(meta); err != nil {
		t.Fatal(err)
	}
	return n, eng, dir, stop
}

// Restart stops node i without leaving (as a crash: the others detect it
// dead; what it held in memory is gone), waits until the others' rings
// dropped it, starts it again on its data and waits until every ring
// holds all nodes. Nodes and Engines return the new node and engine.
func (c *Cluster) Restart(t testing.TB, i int) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stops[i]()
	var others []*node.Node
	var rest []string
	for j, n := range c.nodes {
		if j != i {
			others, rest = append(others, n), append(rest, c.ids[j])
		}
	}
	waitRings(t, others, rest)
	n, eng, dir, stop := c.startNode(c.ids[i], c.dirs[i], c.joinAddrs(i))
	c.nodes[i], c.engs[i], c.dirs[i], c.stops[i] = n, eng, dir, stop
	waitRings(t, c.nodes, c.ids)
}

// gossipAddr is n's bound gossip address.
func gossipAddr(n *node.Node) string {
	st := n.Status()
	for _, m := range st.Members {
		if m.ID == st.Self {
			return m.Gossip
		}
	}
	return ""
}

func (c *Cluster) waitRing(t testing.TB, ids []string) { waitRings(t, c.nodes, ids) }

// waitRings waits until the ring of every one of nodes holds exactly ids.
func waitRings(t testing.TB, nodes []*node.Node, ids []string) {
	t.Helper()
	want := slices.Sorted(slices.Values(ids))
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok := true
		for _, n := range nodes {
			ok = ok && slices.Equal(n.Ring().Nodes(), want)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nodetest: rings did not converge on %v within 10s", want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Nodes returns the nodes in the order of Start's ids.
func (c *Cluster) Nodes() []*node.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.nodes)
}

// Engines returns each node's engine, in the order of Nodes.
func (c *Cluster) Engines() []*engine.Engine {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.engs)
}

// FlushAll deletes every counter on every node through the first node.
func (c *Cluster) FlushAll(ctx context.Context) error {
	return c.Nodes()[0].FlushAll(ctx, contract.WriteOptions{})
}
