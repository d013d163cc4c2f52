package client_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/counterd/counterd/client"
	"github.com/counterd/counterd/internal/cluster/ring"
)

// fakeCluster is a set of fake nodes sharing one /cluster document. Each
// node answers the per-id routes like the API would (without state) and
// records which ids it was asked about, with their Idempotency-Keys.
type fakeCluster struct {
	t     *testing.T
	nodes []*fakeNode

	mu      sync.Mutex // guards version, states and noAddr
	version uint64
	states  map[string]string // node id -> membership state
	noAddr  map[string]bool   // node ids advertised without an HTTP address
}

type fakeNode struct {
	id   string
	srv  *httptest.Server
	fail atomic.Bool // answer 503 to everything but /cluster

	mu   sync.Mutex // guards reqs
	reqs []fakeReq
}

type fakeReq struct{ id, path, key string }

func newFakeCluster(t *testing.T, n int) *fakeCluster {
	fc := &fakeCluster{t: t, version: 7, states: map[string]string{}, noAddr: map[string]bool{}}
	for i := range n {
		nd := &fakeNode{id: fmt.Sprintf("n%d", i+1)}
		fc.states[nd.id] = "alive"
		nd.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fc.serve(nd, w, r) }))
		fc.nodes = append(fc.nodes, nd)
	}
	for _, nd := range fc.nodes {
		nd.srv.Start()
		t.Cleanup(nd.srv.Close)
	}
	return fc
}

func (fc *fakeCluster) seeds() []string {
	var s []string
	for _, nd := range fc.nodes {
		s = append(s, nd.srv.URL)
	}
	return s
}

// set changes the membership and bumps the ring version.
func (fc *fakeCluster) set(node, state string) {
	fc.mu.Lock()
	fc.states[node] = state
	fc.version++
	fc.mu.Unlock()
}

// doc returns the /cluster document and its version.
func (fc *fakeCluster) doc(self string) ([]byte, uint64) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	d := map[string]any{"self": self, "ring_version": fc.version, "vnodes": 100, "replication_factor": 3}
	var ms []map[string]any
	for _, nd := range fc.nodes {
		addr := nd.srv.Listener.Addr().String()
		if fc.noAddr[nd.id] {
			addr = ""
		}
		ms = append(ms, map[string]any{"id": nd.id, "state": fc.states[nd.id], "gossip": "127.0.0.1:7946",
			"http": addr, "resp": "", "grpc": "", "ownership": 0.33})
	}
	d["members"] = ms
	b, err := json.Marshal(d)
	if err != nil {
		panic(err)
	}
	return b, fc.version
}

// ring is the ring the servers would build from the alive members.
func (fc *fakeCluster) ring() *ring.Snapshot {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	r := ring.New(ring.Config{VirtualNodes: 100, ReplicationFactor: 3})
	var alive []string
	for id, s := range fc.states {
		if s == "alive" {
			alive = append(alive, id)
		}
	}
	r.Set(alive)
	return r.Snapshot()
}

