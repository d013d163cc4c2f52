package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// EnvRedisCluster names an external Redis Cluster for NewCluster, in
// go-redis's cluster URL form (redis://host:port?addr=host:port&addr=...).
const EnvRedisCluster = "COUNTERD_TEST_REDIS_CLUSTER"

// clusterMasters is how many masters a private cluster has; 3 is the
// smallest cluster redis-cli accepts and spreads slots like production.
const clusterMasters = 3

// clusterArgs are the redis-server arguments of a private cluster node.
var clusterArgs = []string{
	"--cluster-enabled", "yes",
	"--cluster-config-file", "nodes.conf",
	"--cluster-node-timeout", "5000",
	"--repl-diskless-sync-delay", "0", // a new replica syncs at once, not after 5 s
}

// clusterTimeout bounds how long a private cluster may take to reach
// cluster_state:ok. Redis holds a freshly started master in the fail state
// for about 2 s (CLUSTER_WRITABLE_DELAY in cluster.c), whatever we do.
const clusterTimeout = 15 * time.Second

// failoverAttempt is how long Failover waits for one CLUSTER FAILOVER: more
// than Redis's own limit for a manual failover (5 s).
const failoverAttempt = 7 * time.Second

// Cluster is a Redis Cluster of masters without replicas for one test.
// Its methods are safe for concurrent use; t.Cleanup stops a private one.
type Cluster struct {
	url      string
	external bool
	bin      string // redis-server, for AddReplica

	mu       sync.Mutex // guards addrs and replicas
	addrs    []string   // masters
	replicas int        // private replicas added
	servers  []*Server  // the private masters NewCluster started
}

// NewCluster returns a Redis Cluster for t: the one named by
// COUNTERD_TEST_REDIS_CLUSTER (flushed first, so tests sharing it must not
// run in parallel), or three private redis-server masters on free loopback
// ports, joined with CLUSTER MEET, all 16384 slots split between them with
// CLUSTER ADDSLOTSRANGE, ready when every node reports cluster_state:ok
// and sees every slot. Skip and failure rules are those of New.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	if env := os.Getenv(EnvRedisCluster); env != "" {
		c := externalCluster(t, env)
		c.FlushAll(t)
		return c
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		unavailable(t, EnvRedisCluster, "no redis-server on PATH and "+EnvRedisCluster+" is not set")
	}
	nodes := make([]*Server, clusterMasters)
	errs := make([]error, clusterMasters)
	var wg sync.WaitGroup
	for i := range nodes {
		s := &Server{bin: bin, dir: t.TempDir(), extra: clusterArgs}
		nodes[i] = s
		t.Cleanup(s.stop)
		wg.Go(func() { errs[i] = startOnFreePort(s) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("redistest: start cluster node: %v", err)
		}
	}
	c := &Cluster{bin: bin, servers: nodes}
	for _, s := range nodes {
		c.addrs = append(c.addrs, s.Addr)
	}
	c.url = clusterURL(c.addrs)
	if err := c.form(); err != nil {
		t.Fatalf("redistest: form cluster %v: %v", c.addrs, err)
	}
	return c
}

// startOnFreePort starts s on a free loopback port, retrying when another
// process takes the port between probing and binding.
func startOnFreePort(s *Server) error {
	var err error
	for range 3 {
		var port int
		if port, err = freePort(); err != nil {
			return err
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		s.URL = "redis://" + s.Addr
		if err = s.start(); err == nil {
			return nil
		}
	}
	return err
}

// form gives each node a distinct config epoch (so no epoch collision has
// to be resolved), assigns each an equal range of slots, introduces them
// to the first node, and waits until the cluster is ok everywhere.
func (c *Cluster) form() error {
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	firstHost, firstPort, _ := net.SplitHostPort(c.addrs[0])
	per := 16384 / len(c.addrs)
	for i, addr := range c.addrs {
		cl := redis.NewClient(&redis.Options{Addr: addr})
		lo, hi := i*per, (i+1)*per-1
		if i == len(c.addrs)-1 {
			hi = 16383
		}
		err := cl.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err()
		if err == nil {
			err = cl.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err()
		}
		if err == nil && i > 0 {
			err = cl.ClusterMeet(ctx, firstHost, firstPort).Err()
		}
		_ = cl.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", addr, err)
		}
	}
	return c.waitReady(ctx)
}

