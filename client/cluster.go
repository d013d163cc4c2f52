package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/counterd/counterd/internal/cluster/ring"
)

// RingVersionHeader is the response header in which a cluster node reports
// the version of its ring. A Cluster refreshes its copy of the ring when a
// node reports a version other than the one it reported before.
const RingVersionHeader = "Counterd-Ring-Version"

// DefaultRefreshInterval is how often a Cluster fetches GET /cluster.
const DefaultRefreshInterval = 10 * time.Second

// minRefreshGap spaces refreshes triggered by answers, so a node that keeps
// reporting a changing version cannot make the client refresh in a loop.
const minRefreshGap = 100 * time.Millisecond

// maxClusterDocBytes bounds the GET /cluster answer.
const maxClusterDocBytes = 4 << 20

// ErrClusterUnavailable is returned by NewCluster and Cluster.Refresh when
// no node or seed answered GET /cluster with a usable document.
var ErrClusterUnavailable = errors.New("client: no node answered GET /cluster")

// clusterConfig holds the options only NewCluster uses.
type clusterConfig struct {
	refresh   time.Duration
	threshold int
	cooldown  time.Duration
	now       func() time.Time
}

func defaultClusterConfig() clusterConfig {
	return clusterConfig{refresh: DefaultRefreshInterval, threshold: DefaultBreakerThreshold,
		cooldown: DefaultBreakerCooldown, now: time.Now}
}

// WithRefreshInterval sets how often a Cluster fetches GET /cluster
// (default 10s; 0 or negative: only when an answer or a connection error
// suggests the ring changed). New ignores it.
func WithRefreshInterval(d time.Duration) Option {
	return func(c *config) { c.cluster.refresh = d }
}

// WithBreaker configures the per-node circuit breakers of a Cluster: a
// node's breaker opens after threshold consecutive failures (connection
// errors and 5xx answers) and lets one probe through after cooldown
// (defaults 5 and 5s). New ignores it.
func WithBreaker(threshold int, cooldown time.Duration) Option {
	return func(c *config) {
		c.cluster.threshold = max(threshold, 1)
		c.cluster.cooldown = max(cooldown, 0)
	}
}

// WithClock sets the clock of a Cluster's circuit breakers (default
// time.Now), for tests. New ignores it.
func WithClock(now func() time.Time) Option {
	return func(c *config) {
		if now != nil {
			c.cluster.now = now
		}
	}
}

// Cluster is a Client of a counterd cluster that sends each operation on
// one id straight to the node owning it. It fetches GET /cluster from a
// node, builds the same consistent-hash ring as the servers (same virtual
// nodes, replication factor and alive members), and for an id tries its
// owner, then its other replicas, then any other node, skipping nodes
// whose circuit breaker is open. Operations over many ids (Aggregate,
// List, Batch, multi-key PFCount, rollup specs) go to any node, which fans
// out. Rate-limit checks go to the owner of the limit key.
//
// Routing is only an optimisation: every node forwards what it does not
// own, so a stale ring costs one hop, never a wrong answer. A failed
// attempt is retried (with the same Idempotency-Key, after the jittered
// backoff) on the next node, within WithRetries.
//
// The ring is refreshed every WithRefreshInterval, when a node answers
// with a Counterd-Ring-Version other than the one it reported before, and
// after connection errors. A Cluster is safe for concurrent use. Close
// stops its refresh goroutine and must be called.
type Cluster struct {
	*Client
	cs *clusterState
}

// Node is a member of the cluster as a Cluster sees it.
type Node struct {
	ID      string       // node id (--node-id)
	State   string       // membership state: "alive", "dead", "left", ...
	HTTP    string       // HTTP address as the node advertises it
	Breaker BreakerState // the client's circuit breaker for the node
}

// NewCluster returns a Cluster that learns the cluster from the first of
// seeds (HTTP addresses of any nodes, as for New) that answers GET
// /cluster. The options are those of New plus WithRefreshInterval,
// WithBreaker and WithClock. It fails when no seed answers.
func NewCluster(seeds []string, opts ...Option) (*Cluster, error) {
	if len(seeds) == 0 {
		return nil, errors.New("client: NewCluster: no seeds")
	}
	urls := make([]*url.URL, len(seeds))
	for i, s := range seeds {
		u, err := parseAddr(s)
		if err != nil {
			return nil, err
		}
		urls[i] = u
	}
	c, err := New(seeds[0], opts...)
	if err != nil {
		return nil, err
	}
	cs := &clusterState{c: c, cfg: c.cfg.cluster, seeds: urls, breakers: map[string]*breaker{}, seen: map[string]uint64{},
		nudge: make(chan struct{}, 1)}
	ctx, cancel := context.WithTimeout(context.Background(), orDefault(c.cfg.timeout, 10*time.Second))
	defer cancel()
	if err := cs.refresh(ctx); err != nil {
		c.Close()
		return nil, err
	}
	c.cl = cs
	cs.ctx, cs.stop = context.WithCancel(context.Background())
	cs.wg.Add(1)
	go cs.loop()
	return &Cluster{Client: c, cs: cs}, nil
}

