package node

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/counterd/counterd/internal/cluster/membership"
	"github.com/counterd/counterd/internal/cluster/ring"
	"github.com/counterd/counterd/internal/contract"
)

// Defaults applied to zero Config fields.
const (
	DefaultPushInterval        = 100 * time.Millisecond
	DefaultPushGap             = 10 * time.Millisecond
	DefaultAntiEntropyInterval = 5 * time.Second
	DefaultRejoinInterval      = 2 * time.Second
	DefaultRPCTimeout          = 5 * time.Second
	DefaultRequestTimeout      = 5 * time.Second
	DefaultFenceTimeout        = 3 * time.Second
	DefaultLimitReplication    = time.Second
)

// Config configures a Node. Zero fields take the documented defaults.
type Config struct {
	NodeID string   // this node's name (--node-id); required
	Gossip string   // gossip bind address (--gossip); default membership.DefaultBindAddr
	Join   []string // gossip addresses to join (--join); may list this node and peers not up yet

	// Durability resolves engine.DurabilityDefault (--durability); default
	// contract.Async.
	Durability contract.Durability

	ReplicationFactor int // R, owner included; default ring.DefaultReplicationFactor, capped at the node count
	VirtualNodes      int // ring positions per node; default ring.DefaultVirtualNodes

	PushInterval        time.Duration // replication period of what a push left pending (failed pushes); default 100ms
	PushGap             time.Duration // least time between two pushes: a change goes at once unless one started less ago (push.go); default 10ms, negative: none
	AntiEntropyInterval time.Duration // digest exchange period; default 5s
	RejoinInterval      time.Duration // retry period for --join peers not in the cluster; default 2s
	RPCTimeout          time.Duration // deadline of peer calls without one; default 5s
	// RequestTimeout bounds a client request whose context has no
	// deadline, everything included (forwarding, fence, lease, replication,
	// failover, a read's fallback to a replica): past it the request
	// answers ErrUnavailable (503) even when a peer hangs; default 5s.
	RequestTimeout time.Duration
	FenceTimeout   time.Duration // how long a new owner waits for replicas to agree; default 3s
	// LimitReplication is how often the rate-limit state charged on the
	// keys this node owns goes to each key's next replica, its owner if
	// this node dies (SetRateLimit); default 1s, negative: never.
	LimitReplication time.Duration
	// FailoverWait bounds how long a forwarder waits for the ring to move
	// an id away from an owner that failed a call and a direct probe
	// (probe.go); default 3s.
	FailoverWait time.Duration
	// LeaseDuration is how long an owner may serve owner operations after
	// the renewal round that a majority of the members granted (lease.go);
	// renewed every LeaseDuration/4. Default 400ms; negative: no lease
	// (owners serve while they own ids on their ring).
	LeaseDuration time.Duration
	// LeaseDrift is added to a lease by the nodes that wait for it to run
	// out (a new owner): the bound on how much two nodes' clocks may
	// disagree about a lease's length. Default 100ms.
	LeaseDrift time.Duration

	// Limits are what Apply and ApplyBatch accept, checked before any op
	// is routed (so a bad op in a batch that spans owners applies
	// nowhere); default contract.DefaultLimits().
	Limits contract.Limits

	// PeerTLS, when set, is the client side of peer gRPC calls (mutual
	// TLS, --peer-ca); the server side is the --grpc server's. Default:
	// plaintext.
	PeerTLS *tls.Config
	// PeerDialOptions are added to every peer connection's (the server
	// package's tracing interceptors). Default: none.
	PeerDialOptions []grpc.DialOption

	// NoHashTags keeps this node from announcing placement by hash tag
	// (capHashTags), as a node of a version before it: the whole cluster
	// then places every id by its whole name. Tests use it to play a
	// cluster of mixed versions.
	NoHashTags bool

	// Membership tunes gossip timing (tests use fast timings); its NodeID,
	// BindAddr, Join, Meta, Logger and OnEvent are set by the node.
	Membership membership.Config
	Logger     *slog.Logger // default slog.Default()
}