// waitReady polls every node until it reports cluster_state:ok, knows all
// nodes and sees all slots assigned.
func (c *Cluster) waitReady(ctx context.Context) error {
	c.mu.Lock()
	addrs, nodes := append([]string(nil), c.addrs...), len(c.addrs)+c.replicas
	c.mu.Unlock()
	want := []string{
		"cluster_state:ok",
		"cluster_slots_assigned:16384",
		"cluster_known_nodes:" + strconv.Itoa(nodes),
	}
	for _, addr := range addrs {
		cl := redis.NewClient(&redis.Options{Addr: addr})
		var info string
		var err error
		for {
			info, err = cl.ClusterInfo(ctx).Result()
			if err == nil && hasAll(info, want) {
				break
			}
			select {
			case <-ctx.Done():
				_ = cl.Close()
				return fmt.Errorf("%s not ready (%v): %s", addr, err, strings.ReplaceAll(info, "\r\n", " "))
			case <-time.After(20 * time.Millisecond):
			}
		}
		_ = cl.Close()
	}
	return nil
}

func hasAll(info string, lines []string) bool {
	for _, l := range lines {
		if !strings.Contains(info, l+"\r\n") {
			return false
		}
	}
	return true
}

func clusterURL(addrs []string) string {
	u := "redis://" + addrs[0]
	for i, a := range addrs[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		u += sep + "addr=" + a
	}
	return u
}

func externalCluster(t testing.TB, env string) *Cluster {
	t.Helper()
	opt, err := redis.ParseClusterURL(env)
	if err != nil {
		t.Fatalf("redistest: %s=%q is not a cluster URL (redis://host:port?addr=host:port...): %v", EnvRedisCluster, env, err)
	}
	c := &Cluster{url: env, external: true}
	cl := redis.NewClusterClient(opt)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var mu sync.Mutex
	err = cl.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		mu.Lock()
		c.addrs = append(c.addrs, m.Options().Addr)
		mu.Unlock()
		return m.Ping(ctx).Err()
	})
	if err != nil {
		unavailable(t, EnvRedisCluster, fmt.Sprintf("%s=%s does not answer: %v", EnvRedisCluster, redactURL(env), err))
	}
	return c
}

func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return s
}

// URL is the cluster URL in go-redis's form, which redis.ParseClusterURL
// reads: redis://host:port?addr=host:port&addr=host:port.
func (c *Cluster) URL() string { return c.url }

// Addrs returns the masters' host:port addresses.
func (c *Cluster) Addrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.addrs...)
}

// External reports whether the cluster is the shared one from
// COUNTERD_TEST_REDIS_CLUSTER.
func (c *Cluster) External() bool { return c.external }

// FlushAll removes every key on every master.
func (c *Cluster) FlushAll(t testing.TB) {
	t.Helper()
	opt, err := redis.ParseClusterURL(c.url)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	cl := redis.NewClusterClient(opt)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = cl.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		return m.FlushAll(ctx).Err()
	})
	if err != nil {
		t.Fatalf("redistest: FLUSHALL on the cluster: %v", err)
	}
}

// StopMaster kills private master i (in NewCluster's order): its slots
// answer nothing until StartMaster; its data is lost (persistence is off).
// It skips the test on an external cluster.
func (c *Cluster) StopMaster(t testing.TB, i int) {
	t.Helper()
	if c.external {
		t.Skip("redistest: cannot stop a master of the external cluster")
	}
	c.servers[i].stop()
}