// orDefault returns d, or def when d is not positive.
func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Close stops the refresh goroutine and closes idle connections. It is
// idempotent.
func (c *Cluster) Close() error {
	c.cs.closeOnce.Do(func() {
		c.cs.stop()
		c.cs.wg.Wait()
	})
	return c.Client.Close()
}

// Refresh fetches GET /cluster now, from a known node or else a seed.
func (c *Cluster) Refresh(ctx context.Context) error { return c.cs.refresh(ctx) }

// RingVersion is the ring version of the last /cluster document.
func (c *Cluster) RingVersion() uint64 { return c.cs.view.Load().version }

// Owner returns the id of the node owning id on the client's ring.
func (c *Cluster) Owner(id string) string { return c.cs.view.Load().ring.Owner(id) }

// Nodes returns the members of the last /cluster document, sorted by id.
func (c *Cluster) Nodes() []Node {
	v := c.cs.view.Load()
	ns := make([]Node, len(v.members))
	for i, m := range v.members {
		ns[i] = Node{ID: m.id, State: m.state, HTTP: m.http, Breaker: m.b.current()}
	}
	return ns
}

// clusterDoc is the answer of GET /cluster.
type clusterDoc struct {
	Self              string          `json:"self"`
	RingVersion       uint64          `json:"ring_version"`
	VNodes            int             `json:"vnodes"`
	ReplicationFactor int             `json:"replication_factor"`
	HashTags          bool            `json:"hash_tags"` // the ring places ids by hash tag
	Members           []clusterMember `json:"members"`
}

type clusterMember struct {
	ID        string  `json:"id"`
	State     string  `json:"state"`
	Gossip    string  `json:"gossip,omitempty"`
	HTTP      string  `json:"http"`
	RESP      string  `json:"resp,omitempty"`
	GRPC      string  `json:"grpc,omitempty"`
	Ownership float64 `json:"ownership"`
}

// parseClusterDoc decodes and checks a /cluster document: members with
// distinct non-empty ids, at least one alive member with a usable HTTP
// address, and a ring configuration the ring package accepts. An alive
// member without a usable address (its gossip metadata not known yet)
// stays on the ring but is not sent requests. Unknown fields are ignored
// (newer servers may add some).
func parseClusterDoc(raw []byte) (*clusterDoc, error) {
	var d clusterDoc
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, fmt.Errorf("cluster document: %w", err)
	}
	if err := (ring.Config{VirtualNodes: d.VNodes, ReplicationFactor: d.ReplicationFactor}).Validate(); err != nil {
		return nil, fmt.Errorf("cluster document: %w", err)
	}
	ids := make(map[string]bool, len(d.Members))
	var routable bool
	var addrErr error
	for i, m := range d.Members {
		if m.ID == "" || ids[m.ID] {
			return nil, fmt.Errorf("cluster document: members[%d]: empty or repeated id %q", i, m.ID)
		}
		ids[m.ID] = true
		if m.State == "alive" {
			_, _, err := nodeAddr(m.HTTP, "http")
			routable = routable || err == nil
			addrErr = firstErr(addrErr, err)
		}
	}
	if !routable {
		return nil, fmt.Errorf("cluster document: no alive member with a usable HTTP address (%v)", addrErr)
	}
	return &d, nil
}

// nodeAddr splits a member's HTTP address, "host:port" (taking scheme) or
// a URL without a path, into scheme and host.
func nodeAddr(addr, scheme string) (string, string, error) {
	s := addr
	if !strings.Contains(s, "://") {
		s = scheme + "://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") ||
		strings.Trim(u.Path, "/") != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", "", fmt.Errorf("http address %q is not host:port or an http(s) URL of a host", addr)
	}
	return u.Scheme, u.Host, nil
}

