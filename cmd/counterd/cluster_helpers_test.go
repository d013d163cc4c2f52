package main

// Helpers of the multi-process cluster tests (cluster_test.go,
// partition_test.go): counterd nodes that join each other, GET /cluster,
// load through the Go client with a ledger of acknowledged increments, and
// polling for convergence. Every process is killed and every data
// directory removed by t.Cleanup; node logs are printed when a test fails.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cdclient "github.com/counterd/counterd/client"
	"github.com/counterd/counterd/internal/testutil/ports"
)

// modeUnsupported is what counterd prints when this build cannot run the
// deployment mode it was asked for (server.ErrUnsupportedMode). Only then
// are the cluster tests skipped.
const modeUnsupported = "deployment mode not available"

// nodeBin is the counterd binary: built once for tests, given by
// COUNTERD_BIN to benchmarks (scripts/bench-cluster.sh sets it).
func nodeBin(tb testing.TB) string {
	if t, ok := tb.(*testing.T); ok {
		return counterdBin(t)
	}
	if p := os.Getenv("COUNTERD_BIN"); p != "" {
		return p
	}
	tb.Skip("set COUNTERD_BIN to a counterd binary (scripts/bench-cluster.sh does)")
	return ""
}

// pollc is the HTTP client of checks that run while nodes may be down or
// cut off: it gives up sooner than the package's client.
var pollc = &http.Client{Timeout: 3 * time.Second}

// logBuf keeps a process's output for the failure report. Safe for
// concurrent use.
type logBuf struct {
	mu sync.Mutex // guards b
	b  []byte
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.b = append(l.b, p...)
	l.mu.Unlock()
	return len(p), nil
}

// tail returns the last n lines, cut to 400 bytes each, leaving out the
// access log of failed requests (the test reports what failed).
func (l *logBuf) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var lines []string
	omitted := 0
	for _, line := range strings.Split(strings.TrimRight(string(l.b), "\n"), "\n") {
		if strings.Contains(line, `msg="http request failed"`) {
			omitted++
			continue
		}
		lines = append(lines, line[:min(len(line), 400)])
	}
	lines = lines[max(0, len(lines)-n):]
	if omitted > 0 {
		lines = append(lines, fmt.Sprintf("(%d lines of failed HTTP requests left out)", omitted))
	}
	return strings.Join(lines, "\n")
}

// member and clusterView are GET /cluster.
type member struct {
	ID        string  `json:"id"`
	State     string  `json:"state"`
	Gossip    string  `json:"gossip"`
	HTTP      string  `json:"http"`
	RESP      string  `json:"resp"`
	GRPC      string  `json:"grpc"`
	Ownership float64 `json:"ownership"`
}

type clusterView struct {
	Self              string   `json:"self"`
	RingVersion       uint64   `json:"ring_version"`
	VNodes            int      `json:"vnodes"`
	ReplicationFactor int      `json:"replication_factor"`
	HashTags          bool     `json:"hash_tags"`
	Members           []member `json:"members"`
}