// StartMaster starts private master i again on its port and its cluster
// config file (the same node with the same slots), empty, and waits until
// every node reports the cluster ok (Redis keeps a restarted master
// refusing writes for about 2 s).
func (c *Cluster) StartMaster(t testing.TB, i int) {
	t.Helper()
	if err := c.servers[i].start(); err != nil {
		t.Fatalf("redistest: restart master %s: %v", c.servers[i].Addr, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	if err := c.waitReady(ctx); err != nil {
		t.Fatalf("redistest: cluster after restarting %s: %v", c.servers[i].Addr, err)
	}
}

// AddReplica starts a private redis-server as a replica of the master at
// addr and returns its address once it is in sync and every master knows
// it. It skips the test on an external cluster.
func (c *Cluster) AddReplica(t testing.TB, master string) string {
	t.Helper()
	if c.external {
		t.Skip("redistest: cannot add a replica to the external cluster")
	}
	s := &Server{bin: c.bin, dir: t.TempDir(), extra: clusterArgs}
	t.Cleanup(s.stop)
	if err := startOnFreePort(s); err != nil {
		t.Fatalf("redistest: start replica: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	m := redis.NewClient(&redis.Options{Addr: master})
	defer m.Close()
	r := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer r.Close()
	masterID, err := m.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatalf("redistest: CLUSTER MYID on %s: %v", master, err)
	}
	host, port, _ := net.SplitHostPort(master)
	if err := r.ClusterMeet(ctx, host, port).Err(); err != nil {
		t.Fatalf("redistest: CLUSTER MEET: %v", err)
	}
	// REPLICATE fails until gossip has told the new node about the master.
	err = poll(ctx, func() error { return r.Do(ctx, "CLUSTER", "REPLICATE", masterID).Err() })
	if err == nil {
		err = poll(ctx, func() error {
			info, err := r.Info(ctx, "replication").Result()
			if err == nil && !strings.Contains(info, "master_link_status:up") {
				err = errors.New("replication link not up")
			}
			return err
		})
	}
	if err == nil {
		err = c.waitView(ctx, func(nodes string) bool { return nodeLine(nodes, s.Addr, "slave "+masterID) })
	}
	if err != nil {
		t.Fatalf("redistest: replica %s of %s: %v", s.Addr, master, err)
	}
	c.mu.Lock()
	c.replicas++
	c.mu.Unlock()
	return s.Addr
}

// Failover makes the replica at addr take over from its master with
// CLUSTER FAILOVER (coordinated: no acknowledged write is lost) and waits
// until every master sees it as a master and the cluster is ok. Addrs
// then lists it instead of the old master.
func (c *Cluster) Failover(t testing.TB, replica string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*failoverAttempt)
	defer cancel()
	r := redis.NewClient(&redis.Options{Addr: replica})
	defer r.Close()
	nodes, err := r.ClusterNodes(ctx).Result()
	if err != nil {
		t.Fatalf("redistest: CLUSTER NODES on %s: %v", replica, err)
	}
	old := ""
	for _, line := range strings.Split(nodes, "\n") {
		f := strings.Fields(line)
		if len(f) > 3 && strings.Contains(f[2], "myself") && strings.Contains(f[2], "slave") {
			for _, l2 := range strings.Split(nodes, "\n") {
				if g := strings.Fields(l2); len(g) > 1 && g[0] == f[3] {
					old, _, _ = strings.Cut(g[1], "@")
				}
			}
		}
	}
	if old == "" {
		t.Fatalf("redistest: %s is not a replica: %s", replica, nodes)
	}
	// A manual failover needs the masters' votes; one that masters new to
	// the replica did not grant is abandoned by Redis, so ask again until
	// the replica calls itself master. Asking again resets a failover in
	// progress, and Redis gives one up to 5 s (the replica catching up
	// with a busy master, then the vote): an attempt waits longer than
	// that (under a loaded CI run, attempts of 3 s never let one finish).
	for {
		if err := r.ClusterFailover(ctx).Err(); err != nil {
			t.Fatalf("redistest: CLUSTER FAILOVER on %s: %v", replica, err)
		}
		attempt, done := context.WithTimeout(ctx, failoverAttempt)
		err := poll(attempt, func() error {
			if nodes, _ := r.ClusterNodes(attempt).Result(); !nodeLine(nodes, replica, "master") {
				return errors.New("not promoted yet")
			}
			return nil
		})
		done()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("redistest: failover to %s: never promoted: %v", replica, err)
		}
	}
	c.mu.Lock()
	for i, a := range c.addrs {
		if a == old {
			c.addrs[i] = replica
		}
	}
	c.mu.Unlock()
	err = c.waitView(ctx, func(nodes string) bool { return nodeLine(nodes, replica, "master") && !nodeLine(nodes, old, "master") })
	if err == nil {
		err = c.waitReady(ctx)
	}
	if err != nil {
		t.Fatalf("redistest: failover to %s: %v", replica, err)
	}
}

// waitView polls CLUSTER NODES on every master until ok accepts it.
func (c *Cluster) waitView(ctx context.Context, ok func(nodes string) bool) error {
	for _, addr := range c.Addrs() {
		cl := redis.NewClient(&redis.Options{Addr: addr})
		err := poll(ctx, func() error {
			nodes, err := cl.ClusterNodes(ctx).Result()
			if err == nil && !ok(nodes) {
				err = fmt.Errorf("%s sees: %s", addr, nodes)
			}
			return err
		})
		_ = cl.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// nodeLine reports whether CLUSTER NODES output has a line for addr whose
// flags and master fields contain want.
func nodeLine(nodes, addr, want string) bool {
	for _, line := range strings.Split(nodes, "\n") {
		f := strings.Fields(line)
		if len(f) > 3 && strings.HasPrefix(f[1], addr+"@") && strings.Contains(f[2]+" "+f[3], want) {
			return true
		}
	}
	return false
}

// poll calls f every 20 ms until it succeeds or ctx ends.
func poll(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