func (c Config) withDefaults() Config {
	set := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	set(&c.PushInterval, DefaultPushInterval)
	set(&c.PushGap, DefaultPushGap)
	set(&c.AntiEntropyInterval, DefaultAntiEntropyInterval)
	set(&c.RejoinInterval, DefaultRejoinInterval)
	set(&c.RPCTimeout, DefaultRPCTimeout)
	set(&c.RequestTimeout, DefaultRequestTimeout)
	set(&c.FenceTimeout, DefaultFenceTimeout)
	set(&c.LimitReplication, DefaultLimitReplication)
	set(&c.FailoverWait, DefaultFailoverWait)
	set(&c.LeaseDuration, DefaultLeaseDuration)
	set(&c.LeaseDrift, DefaultLeaseDrift)
	if c.Durability == contract.DurabilityDefault {
		c.Durability = contract.Async
	}
	if c.Gossip == "" {
		c.Gossip = membership.DefaultBindAddr
	}
	if c.Limits == (contract.Limits{}) {
		c.Limits = contract.DefaultLimits()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports the first invalid setting.
func (c Config) Validate() error {
	if c.NodeID == "" {
		return errors.New("cluster: NodeID is empty")
	}
	if err := (ring.Config{VirtualNodes: c.VirtualNodes, ReplicationFactor: c.ReplicationFactor}).Validate(); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	if c.PushInterval < 0 || c.AntiEntropyInterval < 0 || c.RejoinInterval < 0 || c.RPCTimeout < 0 || c.RequestTimeout < 0 || c.FenceTimeout < 0 {
		return errors.New("cluster: negative interval")
	}
	if c.LeaseDuration > 0 && c.LeaseDuration < 10*time.Millisecond || c.LeaseDrift < 0 {
		return errors.New("cluster: lease duration below 10ms, or negative lease drift")
	}
	return nil
}

// Node is one member of a peer cluster and the contract.Backend the front ends
// serve in cluster mode: it places ids on a consistent-hash ring kept in
// sync with gossip membership, forwards operations on ids it does not own
// to their owner in one hop, replicates state to each id's R replicas, and
// fans aggregate reads out to every member.
//
// Lifecycle: New, Register (on the gRPC server), Start once the listeners
// are bound, then Drain (graceful leave) and/or Close. Close is idempotent
// and does not close the Store. Methods are safe for concurrent use.
type Node struct {
	cfg     Config
	log     *slog.Logger
	self    string
	store   Store
	ring    *ring.Ring
	peers   *peers
	metrics *metrics

	// gate orders owner operations against ring changes: an owner holds it
	// shared from its ownership check to the end of the local apply, and a
	// ring change takes it exclusively. Once a peer has seen this node's new
	// ring (fence), no op admitted under the old ring is still applying.
	gate sync.RWMutex

	members atomic.Pointer[membership.Membership]
	joined  atomic.Bool // a peer other than self has been seen, and installed in the ring
	// minority is set while this node sees at most half of the members it
	// knows (alive + dead; left ones do not count): it is on the small side
	// of a partition, or most of the cluster is down.
	minority atomic.Bool
	leaving  atomic.Bool  // Drain started: owner writes replicate synchronously
	inflight atomic.Int64 // writes between admission and the end of their replication

	initialRing *ring.Snapshot // the one-node ring before Start: the first handoff's base

	fence    fencer
	promises promises // ownership epochs promised to claimants (epoch.go)
	lease    leases   // owner leases (lease.go)
	dirty    dirtySet
	digests  digestCache // anti-entropy digests by state (digestcache.go)
	idem     idemCache   // idempotency records shipped by other owners
	stripes  stripes     // keyed applies vs exports (idem.go)
	dedupe   markStore   // dedupe marks of the counters held here (marks.go)
	// markLocks serializes marked applies per id: a mark is checked and
	// created as one step (marked.go).
	markLocks stripes
	tombs     tombs         // recently deleted ids (tombstones.go)
	handoff   chan struct{} // 1-buffered: a ring change to hand off
	rl        RateLimit     // set before Start (ratelimit.go)
	quota     qstate        // quotas (quota.go)

	ctx       context.Context // cancelled by Close; parent of background work
	cancel    context.CancelFunc
	wg        sync.WaitGroup // background loops
	closeOnce sync.Once

	incarnation string                        // this process's life (readview.go)
	handedOff   atomic.Pointer[ring.Snapshot] // the last ring whose handoff completed
	views       viewCache                     // handoffs seen complete by this coordinator
	marks       inboundMarks                  // peers' handoffs into this node's rings (readview.go)
	asking      atomic.Bool                   // askMarks is running
	// passed holds the rings installed since the last completed handoff
	// (handoff.go).
	passed struct {
		mu    sync.Mutex // guards rings
		rings []*ring.Snapshot
	}
}

// New returns a node serving store. It does not touch the network until
// Start.
func New(cfg Config, store Store) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	n := &Node{
		cfg:     cfg,
		log:     cfg.Logger.With("node", cfg.NodeID),
		self:    cfg.NodeID,
		store:   store,
		ring:    ring.New(ring.Config{VirtualNodes: cfg.VirtualNodes, ReplicationFactor: cfg.ReplicationFactor}),
		peers:   newPeers(cfg.PeerTLS, cfg.PeerDialOptions...),
		metrics: newMetrics(),
		handoff: make(chan struct{}, 1),
		ctx:     ctx,
		cancel:  cancel,
	}
	n.fence.init()
	n.promises.init()
	n.lease.init()
	n.dirty.init()
	n.digests.init(store.Now().UnixNano())
	n.store = invalidatingStore{Store: store, c: &n.digests}
	n.idem.init()
	n.ring.Set([]string{n.self})
	n.initialRing = n.ring.Snapshot()
	n.handedOff.Store(n.initialRing)
	n.incarnation = newIncarnation()
	return n, nil
}

// ID is this node's name.
func (n *Node) ID() string { return n.self }

// Ring returns the current ring snapshot.
func (n *Node) Ring() *ring.Snapshot { return n.ring.Snapshot() }

// Start joins the cluster, gossiping meta (the actual bound addresses). It
// does not wait for the --join peers: those that are not up yet are retried
// in the background every RejoinInterval, also later to heal partitions.
func (n *Node) Start(meta Meta) error {
	if !n.cfg.NoHashTags && !meta.has(capHashTags) {
		meta.Caps = append(slices.Clone(meta.Caps), capHashTags)
	}
	b, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	n.peers.set(n.self, meta)
	n.loadStoredRecords() // before any peer can see this node
	n.loadMarks()
	mc := n.cfg.Membership
	mc.NodeID, mc.BindAddr, mc.Join, mc.Meta = n.self, n.cfg.Gossip, nil, b
	mc.Logger = n.cfg.Logger
	mc.OnEvent = func(membership.Event) { n.refresh() }
	m, err := membership.Start(mc)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	n.members.Store(m)
	recs := n.reloadRecords()
	n.refresh()
	n.log.Info("cluster member started", "gossip", m.Addr(), "join", n.cfg.Join, "grpc", meta.GRPC)
	n.goLoop(n.joinLoop)
	n.goLoop(n.pushLoop)
	n.goLoop(func() { n.every(markExpireInterval, n.expireMarks) })
	n.goLoop(func() { n.tick(n.cfg.AntiEntropyInterval, "anti-entropy", n.antiEntropy) })
	n.goLoop(n.handoffLoop)
	n.goLoop(n.leaseLoop)
	n.goLoop(func() { n.announceRecords(recs) })
	if n.rl.Limiter != nil && n.cfg.LimitReplication > 0 {
		n.goLoop(func() { n.tick(n.cfg.LimitReplication, "rate-limit replication", n.replicateLimits) })
	}
	if g := n.rl.Global; g != nil {
		n.goLoop(func() { n.tick(g.Interval(), "rate-limit global shares", g.Exchange) })
	}
	return nil
}

func (n *Node) goLoop(f func()) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		f()
	}()
}