func (fc *fakeCluster) serve(nd *fakeNode, w http.ResponseWriter, r *http.Request) {
	doc, version := fc.doc(nd.id)
	w.Header().Set(client.RingVersionHeader, strconv.FormatUint(version, 10))
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Path == "/cluster" {
		w.Write(doc)
		return
	}
	id := ""
	if rest, ok := strings.CutPrefix(r.URL.EscapedPath(), "/counters/"); ok {
		seg, _, _ := strings.Cut(rest, "/")
		id, _ = url.PathUnescape(seg)
	}
	nd.mu.Lock()
	nd.reqs = append(nd.reqs, fakeReq{id: id, path: r.URL.Path, key: r.Header.Get("Idempotency-Key")})
	nd.mu.Unlock()
	if nd.fail.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"status":"error","error":{"code":"unavailable","message":"failing"}}`))
		return
	}
	switch {
	case strings.HasSuffix(r.URL.Path, "/aggregate"):
		fmt.Fprintf(w, `{"prefix":"x","value":0,"count":0,"node":%q}`, nd.id)
	case r.Method == http.MethodGet:
		fmt.Fprintf(w, `{"id":%q,"kind":"counter","exists":true,"value":1,"version":1}`, id)
	default:
		fmt.Fprintf(w, `{"id":%q,"kind":"counter","value":1,"version":1}`, id)
	}
}

func (nd *fakeNode) requests() []fakeReq {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return append([]fakeReq(nil), nd.reqs...)
}

func (nd *fakeNode) reset() {
	nd.mu.Lock()
	nd.reqs = nil
	nd.mu.Unlock()
}

// byID maps every recorded id to the nodes that received it.
func (fc *fakeCluster) byID() map[string][]string {
	m := map[string][]string{}
	for _, nd := range fc.nodes {
		for _, r := range nd.requests() {
			m[r.id] = append(m[r.id], nd.id)
		}
	}
	return m
}

func (fc *fakeCluster) node(id string) *fakeNode {
	for _, nd := range fc.nodes {
		if nd.id == id {
			return nd
		}
	}
	fc.t.Fatalf("no node %q", id)
	return nil
}

func newCluster(t *testing.T, fc *fakeCluster, opts ...client.Option) *client.Cluster {
	t.Helper()
	opts = append([]client.Option{fastBackoff, client.WithRefreshInterval(0)}, opts...)
	c, err := client.NewCluster(fc.seeds(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// poll waits up to 5s for cond.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestClusterRoutesToOwner(t *testing.T) {
	fc := newFakeCluster(t, 3)
	c := newCluster(t, fc)
	ctx := t.Context()
	want := fc.ring()
	ids := []string{"a/b", ".", "..", "x*", "page_views:article_123", "100%", "ü"}
	for i := range 200 {
		ids = append(ids, fmt.Sprintf("user:%d", i))
	}
	for _, id := range ids {
		if _, err := c.Incr(ctx, id, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Get(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	used := map[string]int{}
	for id, nodes := range fc.byID() {
		owner := want.Owner(id)
		if len(nodes) != 2 || nodes[0] != owner || nodes[1] != owner {
			t.Errorf("%q went to %v, owner %s", id, nodes, owner)
		}
		if c.Owner(id) != owner {
			t.Errorf("client Owner(%q) = %s, want %s", id, c.Owner(id), owner)
		}
		used[owner]++
	}
	if len(used) != 3 {
		t.Errorf("owners used: %v", used)
	}

	// Aggregates go to any node, spread over all of them.
	for _, nd := range fc.nodes {
		nd.reset()
	}
	for range 30 {
		if _, err := c.Aggregate(ctx, "user:"); err != nil {
			t.Fatal(err)
		}
	}
	for _, nd := range fc.nodes {
		if n := len(nd.requests()); n == 0 {
			t.Errorf("%s got no aggregate", nd.id)
		}
	}
	if got := c.RingVersion(); got != 7 {
		t.Errorf("RingVersion %d", got)
	}
}

// ownedBy returns n ids owned by node on s.
func ownedBy(s *ring.Snapshot, node string, n int) []string {
	var ids []string
	for i := 0; len(ids) < n; i++ {
		if id := fmt.Sprintf("id:%d", i); s.Owner(id) == node {
			ids = append(ids, id)
		}
	}
	return ids
}

// A failing owner: the call succeeds on the next replica, with the same
// Idempotency-Key.
func TestClusterFailover(t *testing.T) {
	fc := newFakeCluster(t, 3)
	c := newCluster(t, fc, client.WithBreaker(100, time.Hour))
	s := fc.ring()
	fc.node("n1").fail.Store(true)
	for _, id := range ownedBy(s, "n1", 20) {
		if _, err := c.Incr(t.Context(), id, 1); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		reps := s.Replicas(id, 3)
		var keys []string
		var nodes []string
		for _, nd := range fc.nodes {
			for _, r := range nd.requests() {
				if r.id == id {
					keys = append(keys, r.key)
					nodes = append(nodes, nd.id)
				}
			}
		}
		if len(keys) != 2 || keys[0] != keys[1] || keys[0] == "" || !(nodes[0] == "n1" && nodes[1] == reps[1]) {
			t.Fatalf("%s (replicas %v): attempts on %v with keys %v", id, reps, nodes, keys)
		}
	}

	// An unreachable owner: same, over connection errors.
	fc.node("n2").srv.Close()
	for _, id := range ownedBy(s, "n2", 10) {
		if _, err := c.Incr(t.Context(), id, 1); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
}

func TestClusterBreaker(t *testing.T) {
	fc := newFakeCluster(t, 3)
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	c := newCluster(t, fc, client.WithBreaker(2, time.Second), client.WithClock(clock))
	s := fc.ring()
	n1 := fc.node("n1")
	ids := ownedBy(s, "n1", 10)
	state := func() client.BreakerState {
		for _, n := range c.Nodes() {
			if n.ID == "n1" {
				return n.Breaker
			}
		}
		t.Fatal("n1 missing")
		return 0
	}
	incr := func(id string) {
		t.Helper()
		if _, err := c.Incr(t.Context(), id, 1); err != nil {
			t.Fatal(err)
		}
	}
	n1.fail.Store(true)
	incr(ids[0])
	if st := state(); st != client.BreakerClosed {
		t.Fatalf("after 1 failure: %v", st)
	}
	incr(ids[1])
	if st := state(); st != client.BreakerOpen {
		t.Fatalf("after 2 failures: %v", st)
	}
	n1.reset()
	incr(ids[2])
	if n := len(n1.requests()); n != 0 {
		t.Fatalf("open breaker: n1 got %d requests", n)
	}
	advance(time.Second)
	if st := state(); st != client.BreakerHalfOpen {
		t.Fatalf("after the cool-down: %v", st)
	}
	incr(ids[3]) // the probe fails: open again
	if n := len(n1.requests()); n != 1 {
		t.Fatalf("half-open: n1 got %d requests, want 1 probe", n)
	}
	if st := state(); st != client.BreakerOpen {
		t.Fatalf("after a failed probe: %v", st)
	}
	advance(time.Second)
	n1.fail.Store(false)
	incr(ids[4]) // the probe succeeds: closed
	if st := state(); st != client.BreakerClosed {
		t.Fatalf("after a good probe: %v", st)
	}
	n1.reset()
	incr(ids[5])
	if n := len(n1.requests()); n != 1 {
		t.Fatalf("closed: n1 got %d requests", n)
	}

	// Every breaker open: fail fast.
	for _, nd := range fc.nodes {
		nd.fail.Store(true)
	}
	for range 3 {
		c.Incr(t.Context(), ids[6], 1)
	}
	_, err := c.Incr(t.Context(), ids[6], 1)
	if !errors.Is(err, client.ErrCircuitOpen) {
		t.Fatalf("all open: %v", err)
	}
}

// A node answering with another ring version makes the client refresh
// and route by the new ring.
func TestClusterRefreshOnVersionChange(t *testing.T) {
	fc := newFakeCluster(t, 3)
	c := newCluster(t, fc)
	old := fc.ring()
	moved := ownedBy(old, "n3", 20)
	fc.set("n3", "dead") // version 8; n3 still answers, and is no longer on the ring
	if _, err := c.Get(t.Context(), "anything"); err != nil {
		t.Fatal(err)
	}
	poll(t, "ring version 8", func() bool { return c.RingVersion() == 8 })
	for _, nd := range fc.nodes {
		nd.reset()
	}
	s := fc.ring()
	for _, id := range moved {
		if _, err := c.Incr(t.Context(), id, 1); err != nil {
			t.Fatal(err)
		}
		if got := fc.byID()[id]; len(got) != 1 || got[0] != s.Owner(id) || got[0] == "n3" {
			t.Errorf("%s went to %v, new owner %s", id, got, s.Owner(id))
		}
	}
	var states []string
	for _, n := range c.Nodes() {
		states = append(states, n.ID+"="+n.State)
	}
	if strings.Join(states, " ") != "n1=alive n2=alive n3=dead" {
		t.Errorf("nodes %v", states)
	}
}

// A connection error makes the client refresh too.
func TestClusterRefreshAfterConnectionError(t *testing.T) {
	fc := newFakeCluster(t, 3)
	c := newCluster(t, fc)
	ids := ownedBy(fc.ring(), "n2", 1)
	fc.node("n2").srv.Close()
	fc.set("n2", "dead")
	if _, err := c.Incr(t.Context(), ids[0], 1); err != nil {
		t.Fatal(err)
	}
	poll(t, "ring version 8", func() bool { return c.RingVersion() == 8 })
	if o := c.Owner(ids[0]); o == "n2" {
		t.Fatalf("owner still n2")
	}
}

func TestClusterSeeds(t *testing.T) {
	fc := newFakeCluster(t, 2)
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	c, err := client.NewCluster([]string{dead.URL, fc.nodes[1].srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if len(c.Nodes()) != 2 {
		t.Fatalf("nodes %v", c.Nodes())
	}
	if err := c.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	c.Close() // idempotent

	notCluster := httptest.NewServer(http.NotFoundHandler())
	defer notCluster.Close()
	_, err = client.NewCluster([]string{dead.URL, notCluster.URL}, client.WithTimeout(time.Second))
	if !errors.Is(err, client.ErrClusterUnavailable) || !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("no cluster: %v", err)
	}
	if _, err := client.NewCluster(nil); err == nil {
		t.Fatal("no seeds: no error")
	}
}

// An alive member whose address is not known yet keeps its place on the
// ring, but its ids are sent to the next replica.
func TestClusterMemberWithoutAddress(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.noAddr["n3"] = true
	c := newCluster(t, fc)
	s := fc.ring()
	for _, id := range ownedBy(s, "n3", 10) {
		if c.Owner(id) != "n3" {
			t.Fatalf("Owner(%s) = %s, want n3", id, c.Owner(id))
		}
		if _, err := c.Incr(t.Context(), id, 1); err != nil {
			t.Fatal(err)
		}
		if got := fc.byID()[id]; len(got) != 1 || got[0] != s.Replicas(id, 3)[1] {
			t.Fatalf("%s went to %v, want the second replica of %v", id, got, s.Replicas(id, 3))
		}
	}
	if n := len(fc.node("n3").requests()); n != 0 {
		t.Fatalf("n3 got %d requests", n)
	}
}