// firstErr returns a, or b when a is nil.
func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// member is a node of a view; breakers outlive views.
type member struct {
	id, state, http string
	scheme, host    string // empty unless alive with a usable address
	b               *breaker
}

// view is an immutable picture of the cluster built from one document.
type view struct {
	version  uint64
	ring     *ring.Snapshot     // of the alive members
	members  []*member          // sorted by id
	byID     map[string]*member // every member
	routable []*member          // alive with an address, sorted by id
}

// clusterState is the routing part of a Cluster.
type clusterState struct {
	c     *Client
	cfg   clusterConfig
	seeds []*url.URL
	view  atomic.Pointer[view]
	rr    atomic.Uint32 // rotates the first node of calls on no id

	refreshMu sync.Mutex // serialises refreshes

	mu       sync.Mutex          // guards breakers and seen
	breakers map[string]*breaker // by node id
	seen     map[string]uint64   // by node id: the ring version it last reported

	nudge     chan struct{} // asks the loop to refresh (capacity 1)
	ctx       context.Context
	stop      context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// install makes d the current view.
func (cs *clusterState) install(d *clusterDoc) {
	v := &view{version: d.RingVersion, byID: make(map[string]*member, len(d.Members))}
	var alive []string
	cs.mu.Lock()
	for _, dm := range d.Members {
		b := cs.breakers[dm.ID]
		if b == nil {
			b = newBreaker(cs.cfg.threshold, cs.cfg.cooldown, cs.cfg.now)
			cs.breakers[dm.ID] = b
		}
		m := &member{id: dm.ID, state: dm.State, http: dm.HTTP, b: b}
		if dm.State == "alive" {
			alive = append(alive, dm.ID)
			if scheme, host, err := nodeAddr(dm.HTTP, cs.seeds[0].Scheme); err == nil {
				m.scheme, m.host = scheme, host
				v.routable = append(v.routable, m)
			}
		}
		v.members = append(v.members, m)
		v.byID[m.id] = m
	}
	if d.Self != "" {
		cs.seen[d.Self] = d.RingVersion
	}
	cs.mu.Unlock()
	byID := func(a, b *member) int { return strings.Compare(a.id, b.id) }
	slices.SortFunc(v.members, byID)
	slices.SortFunc(v.routable, byID)
	r := ring.New(ring.Config{VirtualNodes: d.VNodes, ReplicationFactor: d.ReplicationFactor})
	r.SetTags(alive, d.HashTags)
	v.ring = r.Snapshot()
	cs.view.Store(v)
}

// refresh fetches /cluster from the known alive nodes, then the seeds,
// and installs the first usable document.
func (cs *clusterState) refresh(ctx context.Context) error {
	cs.refreshMu.Lock() // one at a time, so an older document never replaces a newer one
	defer cs.refreshMu.Unlock()
	var bases []*url.URL
	if v := cs.view.Load(); v != nil {
		for _, m := range v.routable {
			u := *cs.c.base
			u.Scheme, u.Host = m.scheme, m.host
			bases = append(bases, &u)
		}
	}
	bases = append(bases, cs.seeds...)
	var errs []error
	for _, b := range bases {
		d, err := cs.fetch(ctx, b)
		if err == nil {
			cs.install(d)
			return nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("%w: %w", ErrClusterUnavailable, errors.Join(errs...))
}

// fetch gets and parses base's /cluster.
func (cs *clusterState) fetch(ctx context.Context, base *url.URL) (*clusterDoc, error) {
	u := *base
	u.Path += "/cluster"
	if u.RawPath != "" {
		u.RawPath += "/cluster"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	if cs.c.cfg.userAgent != "" {
		req.Header.Set("User-Agent", cs.c.cfg.userAgent)
	}
	if cs.c.cfg.token != "" {
		req.Header.Set("Authorization", "Bearer "+cs.c.cfg.token)
	}
	resp, err := cs.c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxClusterDocBytes))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u.String(), err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %w", u.String(), decodeError(resp.StatusCode, raw))
	}
	d, err := parseClusterDoc(raw)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u.String(), err)
	}
	return d, nil
}

// loop refreshes every interval and when nudged, until stopped.
func (cs *clusterState) loop() {
	defer cs.wg.Done()
	var tick <-chan time.Time
	if cs.cfg.refresh > 0 {
		t := time.NewTicker(cs.cfg.refresh)
		defer t.Stop()
		tick = t.C
	}
	gap := time.NewTimer(0)
	defer gap.Stop()
	for {
		select {
		case <-cs.ctx.Done():
			return
		case <-tick:
		case <-cs.nudge:
		}
		ctx, cancel := context.WithTimeout(cs.ctx, orDefault(cs.c.cfg.timeout, 10*time.Second))
		_ = cs.refresh(ctx) // on failure the old view stays: routing is an optimisation
		cancel()
		gap.Reset(minRefreshGap)
		select {
		case <-cs.ctx.Done():
			return
		case <-gap.C:
		}
	}
}