// alive returns the sorted ids of the members in state "alive".
func (v clusterView) alive() []string {
	var ids []string
	for _, m := range v.Members {
		if m.State == "alive" {
			ids = append(ids, m.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

// cnode is one counterd process of a test cluster; its addresses and data
// directory stay the same across restarts. Methods other than the client's
// are for the test goroutine.
type cnode struct {
	id, dir                  string
	http, resp, grpc, gossip string   // host:port
	join                     string   // --join; "" runs an embedded node
	extra                    []string // more flags (--auth)
	url                      string   // http://<http>
	command                  func(name string, args ...string) *exec.Cmd
	logs                     *logBuf
	c                        *cdclient.Client // idempotency keys on, one retry
	raw                      *cdclient.Client // no idempotency keys, no retries
	p                        *proc            // nil while stopped
}

// newNode prepares a node; t.Cleanup kills it and reports its log if t
// failed.
func newNode(tb testing.TB, id, host string, ports []string, command func(string, ...string) *exec.Cmd) *cnode {
	tb.Helper()
	n := &cnode{
		id: id, dir: tb.TempDir(), command: command, logs: &logBuf{},
		http: net.JoinHostPort(host, ports[0]), resp: net.JoinHostPort(host, ports[1]),
		grpc: net.JoinHostPort(host, ports[2]), gossip: net.JoinHostPort(host, ports[3]),
	}
	n.url = "http://" + n.http
	var err error
	n.c, err = cdclient.New(n.url, cdclient.WithRetries(1), cdclient.WithBackoff(20*time.Millisecond, 200*time.Millisecond), cdclient.WithTimeout(5*time.Second))
	if err != nil {
		tb.Fatal(err)
	}
	n.raw, err = cdclient.New(n.url, cdclient.WithIdempotencyKeys(false), cdclient.WithRetries(0), cdclient.WithTimeout(5*time.Second))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if n.p != nil {
			n.p.cmd.Process.Kill()
			select {
			case <-n.p.done:
			case <-time.After(10 * time.Second):
			}
		}
		if tb.Failed() {
			tb.Logf("--- log of %s (last 60 lines) ---\n%s", n.id, n.logs.tail(60))
		}
	})
	return n
}

// start runs the node and waits until its HTTP API answers. It skips tb
// when counterd reports the deployment mode unsupported.
func (n *cnode) start(tb testing.TB) {
	tb.Helper()
	args := []string{"--node-id", n.id, "--data", n.dir, "--http", n.http, "--resp", n.resp, "--grpc", n.grpc}
	if n.join != "" {
		args = append(args, "--gossip", n.gossip, "--join", n.join)
	}
	args = append(args, n.extra...)
	cmd := n.command(nodeBin(tb), args...)
	fmt.Fprintf(n.logs, "=== %s: %s\n", time.Now().Format(time.TimeOnly), strings.Join(cmd.Args, " "))
	cmd.Stdout, cmd.Stderr = n.logs, n.logs
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	n.p = &proc{cmd: cmd, addr: n.url, done: make(chan error, 1)}
	go func(p *proc) { p.done <- cmd.Wait() }(n.p)
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-n.p.done:
			n.p = nil
			if out := n.logs.tail(5); strings.Contains(out, modeUnsupported) {
				tb.Skipf("counterd has no cluster mode yet:\n%s", out)
			}
			tb.Fatalf("%s exited while starting: %v\n%s", n.id, err, n.logs.tail(40))
		case <-time.After(50 * time.Millisecond):
		}
		if resp, err := pollc.Get(n.url + "/healthz"); err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s did not answer on %s within 60s", n.id, n.http)
		}
	}
}

// kill stops the node with SIGKILL; term with SIGTERM, failing t unless it
// exits cleanly.
func (n *cnode) kill(t *testing.T) { n.p.kill(t); n.p = nil }
func (n *cnode) term(t *testing.T) { n.p.term(t); n.p = nil }

// view reads GET /cluster.
func (n *cnode) view() (clusterView, error) {
	var v clusterView
	resp, err := pollc.Get(n.url + "/cluster")
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("%s GET /cluster: %d %s", n.id, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return v, fmt.Errorf("%s GET /cluster: %v: %s", n.id, err, body)
	}
	return v, nil
}

// placement says where node i (from 0) runs: the host its listeners bind
// to, its ports (http, resp, grpc, gossip) and how to run a program there.
type placement func(tb testing.TB, i int) (host string, ports []string, command func(string, ...string) *exec.Cmd)

// loopback places every node on 127.0.0.1 with free ports.
func loopback(tb testing.TB, _ int) (string, []string, func(string, ...string) *exec.Cmd) {
	return "127.0.0.1", freePorts(tb, 4), exec.Command
}

// handedOut holds the ports freePorts returned, so that no two nodes of
// this process get the same one between picking ports and binding them.
// freePorts returns n ports free for TCP and UDP (gossip uses both) on
// 127.0.0.1, below the kernel's ephemeral range and not returned before by
// this process.
func freePorts(tb testing.TB, n int) []string {
	tb.Helper()
	ps, err := ports.Free(n)
	if err != nil {
		tb.Fatal(err)
	}
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = strconv.Itoa(p)
	}
	return out
}