// every runs f every d until Close.
func (n *Node) every(d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}

// tick runs f every d until Close, logging its errors at debug level.
func (n *Node) tick(d time.Duration, what string, f func(context.Context) error) {
	n.every(d, func() {
		if err := f(n.ctx); err != nil {
			n.log.Debug("cluster: "+what, "err", err)
		}
	})
}

// joinLoop contacts the --join peers that are not alive members, at once
// and then every RejoinInterval.
func (n *Node) joinLoop() {
	n.joinMissing()
	n.every(n.cfg.RejoinInterval, n.joinMissing)
}

func (n *Node) joinMissing() {
	m := n.members.Load()
	if m == nil || n.leaving.Load() {
		return
	}
	known := map[string]bool{m.Addr(): true}
	for _, mem := range m.Members() {
		if mem.State == membership.StateAlive {
			known[mem.Addr] = true
		}
	}
	for _, addr := range n.cfg.Join {
		if known[addr] {
			continue
		}
		if _, err := m.Join([]string{addr}); err != nil {
			n.log.Debug("cluster: join", "addr", addr, "err", err)
		}
	}
}

// refresh rebuilds the peer table and the ring from membership.
func (n *Node) refresh() {
	m := n.members.Load()
	if m == nil {
		return
	}
	var alive []string
	dead, other, tags := 0, false, true
	members := m.Members()
	n.leaseMembers(members)
	for _, mem := range members {
		if mem.State == membership.StateDead {
			dead++
		}
		if mem.State != membership.StateAlive {
			continue
		}
		if mem.ID != n.self {
			n.peers.set(mem.ID, parseMeta(mem.Meta))
			other = true
		}
		if mem.ID != n.self || !n.leaving.Load() {
			alive = append(alive, mem.ID)
			tags = tags && parseMeta(mem.Meta).has(capHashTags)
		}
	}
	// The flag turns on before the ring shrinks and off after it grows:
	// whoever reads the ring and then the flag (replicateNow) never pairs
	// a ring of the small side with a cleared flag.
	minority := len(alive)*2 <= len(alive)+dead
	if minority {
		n.minority.Store(true)
	}
	n.setRing(alive, tags)
	if other {
		// Only once the ring holds the peer: until then this node's ring
		// is its own alone, and a read view at it would answer for every
		// id from this node's store (a restarted node: without what the
		// others took while it was down).
		n.joined.Store(true)
	}
	if !minority {
		n.minority.Store(false)
	}
}