// kick asks the loop for a refresh.
func (cs *clusterState) kick() {
	select {
	case cs.nudge <- struct{}{}:
	default:
	}
}

// sawVersion notes the ring version node reported in an answer and asks
// for a refresh when it changed.
func (cs *clusterState) sawVersion(node, header string) {
	if header == "" {
		return
	}
	v, err := strconv.ParseUint(header, 10, 64)
	if err != nil {
		return
	}
	cs.mu.Lock()
	last, ok := cs.seen[node]
	if !ok {
		last = cs.view.Load().version
	}
	cs.seen[node] = v
	cs.mu.Unlock()
	if v != last {
		cs.kick()
	}
}

// pick returns the node for the next attempt on key ("" for any node):
// the owner, the other replicas, then the other alive nodes, skipping
// those without an address, those whose breaker is open and, while others
// remain, those in failed.
func (cs *clusterState) pick(key string, failed []string) (*member, error) {
	v := cs.view.Load()
	cands := make([]*member, 0, len(v.routable))
	if key != "" {
		for _, id := range v.ring.Replicas(key, 0) {
			if m := v.byID[id]; m.host != "" {
				cands = append(cands, m)
			}
		}
	}
	start := int(cs.rr.Add(1))
	for i := range v.routable {
		if m := v.routable[(start+i)%len(v.routable)]; !slices.Contains(cands, m) {
			cands = append(cands, m)
		}
	}
	for _, skipFailed := range []bool{true, false} {
		for _, m := range cands {
			if skipFailed && slices.Contains(failed, m.id) {
				continue
			}
			if m.b.allow() {
				return m, nil
			}
		}
	}
	cs.kick() // perhaps the nodes moved
	return nil, fmt.Errorf("%w (%d nodes)", ErrCircuitOpen, len(cands))
}

// route is one call's walk over the nodes that may serve it.
type route struct {
	cs     *clusterState
	key    string  // routing key; "" for any node
	u      url.URL // the request's URL; attempts replace scheme and host
	cur    *member
	failed []string // ids of the nodes that failed in this call
}

// route starts the walk of request r, whose URL is u.
func (cs *clusterState) route(r *request, u url.URL) *route {
	key := r.key
	if key == "" {
		key = routeID(r.path)
	}
	return &route{cs: cs, key: key, u: u}
}

// next returns the URL of the next attempt.
func (rt *route) next() (string, error) {
	m, err := rt.cs.pick(rt.key, rt.failed)
	if err != nil {
		return "", err
	}
	rt.cur = m
	u := rt.u
	u.Scheme, u.Host = m.scheme, m.host
	return u.String(), nil
}

// done records the outcome of the attempt next prepared: answer is the
// answer's header (nil without one).
func (rt *route) done(ctx context.Context, answer http.Header, err error) {
	m := rt.cur
	var ne *netError
	var ae *Error
	switch {
	case err == nil:
		m.b.success()
	case ctx.Err() != nil:
		m.b.release() // the caller gave up: nothing learnt about the node
	case errors.As(err, &ne):
		m.b.failure()
		rt.failed = append(rt.failed, m.id)
		rt.cs.kick()
	case errors.As(err, &ae) && ae.Temporary():
		m.b.failure()
		rt.failed = append(rt.failed, m.id)
	default:
		m.b.success() // the node answered
	}
	if answer != nil {
		rt.cs.sawVersion(m.id, answer.Get(RingVersionHeader))
	}
}

// routeID returns the counter id in an escaped request path
// "/counters/{id}[/...]", or "" for paths on no single id (the list, an
// aggregate "/counters/{prefix}*/aggregate", and every other route).
func routeID(path string) string {
	rest, ok := strings.CutPrefix(path, "/counters/")
	if !ok {
		return ""
	}
	seg, _, _ := strings.Cut(rest, "/")
	if seg == "" || strings.HasSuffix(seg, "*") { // escape never leaves a '*'
		return ""
	}
	id, err := url.PathUnescape(seg)
	if err != nil {
		return ""
	}
	return id
}