// testCluster is a set of counterd processes joined into one cluster.
type testCluster struct {
	place placement
	extra []string // more flags for every node (newClusterWith)
	nodes []*cnode // n1, n2, ... in order of creation
}

// newCluster starts n nodes n1..nN, each joining every node's gossip
// address, and waits until each sees all of them alive.
func newCluster(tb testing.TB, n int, place placement) *testCluster {
	tb.Helper()
	return newClusterWith(tb, n, place, nil)
}

// newClusterWith is newCluster with extra flags for every node.
func newClusterWith(tb testing.TB, n int, place placement, extra []string) *testCluster {
	tb.Helper()
	c := &testCluster{place: place, extra: extra}
	for i := range n {
		c.nodes = append(c.nodes, c.newNode(tb, i))
	}
	var joins []string
	for _, nd := range c.nodes {
		joins = append(joins, nd.gossip)
	}
	for _, nd := range c.nodes {
		nd.join = strings.Join(joins, ",")
		nd.start(tb)
	}
	waitAlive(tb, c.nodes, 60*time.Second)
	return c
}

func (c *testCluster) newNode(tb testing.TB, i int) *cnode {
	host, ports, command := c.place(tb, i)
	nd := newNode(tb, fmt.Sprintf("n%d", i+1), host, ports, command)
	nd.extra = c.extra
	return nd
}

// add starts one more node, joining its own and every other node's gossip
// address.
func (c *testCluster) add(tb testing.TB) *cnode {
	tb.Helper()
	nd := c.newNode(tb, len(c.nodes))
	joins := []string{nd.gossip}
	for _, o := range c.nodes {
		joins = append(joins, o.gossip)
	}
	nd.join = strings.Join(joins, ",")
	c.nodes = append(c.nodes, nd)
	nd.start(tb)
	return nd
}

// ids returns the node ids, sorted.
func ids(nodes []*cnode) []string {
	var s []string
	for _, n := range nodes {
		s = append(s, n.id)
	}
	slices.Sort(s)
	return s
}

// node returns the node named id.
func (c *testCluster) node(id string) *cnode {
	for _, n := range c.nodes {
		if n.id == id {
			return n
		}
	}
	panic("no node " + id)
}

// waitAlive fails tb unless, within timeout, every node of nodes reports
// exactly nodes as its alive members. It returns their views.
func waitAlive(tb testing.TB, nodes []*cnode, timeout time.Duration) []clusterView {
	tb.Helper()
	views, err := awaitAlive(nodes, timeout)
	if err != nil {
		tb.Fatalf("cluster did not settle on %v within %v: %v", ids(nodes), timeout, err)
	}
	return views
}

// awaitAlive is waitAlive returning the last mismatch instead of failing.
func awaitAlive(nodes []*cnode, timeout time.Duration) ([]clusterView, error) {
	want := ids(nodes)
	views := make([]clusterView, len(nodes))
	err := poll(timeout, func() error {
		for i, n := range nodes {
			v, err := n.view()
			if err != nil {
				return err
			}
			if got := v.alive(); !slices.Equal(got, want) {
				return fmt.Errorf("%s sees alive %v (members %+v)", n.id, got, v.Members)
			}
			views[i] = v
		}
		return nil
	})
	return views, err
}