// setRing installs a new node set and placement (by hash tag when tags:
// every member supports it), waiting for owner operations admitted under
// the old ring to finish, and schedules a handoff.
func (n *Node) setRing(nodes []string, tags bool) {
	if h := knobs.beforeSetRing.Load(); h != nil {
		(*h)(n.self, nodes)
	}
	old := n.ring.Snapshot()
	// Before the ring is installed: a view part that reads the new ring
	// must not find a mark of a previous life of it (readview.go).
	n.marks.keepOnly(nodeSetHash(nodes, tags))
	n.gate.Lock()
	changed := n.ring.SetTags(nodes, tags)
	s := n.ring.Snapshot()
	if changed {
		n.passed.mu.Lock()
		n.passed.rings = append(n.passed.rings, s)
		n.passed.mu.Unlock()
	}
	n.gate.Unlock()
	if !changed {
		return
	}
	n.leaseRingChanged(s)
	for _, id := range s.Nodes() {
		if id != n.self && !slices.Contains(old.Nodes(), id) {
			n.peers.resetBackoff(id) // a (re)joined node: reconnect now (reconnect.go)
			n.dedupe.forget(id)      // it may have restarted without what was pushed to it (marks.go)
		}
	}
	n.metrics.ringVersion.Set(float64(s.Version()))
	n.log.Info("cluster ring changed", "version", s.Version(), "nodes", s.Nodes(), "hash_tags", s.Tags())
	select {
	case n.handoff <- struct{}{}:
	default:
	}
}

