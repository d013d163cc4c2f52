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
// methods are safe for concurrent use (the node set never changes).
type Cluster struct {
	nodes []*node.Node
	engs  []*engine.Engine
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
	c := &Cluster{}
	var join []string
	for _, id := range ids {
		ecfg := engine.DefaultConfig()
		ecfg.Dir, ecfg.NodeID, ecfg.Logger, ecfg.Clock = t.TempDir(), id, log.With("node", id), opts.Clock
		if opts.Engine != nil {
			opts.Engine(id, &ecfg)
		}
		eng, err := engine.Open(ecfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = eng.Close() }) // after the node's cleanup below (LIFO)
		n, err := node.New(node.Config{
			NodeID:              id,
			Gossip:              "127.0.0.1:0",
			Join:                slices.Clone(join),
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
			t.Fatal(err)
		}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		gs := grpc.NewServer()
		n.Register(gs)
		go func() { _ = gs.Serve(lis) }()
		t.Cleanup(func() {
			_ = n.Close()
			gs.Stop()
		})
		meta := node.Meta{GRPC: lis.Addr().String(), HTTP: "127.0.0.1:1"}
		if opts.HTTP != nil {
			hs := httptest.NewServer(opts.HTTP(id))
			t.Cleanup(hs.Close)
			meta.HTTP = hs.Listener.Addr().String()
		}
		if opts.BeforeStart != nil {
			opts.BeforeStart(id, n)
		}
		if err := n.Start(meta); err != nil {
			t.Fatal(err)
		}
		join = append(join, gossipAddr(n))
		c.nodes = append(c.nodes, n)
		c.engs = append(c.engs, eng)
	}
	c.waitRing(t, ids)
	return c
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

func (c *Cluster) waitRing(t testing.TB, ids []string) {
	t.Helper()
	want := slices.Sorted(slices.Values(ids))
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok := true
		for _, n := range c.nodes {
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
func (c *Cluster) Nodes() []*node.Node { return slices.Clone(c.nodes) }

// Engines returns each node's engine, in the order of Nodes.
func (c *Cluster) Engines() []*engine.Engine { return slices.Clone(c.engs) }

// FlushAll deletes every counter on every node through the first node.
func (c *Cluster) FlushAll(ctx context.Context) error {
	return c.nodes[0].FlushAll(ctx, contract.WriteOptions{})
}