// poll calls f every 100 ms until it returns nil or timeout has passed; it
// returns f's last error.
func poll(timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// counterSpec is an id the load writes to: the kind it is created as and
// the durability its increments ask for ("" = the server's default).
type counterSpec struct {
	id         string
	kind       cdclient.Kind
	durability string
}

// specs returns n ids prefix0.. of one kind.
func specs(prefix string, n int, kind cdclient.Kind, durability string) []counterSpec {
	var s []counterSpec
	for i := range n {
		s = append(s, counterSpec{fmt.Sprintf("%s%d", prefix, i), kind, durability})
	}
	return s
}

// ledger counts per id the increments of 1 sent, each under its own
// idempotency key, and those acknowledged. Safe for concurrent use.
type ledger struct {
	mu          sync.Mutex // guards sent, acked
	sent, acked map[string]int64
}

func newLedger() *ledger {
	return &ledger{sent: map[string]int64{}, acked: map[string]int64{}}
}

func (l *ledger) count(id string, acked bool) {
	l.mu.Lock()
	if acked {
		l.acked[id]++
	} else {
		l.sent[id]++
	}
	l.mu.Unlock()
}

func (l *ledger) counts(id string) (acked, sent int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.acked[id], l.sent[id]
}

// resolved reports whether every increment sent to s.id was acknowledged,
// so that its value must be exactly the acknowledged sum.
func (l *ledger) resolved(s counterSpec) bool {
	acked, sent := l.counts(s.id)
	return acked == sent
}

// sums is the increments acknowledged and sent, over every id.
func (l *ledger) sums() (acked, sent int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, n := range l.acked {
		acked += n
	}
	for _, n := range l.sent {
		sent += n
	}
	return acked, sent
}

// unresolved is the number of increments sent and never acknowledged.
func (l *ledger) unresolved() int64 {
	acked, sent := l.sums()
	return sent - acked
}

// load is writers incrementing random ids of specs through the Go client.
// One increment is sent to a target node and, when that fails, retried with
// the same idempotency key on the next target (and so on) for up to
// retryFor; only an answered increment counts as acknowledged. With
// retryFor 0 each increment is one attempt without an idempotency key (as
// a Redis client sends it), which counterd may apply on the receiving node.
type load struct {
	led      *ledger
	tag      string
	specs    []counterSpec
	retryFor time.Duration
	targets  atomic.Pointer[[]*cnode]

	stopped            atomic.Bool
	wg                 sync.WaitGroup
	acks, counterAcks  atomic.Int64 // acknowledged increments; of them, of kind counter
	attempts, failures atomic.Int64 // requests sent; of them, failed

	mu         sync.Mutex // guards unexpected, failed, fails
	unexpected []string   // 4xx answers: a bug in the server or the test
	failed     []string   // the first failed requests, for the report
	fails      failTimes  // when requests failed, by target node
}

// startLoad starts workers writing until stop.
func startLoad(led *ledger, tag string, sp []counterSpec, targets []*cnode, workers int, retryFor time.Duration) *load {
	l := &load{led: led, tag: tag, specs: sp, retryFor: retryFor}
	l.setTargets(targets)
	for w := range workers {
		l.wg.Add(1)
		go l.worker(w)
	}
	return l
}

func (l *load) setTargets(nodes []*cnode) { l.targets.Store(&nodes) }

func (l *load) worker(w int) {
	defer l.wg.Done()
	rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
	for seq := 0; !l.stopped.Load(); seq++ {
		s := l.specs[rng.IntN(len(l.specs))]
		l.led.count(s.id, false)
		if l.send(w, s, fmt.Sprintf("%s-%d-%d-%d", l.tag, os.Getpid(), w, seq)) {
			l.led.count(s.id, true)
			l.acks.Add(1)
			if s.kind == cdclient.KindCounter {
				l.counterAcks.Add(1)
			}
		}
	}
}

// send delivers one increment, failing over between targets.
func (l *load) send(w int, s counterSpec, key string) bool {
	deadline := time.Now().Add(l.retryFor)
	for try := 0; ; try++ {
		ts := *l.targets.Load()
		n := ts[(w+try)%len(ts)]
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var err error
		if l.retryFor == 0 {
			_, err = n.raw.Incr(ctx, s.id, 1, cdclient.WithKind(s.kind), cdclient.WithDurability(s.durability))
		} else {
			_, err = n.c.Incr(ctx, s.id, 1, cdclient.WithKind(s.kind), cdclient.WithDurability(s.durability), cdclient.WithIdempotencyKey(key))
		}
		cancel()
		l.attempts.Add(1)
		if err == nil {
			return true
		}
		l.failures.Add(1)
		msg := fmt.Sprintf("%s %s %s via %s: %v", time.Now().Format("15:04:05.000"), s.kind, s.id, n.id, err)
		ce := (*cdclient.Error)(nil)
		bad := errors.As(err, &ce) && ce.Status < 500 && ce.Status != http.StatusTooManyRequests
		l.mu.Lock()
		l.fails.add(n.id, time.Now())
		if bad && len(l.unexpected) < 5 {
			l.unexpected = append(l.unexpected, msg)
		}
		if len(l.failed) < 5 {
			l.failed = append(l.failed, msg)
		}
		l.mu.Unlock()
		if bad {
			return false
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Duration(min(try+1, 5)) * 20 * time.Millisecond)
	}
}

// waitAcks waits until n more increments are acknowledged, failing t after
// timeout.
func (l *load) waitAcks(tb testing.TB, n int64, timeout time.Duration) {
	tb.Helper()
	want := l.acks.Load() + n
	if err := poll(timeout, func() error {
		if got := l.acks.Load(); got < want {
			return fmt.Errorf("%d of %d acknowledged (%d requests, %d failed)", got, want, l.attempts.Load(), l.failures.Load())
		}
		return nil
	}); err != nil {
		tb.Fatalf("load %s stalled: %v", l.tag, err)
	}
}

// stop stops the writers after their current increment, reports what they
// did and fails t on unexpected (4xx) answers. Calls after the first do
// nothing.
func (l *load) stop(tb testing.TB) {
	tb.Helper()
	if l.stopped.Swap(true) {
		return
	}
	l.wg.Wait()
	tb.Logf("load %s: %d increments acknowledged (%d of kind counter), %d requests, %d failed",
		l.tag, l.acks.Load(), l.counterAcks.Load(), l.attempts.Load(), l.failures.Load())
	for _, f := range l.failed {
		tb.Logf("load %s: failed request: %s", l.tag, f)
	}
	for _, u := range l.unexpected {
		tb.Errorf("load %s: unexpected answer: %s", l.tag, u)
	}
}

// Exactness of a converged check: whether an id must read exactly its
// acknowledged sum, or anything between that and what was sent.
var (
	exactAll  = func(counterSpec) bool { return true }
	exactNone = func(counterSpec) bool { return false }
)

// converged returns nil when every node reads the same value for every id
// of sp, within [acked, sent] of led, and exactly acked where exact says so.
func converged(nodes []*cnode, led *ledger, sp []counterSpec, exact func(counterSpec) bool) error {
	var errs []error
	for _, s := range sp {
		acked, sent := led.counts(s.id)
		var vals []string
		ok := true
		for _, n := range nodes {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			got, err := n.c.Get(ctx, s.id)
			cancel()
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("%s on %s: %v", s.id, n.id, err))
				ok = false
				continue
			case exact(s) && got.Value != acked, got.Value < acked, got.Value > sent:
				ok = false
			}
			vals = append(vals, fmt.Sprintf("%s=%d", n.id, got.Value))
		}
		if !ok || len(vals) > 0 && !allEqual(vals) {
			errs = append(errs, fmt.Errorf("%s (%s): %s; acknowledged %d, sent %d, exact %v", s.id, s.kind, strings.Join(vals, " "), acked, sent, exact(s)))
		}
	}
	return errors.Join(errs...)
}

// allEqual reports whether every "node=value" has the same value.
func allEqual(vals []string) bool {
	_, first, _ := strings.Cut(vals[0], "=")
	for _, v := range vals[1:] {
		if _, x, _ := strings.Cut(v, "="); x != first {
			return false
		}
	}
	return true
}

// idemMetrics returns a node's idempotency lookups (by result) and
// duplicates taken back, from /cluster/metrics, for the test log.
func idemMetrics(nd *cnode) string {
	resp, err := pollc.Get(nd.url + "/cluster/metrics")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if l := sc.Text(); strings.Contains(l, `op="idem_lookup"`) || strings.HasPrefix(l, "counterd_cluster_duplicates_undone_total ") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "; ")
}

// agreedValue reads id on every node and returns its value when all nodes
// answer the same one.
func agreedValue(nodes []*cnode, id string) (int64, error) {
	var vals []int64
	for _, n := range nodes {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		v, err := n.c.Get(ctx, id)
		cancel()
		if err != nil {
			return 0, err
		}
		vals = append(vals, v.Value)
	}
	for _, v := range vals {
		if v != vals[0] {
			return 0, fmt.Errorf("nodes disagree: %v", vals)
		}
	}
	return vals[0], nil
}