// Close stops gossip (without leaving: peers will see this node dead),
// background work and peer connections. It does not close the Store.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		n.cancel()
		// Shut gossip down before waiting for the loops: it aborts a join
		// attempt blocked on an unreachable seed.
		if m := n.members.Load(); m != nil {
			_ = m.Shutdown()
		}
		n.wg.Wait()
		n.peers.close()
	})
	return nil
}

// Drain leaves the cluster gracefully. The node first takes itself off its
// own ring (new requests are forwarded; ops admitted before finish), then
// flushes pending replication to the new replica sets, leaves the gossip,
// and hands every id it holds to its new replicas, retrying the peers that
// did not acknowledge until ctx ends. Requests for ids it
// owned answer a retryable ErrWrongOwner until the others have seen it
// leave. Call Close afterwards.
func (n *Node) Drain(ctx context.Context) error {
	m := n.members.Load()
	if m == nil || n.leaving.Swap(true) {
		return nil
	}
	start := time.Now()
	old := n.ring.Snapshot()
	// Rate-limit state first, while this node still decides its keys
	// (nobody decides them elsewhere yet); again after it stops, for what
	// it decided meanwhile.
	next := ring.New(ring.Config{VirtualNodes: n.cfg.VirtualNodes, ReplicationFactor: n.cfg.ReplicationFactor})
	next.SetTags(slices.DeleteFunc(old.Nodes(), func(id string) bool { return id == n.self }), old.Tags())
	limErr := n.handOffLimits(ctx, old, next.Snapshot())
	n.refresh() // leaving: without this node
	// Writes admitted before must finish replicating before the others
	// see this node go: the new owners' fences do not ask it.
	errs := []error{limErr, n.waitInflight(ctx), n.flushDirty(ctx)}
	// memberlist waits this long for its leave broadcast to go out; a
	// loaded node missed 1 s in CI (the leave still happened).
	leaveTimeout := 3 * time.Second
	if d, ok := ctx.Deadline(); ok {
		leaveTimeout = min(leaveTimeout, time.Until(d)/2)
	}
	errs = append(errs, m.Leave(leaveTimeout))
	errs = append(errs, n.drainHandOff(ctx, []*ring.Snapshot{old}, n.ring.Snapshot()))
	err := errors.Join(errs...)
	n.log.Info("cluster drained", "took", time.Since(start).Round(time.Millisecond), "err", err)
	return err
}

// waitInflight waits until no write is between admission and the end of
// its replication.
func (n *Node) waitInflight(ctx context.Context) error {
	for n.inflight.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// Ready is nil while the node can serve: its engine is ready and, when
// --join lists other nodes, it has met at least one of them once.
func (n *Node) Ready() error {
	if err := n.store.Ready(); err != nil {
		return err
	}
	return n.joinedOrAlone()
}

func (n *Node) hasOtherSeeds() bool {
	m := n.members.Load()
	if m == nil {
		return len(n.cfg.Join) > 0
	}
	return slices.ContainsFunc(n.cfg.Join, func(a string) bool { return a != m.Addr() })
}

// bounded gives a client request without a deadline RequestTimeout, so
// that no wait on a peer (one that accepts connections and never answers)
// outlasts it.
func (n *Node) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, n.cfg.RequestTimeout)
}

// quorum is the write quorum for r replicas: floor(r/2)+1.
func quorum(r int) int { return r/2 + 1 }
