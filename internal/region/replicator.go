package region

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/counterd/counterd/internal/chunksync"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/tlsconfig"
)

// Config configures a Replicator.
type Config struct {
	Name  string // this region
	Node  string // this node's id (GET /regions)
	Peers []Peer
	// Local is this node's engine: its writes are what this region
	// ships (through the Backend Wrap returns, or Changes).
	Local *engine.Engine
	// Cluster, set on a node of a cluster region (--join), says which
	// counters this node ships and serves this region's part of global
	// reads (nil: an embedded region of one node).
	Cluster *Cluster
	// Changes, when set, is where the node's changes are recorded (a
	// cluster node's store records them, not the front end; NewChanges).
	Changes *Changes
	// Durable, set on a node of a tiered region (instead of Local),
	// ships the region's changes from its durable tier's record and serves
	// this region's part of global reads (durable.go).
	Durable *Durable
	// Dir holds the copies of the peer regions' states, one engine each
	// under Dir/NAME (default: a "regions" directory next to Local's).
	Dir string
	// Interval is the replication period (default 1 s).
	Interval time.Duration
	// SyncInterval is the period of anti-entropy (a full hash-addressed
	// comparison of each peer's state with the local copy of it); 0: only
	// at start and when a peer restarted.
	SyncInterval time.Duration
	// MaxBatchIDs and MaxBatchBytes bound one push (default 5000 ids,
	// 2 MiB of state data).
	MaxBatchIDs, MaxBatchBytes int
	// TLS, when set, is the client side of the links (the peer
	// certificate); nil: plaintext. Each link also requires the server's
	// certificate to name the region it dials (tlsconfig.CertRegions).
	TLS *tls.Config
	// AuthorizePeers makes every incoming call present a verified client
	// certificate naming a peer region, and act only as that region
	// (service.go). Set it with --peer-ca.
	AuthorizePeers bool
	// Chunks says how states are cut for anti-entropy.
	Chunks chunksync.Options
	// CallTimeout bounds each anti-entropy and bootstrap call (a manifest
	// or a fetch) to a peer (default: 30 intervals, at least 30 s), so a
	// peer that takes the call and never answers cannot hold a sync, nor
	// its loop, for good.
	CallTimeout time.Duration
	Logger      *slog.Logger
}

// Cluster describes the cluster a region node belongs to. Each node ships
// the counters it owns at the current ring (Owns); after a ring change it
// ships every counter it now owns once more, so a counter whose owner
// changed reaches the peer regions from its new owner. Region is the
// cluster as a Backend: this region's part of a global read.
type Cluster struct {
	Owns        func(id string) bool
	RingVersion func() uint64
	Region      contract.Backend
	// Export, when set, reads an id's state from its owner (or another
	// replica): this region's registers in a global hll union, which the
	// node's own engine lacks when it holds no replica of the id.
	Export func(ctx context.Context, id string) (engine.State, bool, error)
}

// Replicator ships this region's changes to the peer regions, keeps a copy
// of each peer's state, and answers scoped reads (docs/operations.md,
// "Regions").
type Replicator struct {
	cfg         Config
	local       *engine.Engine
	remote      map[string]*engine.Engine // peer name -> its state's copy
	peers       map[string]*peerLink      // peer name -> its links
	t           *tracker
	incarnation uint64
	log         *slog.Logger

	cutMu sync.Mutex
	cuts  map[string][2]*cutEntry // state name -> last two cuts served

	stop   context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool

	// Incoming calls (service.go): each runs under a context that
	// StopServing cancels, and Close waits for them (bounded) before it
	// closes the copies they write to.
	serveCtx    context.Context
	serveCancel context.CancelFunc
	hmu         sync.Mutex
	hstopped    bool
	handlers    sync.WaitGroup
}

type cutEntry struct{ snap *chunksync.Snapshot }

// peerLink is one peer region: its gateways (one dest each, in
// --peer-regions order), what it sent, and the counters of GET /regions
// and /metrics.
type peerLink struct {
	Name  string
	dests []*dest

	mu sync.Mutex
	// receiving side
	lastHeard  time.Time          // last push received
	senders    map[string]*sender // by sending node
	syncWanted bool
	// anti-entropy (pulls of the peer's state into our copy)
	syncs          uint64
	chunksCompared uint64
	chunksFetched  uint64
	syncBytes      uint64
	syncFullBytes  uint64
	lastSync       time.Time
	bytesReceived  uint64
}

// dest is one gateway of a peer region: the connection, the tracker's
// position (key) and the sending counters.
type dest struct {
	Peer
	key  string // the tracker's name of the link
	conn *grpc.ClientConn

	mu          sync.Mutex
	lastPush    time.Time // last acknowledged push
	lastErr     string
	pushes      uint64
	pushErrors  uint64
	bytesSent   uint64
	statesSent  uint64
	lastShipped uint64 // sequence acknowledged
	cursor      Cursor // Durable: the position the gateway acknowledged
}

// sender is one node of a peer region that pushes here: each ships the
// counters it owns, so the region's as-of is the oldest of theirs.
type sender struct {
	incarnation uint64
	asOf        int64 // as-of of its last complete push (unix ns; 0: none)
	lastHeard   time.Time
}

// senderForget: a sending node not heard from for this long (a node that
// left its cluster) no longer holds back its region's as-of.
const senderForget = 10 * time.Minute

// linkKey names the link to one gateway in the tracker.
func linkKey(p Peer) string { return p.Name + "=" + p.Addr }

// Open opens the copies of the peer regions' states.
func Open(cfg Config) (*Replicator, error) {
	if err := ValidateName(cfg.Name); err != nil {
		return nil, err
	}
	if (cfg.Local == nil) == (cfg.Durable == nil) {
		return nil, fmt.Errorf("%w: multi-region replication needs the embedded engine or a durable tier", ErrInvalid)
	}
	if cfg.Durable != nil && cfg.Cluster != nil {
		return nil, fmt.Errorf("%w: a tiered region node is not a cluster node", ErrInvalid)
	}
	if cfg.Node == "" {
		cfg.Node = cfg.Name // pushes name their node
	}
	if len(cfg.Node) > MaxNodeLen {
		return nil, fmt.Errorf("%w: node id of %d bytes (at most %d)", ErrInvalid, len(cfg.Node), MaxNodeLen)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.MaxBatchIDs <= 0 {
		cfg.MaxBatchIDs = 5000
	}
	if cfg.MaxBatchBytes <= 0 {
		cfg.MaxBatchBytes = 2 << 20
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = max(30*cfg.Interval, 30*time.Second)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Changes == nil {
		cfg.Changes = NewChanges(cfg.Peers)
	}
	r := &Replicator{
		cfg: cfg, local: cfg.Local, remote: map[string]*engine.Engine{}, peers: map[string]*peerLink{},
		t: cfg.Changes.t, incarnation: rand.Uint64() | 1, log: cfg.Logger,
		cuts: map[string][2]*cutEntry{},
	}
	r.serveCtx, r.serveCancel = context.WithCancel(context.Background())
	for _, p := range cfg.Peers {
		creds := linkCredentials(cfg.TLS, p.Name)
		if pl := r.peers[p.Name]; pl != nil { // another gateway of a region
			d, err := r.dial(p, creds)
			if err != nil {
				r.closeEngines()
				return nil, err
			}
			pl.dests = append(pl.dests, d)
			continue
		}
		ecfg := engine.DefaultConfig()
		ecfg.Dir = filepath.Join(cfg.Dir, p.Name)
		ecfg.NodeID = p.Name
		ecfg.Logger = cfg.Logger.With("region_copy", p.Name)
		if err := os.MkdirAll(ecfg.Dir, 0o755); err != nil {
			r.closeEngines()
			return nil, fmt.Errorf("region: copy of %s: %w", p.Name, err)
		}
		eng, err := engine.Open(ecfg)
		if err != nil {
			r.closeEngines()
			return nil, fmt.Errorf("region: copy of %s: %w", p.Name, err)
		}
		r.remote[p.Name] = eng
		pl := &peerLink{Name: p.Name, senders: map[string]*sender{}, syncWanted: true}
		r.peers[p.Name] = pl
		d, err := r.dial(p, creds)
		if err != nil {
			r.closeEngines()
			return nil, err
		}
		pl.dests = append(pl.dests, d)
	}
	return r, nil
}

// linkCredentials is the client side of a link to region name: tc
// (plaintext when nil), also requiring the server's certificate to name
// the region.
func linkCredentials(tc *tls.Config, name string) credentials.TransportCredentials {
	if tc == nil {
		return insecure.NewCredentials()
	}
	c := tc.Clone()
	prev := c.VerifyConnection
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if prev != nil {
			if err := prev(cs); err != nil {
				return err
			}
		}
		if len(cs.PeerCertificates) == 0 || !slices.Contains(tlsconfig.CertRegions(cs.PeerCertificates[0]), name) {
			return fmt.Errorf("%w: the certificate of the gateway does not name region %s (want a URI SAN %s)", ErrNotAllowed, name, tlsconfig.RegionURI(name))
		}
		return nil
	}
	return credentials.NewTLS(c)
}

// linkUserTimeout is how long a region link's sent data may stay
// unacknowledged before the connection is dropped and redialled: two
// replication intervals, at least 500 ms (a slow but working link acks
// within its round trip; a batch resumes from its acknowledged position on
// the new connection).
func linkUserTimeout(interval time.Duration) time.Duration {
	return max(2*interval, 500*time.Millisecond)
}

// dial opens the connection to one gateway of a peer region.
func (r *Replicator) dial(p Peer, creds credentials.TransportCredentials) (*dest, error) {
	// Reconnect within an interval of a healed cut (the default backoff
	// grows to two minutes).
	bo := backoff.DefaultConfig
	bo.BaseDelay, bo.MaxDelay = min(100*time.Millisecond, r.cfg.Interval), r.cfg.Interval
	// A connect whose SYN was lost in a cut is retried after the kernel's
	// 1 s SYN timeout, then 3 s: give up sooner and let the backoff start a
	// fresh attempt (500 ms at least: a far region's round trip).
	dialer := &net.Dialer{Timeout: max(r.cfg.Interval, 500*time.Millisecond), Control: userTimeoutControl(linkUserTimeout(r.cfg.Interval))}
	conn, err := grpc.NewClient("passthrough:///"+p.Addr, grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: max(r.cfg.Interval, 5*time.Second)}),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return dialer.DialContext(ctx, "tcp", addr)
		}))
	if err != nil {
		return nil, fmt.Errorf("region: dial %s at %s: %w", p.Name, p.Addr, err)
	}
	return &dest{Peer: p, key: linkKey(p), conn: conn}, nil
}

func (r *Replicator) closeConns() {
	for _, p := range r.peers {
		for _, d := range p.dests {
			_ = d.conn.Close()
		}
	}
}

func (r *Replicator) closeEngines() {
	r.closeConns()
	for _, e := range r.remote {
		_ = e.Close()
	}
}

// Wrap returns be (serving r's local engine) recording every acknowledged
// mutation, so that it is shipped to every peer region. On a cluster node
// be is returned as is: its store records the changes (Changes).
func (r *Replicator) Wrap(be contract.Backend) contract.Backend {
	if r.cfg.Cluster != nil || r.cfg.Durable != nil { // the store records the changes
		return be
	}
	return r.cfg.Changes.Wrap(be, r.local)
}

// Start runs the push loop of every gateway of every peer and
// anti-entropy until Close.
func (r *Replicator) Start(ctx context.Context) {
	ctx, r.stop = context.WithCancel(ctx)
	for _, p := range r.peers {
		for _, d := range p.dests {
			r.wg.Add(1)
			go r.pushLoop(ctx, d)
		}
		r.wg.Add(1)
		go r.syncLoop(ctx, p)
	}
	if r.cfg.Cluster != nil {
		r.wg.Add(1)
		go r.ringLoop(ctx)
	}
}

// ringLoop records every counter this node owns as changed after each
// ring change, so the new owner of a counter ships it (the old one stops
// at its next batch: it ships only what it owns).
func (r *Replicator) ringLoop(ctx context.Context) {
	defer r.wg.Done()
	tick := time.NewTicker(r.cfg.Interval)
	defer tick.Stop()
	var seen uint64
	for {
		if v := r.cfg.Cluster.RingVersion(); v != seen {
			n := 0
			err := r.local.ExportAll(ctx, func(s engine.State) error {
				if r.cfg.Cluster.Owns(s.ID) {
					r.t.touch(s.ID, s.Version)
					n++
				}
				return nil
			})
			if err == nil {
				seen = v
				r.log.Debug("region: ring changed; owned counters to ship again", "ring", v, "counters", n)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// closeWait bounds how long Close waits for the loops and the incoming
// calls to end once they are cancelled (they end at once unless stuck in
// a call that ignores its context); then it closes the copies anyway.
const closeWait = 5 * time.Second

// ErrStopping answers a region call that arrives, or was running, after
// StopServing (gRPC Unavailable: the caller retries it elsewhere or later).
var ErrStopping = errors.New("region: node is shutting down")

// StopServing refuses every later region call and cancels those in
// progress (a push not yet stored is not acknowledged: its sender ships it
// again; a sync resumes from the next manifest). A node stopping calls it
// before it stops its gRPC server, so that a call from a peer that is cut
// off or slow does not hold the server's graceful stop. Idempotent.
func (r *Replicator) StopServing() {
	r.hmu.Lock()
	r.hstopped = true
	r.hmu.Unlock()
	r.serveCancel()
}

// serving admits an incoming call: ctx, cancelled by StopServing as well,
// and done, to call when it ends. After StopServing it refuses.
func (r *Replicator) serving(ctx context.Context) (context.Context, func(), error) {
	r.hmu.Lock()
	if r.hstopped {
		r.hmu.Unlock()
		return nil, nil, ErrStopping
	}
	r.handlers.Add(1)
	r.hmu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(r.serveCtx, cancel)
	return ctx, func() {
		stop()
		cancel()
		r.handlers.Done()
	}, nil
}

// Close stops serving (StopServing), stops the loops, closes the
// connections to the peers (ending any call in flight on them), waits up
// to closeWait for the loops and the incoming calls to end, and closes the
// copies (flushing them).
func (r *Replicator) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	r.StopServing()
	if r.stop != nil {
		r.stop()
	}
	r.closeConns()
	ended := make(chan struct{})
	go func() {
		r.wg.Wait()
		r.handlers.Wait()
		close(ended)
	}()
	select {
	case <-ended:
	case <-time.After(closeWait):
		r.log.Warn("region: replication loops or incoming calls still running; closing the copies anyway", "waited", closeWait)
	}
	var errs []error
	for _, e := range r.remote {
		errs = append(errs, e.Close())
	}
	return errors.Join(errs...)
}

// Bootstrap fills an empty local engine with this region's state as the
// peer regions hold it (their copies), by hash-addressed sync, so a region
// restarted from an empty data directory gets back what it had shipped.
// Every reachable peer is asked (the copies are merged: the newest
// version of each counter wins); unreachable ones are skipped. It returns
// the counters merged and the peers that answered.
func (r *Replicator) Bootstrap(ctx context.Context) (merged int, from []string, err error) {
	if r.local == nil {
		return 0, nil, fmt.Errorf("%w: bootstrap needs the embedded engine", ErrInvalid)
	}
	var errs []error
	for _, name := range r.peerNames() {
		p := r.peers[name]
		t := &chunksync.EngineTarget{Engine: r.local, WO: contract.WriteOptions{Durability: contract.Sync}}
		var st chunksync.Stats
		err := p.eachDest(func(d *dest) (err error) {
			st, err = chunksync.Pull(ctx, &grpcSource{conn: d.conn, name: r.cfg.Name, timeout: r.cfg.CallTimeout}, t, nil)
			return err
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		p.mu.Lock()
		p.bytesReceived += uint64(st.BytesFetched)
		p.mu.Unlock()
		merged += t.Merged
		from = append(from, name)
		r.log.Info("region bootstrap", "from", name, "counters", st.Keys, "chunks_fetched", st.ChunksFetched, "bytes", st.BytesFetched)
	}
	if len(from) == 0 && len(errs) > 0 {
		return 0, nil, errors.Join(errs...)
	}
	return merged, from, nil
}

// peerNames lists the peer regions in --peer-regions order (of their
// first gateway).
func (r *Replicator) peerNames() []string {
	names := make([]string, 0, len(r.cfg.Peers))
	for _, p := range r.cfg.Peers {
		if !slices.Contains(names, p.Name) {
			names = append(names, p.Name)
		}
	}
	return names
}

// eachDest runs fn on the region's gateways in order until one succeeds.
func (p *peerLink) eachDest(fn func(*dest) error) error {
	var errs []error
	for _, d := range p.dests {
		err := fn(d)
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", d.Addr, err))
	}
	return errors.Join(errs...)
}

// pushLoop ships, every interval, what gateway p has not acknowledged. A
// failed push is retried from the same position at the next tick; a push
// that hit a batch limit continues at once.
func (r *Replicator) pushLoop(ctx context.Context, p *dest) {
	defer r.wg.Done()
	tick := time.NewTicker(r.cfg.Interval)
	defer tick.Stop()
	for {
		more, err := r.pushOnce(ctx, p)
		if err != nil {
			p.mu.Lock()
			p.pushErrors++
			p.lastErr = err.Error()
			p.mu.Unlock()
			r.log.Debug("region push", "peer", p.Name, "addr", p.Addr, "err", err)
		}
		if more && err == nil {
			continue
		}
		if err != nil && waitReady(ctx, p.conn, 10*r.cfg.Interval) {
			continue // the link is back: push at once, not a tick later
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// waitReady waits up to d for conn to become ready (reconnecting with its
// backoff, capped at one interval), and reports whether it did.
func waitReady(ctx context.Context, conn *grpc.ClientConn, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		s := conn.GetState()
		if s == connectivity.Ready {
			return true
		}
		conn.Connect()
		if !conn.WaitForStateChange(ctx, s) {
			return false
		}
	}
}

// buildBatch encodes the next batch for the link key: the current state
// of the ids changed after its acknowledged position, up to the batch
// limits; hi is the sequence the peer acknowledges by storing it (0:
// none). A cluster node skips the ids it does not own (their owner ships
// them; ringLoop hands them over when the owner changes).
func (r *Replicator) buildBatch(key string) (msg []byte, b *Batch, hi uint64, more bool, err error) {
	asOf := time.Now().UnixNano()
	ids, more := r.t.pending(key, r.cfg.MaxBatchIDs)
	b = &Batch{From: r.cfg.Name, Node: r.cfg.Node, Incarnation: r.incarnation, AsOf: asOf}
	bytes := 0
	for i, pid := range ids {
		if bytes >= r.cfg.MaxBatchBytes {
			more = true
			ids = ids[:i]
			break
		}
		if r.cfg.Cluster != nil && !r.cfg.Cluster.Owns(pid.id) {
			hi = pid.seq
			continue
		}
		st, ok, err := r.local.Export(pid.id)
		if err != nil {
			return nil, nil, 0, false, err
		}
		if pid.del > 0 {
			b.Tombs = append(b.Tombs, engine.State{ID: pid.id, Deleted: true, Version: pid.del})
		}
		if ok {
			b.States = append(b.States, st)
			bytes += len(st.ID) + len(st.Data) + 24
		} else if pid.del == 0 {
			// Expired or deleted by a path that did not say so: a
			// tombstone at the highest version shipped deletes the copy.
			b.Tombs = append(b.Tombs, engine.State{ID: pid.id, Deleted: true, Version: pid.ver})
		}
		hi = pid.seq
	}
	b.Complete = !more
	chunksync.SortStates(b.Tombs)
	chunksync.SortStates(b.States)
	return EncodeBatch(nil, b), b, hi, more, nil
}

// pushOnce sends one batch to p and moves p's position on success.
func (r *Replicator) pushOnce(ctx context.Context, p *dest) (more bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, max(10*r.cfg.Interval, 10*time.Second))
	defer cancel()
	var (
		msg  []byte
		b    *Batch
		hi   uint64
		next Cursor
	)
	if r.cfg.Durable != nil {
		msg, b, next, more, err = r.durableBatch(cctx, p)
	} else {
		msg, b, hi, more, err = r.buildBatch(p.key)
	}
	if err != nil {
		return false, err
	}
	if _, err := invoke(cctx, p.conn, "Push", msg); err != nil {
		return false, err
	}
	if hi > 0 {
		r.t.ack(p.key, hi)
	}
	p.mu.Lock()
	if r.cfg.Durable != nil {
		p.cursor = next
	}
	p.lastPush = time.Now()
	p.lastErr = ""
	p.pushes++
	p.bytesSent += uint64(len(msg))
	p.statesSent += uint64(len(b.States) + len(b.Tombs))
	if hi > 0 {
		p.lastShipped = hi
	}
	p.mu.Unlock()
	return more, nil
}

// receive applies a batch pushed by a peer to the copy of its state,
// durably, before the push is acknowledged.
func (r *Replicator) receive(ctx context.Context, c caller, msg []byte) error {
	b, err := DecodeBatch(msg)
	if err != nil {
		return err
	}
	p, eng := r.peers[b.From], r.remote[b.From]
	if p == nil {
		return fmt.Errorf("%w: region %q is not in --peer-regions", ErrUnknownRegion, b.From)
	}
	if !c.is(b.From) {
		return fmt.Errorf("%w: a push from region %s with a certificate of region %s", ErrNotAllowed, b.From, orNone(c.regions))
	}
	if len(b.Node) == 0 {
		return fmt.Errorf("%w: push without a sending node", ErrCorrupt)
	}
	wo := contract.WriteOptions{Durability: contract.Sync}
	if len(b.Tombs) > 0 {
		if _, err := eng.Replace(ctx, b.Tombs, wo); err != nil {
			return err
		}
	}
	if len(b.States) > 0 {
		if _, err := eng.Replace(ctx, b.States, wo); err != nil {
			return err
		}
	}
	now := time.Now()
	p.mu.Lock()
	p.lastHeard = now
	p.bytesReceived += uint64(len(msg))
	s := p.senders[b.Node]
	if s == nil {
		s = &sender{incarnation: b.Incarnation}
		p.senders[b.Node] = s
	}
	if s.incarnation != b.Incarnation {
		// A restarted node may have lost changes it had not shipped.
		s.incarnation, s.asOf = b.Incarnation, 0
		p.syncWanted = true
	}
	s.lastHeard = now
	if b.Complete && b.AsOf > s.asOf {
		s.asOf = b.AsOf
	}
	p.mu.Unlock()
	return nil
}

// asOfLocked is the region's as-of: the oldest of its sending nodes'
// (unix ns; 0 while one of them has not completed a push). Caller holds
// p.mu.
func (p *peerLink) asOfLocked(now time.Time) int64 {
	var asOf int64
	for node, s := range p.senders {
		if now.Sub(s.lastHeard) > senderForget {
			delete(p.senders, node)
			continue
		}
		if s.asOf == 0 {
			return 0
		}
		if asOf == 0 || s.asOf < asOf {
			asOf = s.asOf
		}
	}
	return asOf
}

// ErrUnknownRegion: a message names a region this one does not know.
var ErrUnknownRegion = errors.New("region: unknown region")

// syncLoop runs anti-entropy with p: at start, when p's incarnation
// changed, and every SyncInterval.
func (r *Replicator) syncLoop(ctx context.Context, p *peerLink) {
	defer r.wg.Done()
	tick := time.NewTicker(r.cfg.Interval)
	defer tick.Stop()
	var last time.Time
	for {
		p.mu.Lock()
		want := p.syncWanted || (r.cfg.SyncInterval > 0 && time.Since(last) >= r.cfg.SyncInterval)
		p.mu.Unlock()
		if want {
			if err := r.SyncFrom(ctx, p.Name); err != nil {
				r.log.Debug("region anti-entropy", "peer", p.Name, "err", err)
			} else {
				last = time.Now()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// SyncFrom compares the peer's state with the local copy of it by hash
// and fetches only the chunks that differ.
func (r *Replicator) SyncFrom(ctx context.Context, name string) error {
	p, eng := r.peers[name], r.remote[name]
	if p == nil {
		return fmt.Errorf("%w: %q", ErrUnknownRegion, name)
	}
	have, err := chunksync.FromEngine(ctx, eng, r.cfg.Chunks)
	if err != nil {
		return err
	}
	t := &replaceTarget{eng: eng, have: have}
	var st chunksync.Stats
	err = p.eachDest(func(d *dest) (err error) {
		st, err = chunksync.Pull(ctx, &grpcSource{conn: d.conn, name: name, timeout: r.cfg.CallTimeout}, t, nil)
		return err
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	p.chunksCompared += uint64(st.Chunks)
	p.chunksFetched += uint64(st.ChunksFetched)
	p.syncBytes += uint64(st.BytesFetched)
	p.syncFullBytes += uint64(st.FullBytes)
	if err != nil {
		return err
	}
	p.syncs++
	p.lastSync = time.Now()
	p.syncWanted = false
	return nil
}

// replaceTarget stores pulled chunks in a peer's copy with engine.Replace.
type replaceTarget struct {
	eng  *engine.Engine
	have *chunksync.Snapshot
}

func (t *replaceTarget) Has(h chunksync.Hash) bool { return t.have != nil && t.have.Has(h) }
func (t *replaceTarget) PutChunk(ctx context.Context, _ chunksync.Hash, _ []byte, states []engine.State) error {
	_, err := t.eng.Replace(ctx, states, contract.WriteOptions{Durability: contract.Sync})
	return err
}
func (t *replaceTarget) PutRange(context.Context, chunksync.Hash, []byte) error { return nil }

// stateOf returns the engine holding the state named name: this region's
// own, or the copy of a peer's.
func (r *Replicator) stateOf(name string) (*engine.Engine, bool) {
	if name == r.cfg.Name {
		return r.local, true
	}
	e, ok := r.remote[name]
	return e, ok
}

// manifest cuts the state named name and keeps the cut for fetches.
func (r *Replicator) manifest(ctx context.Context, name string) ([]byte, error) {
	var s *chunksync.Snapshot
	var err error
	if name == r.cfg.Name && r.cfg.Durable != nil {
		s, err = r.durableSnapshot(ctx)
	} else if eng, ok := r.stateOf(name); !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownRegion, name)
	} else {
		s, err = chunksync.FromEngine(ctx, eng, r.cfg.Chunks)
	}
	if err != nil {
		return nil, err
	}
	r.cutMu.Lock()
	c := r.cuts[name]
	r.cuts[name] = [2]*cutEntry{{snap: s}, c[0]}
	r.cutMu.Unlock()
	return s.ManifestBlob(), nil
}

func (r *Replicator) blob(name string, h chunksync.Hash) ([]byte, error) {
	r.cutMu.Lock()
	c := r.cuts[name]
	r.cutMu.Unlock()
	for _, e := range c {
		if e == nil {
			continue
		}
		if b, ok := e.snap.Blob(h); ok {
			return b, nil
		}
	}
	return nil, fmt.Errorf("%w: %s", chunksync.ErrNotFound, h)
}

// Name is this region's name.
func (r *Replicator) Name() string { return r.cfg.Name }

// Status reports every peer region (GET /regions).
func (r *Replicator) Status() Status {
	st := Status{Region: r.cfg.Name, Node: r.cfg.Node, IntervalMS: r.cfg.Interval.Milliseconds()}
	now := time.Now()
	for _, name := range r.peerNames() {
		st.Peers = append(st.Peers, r.peerStatus(r.peers[name], now).PeerStatus)
	}
	return st
}

// peerState is a peer region's status with its times, for the metrics.
type peerState struct {
	PeerStatus
	contact time.Time
	asOf    int64
}

// peerStatus sums the sending side over the region's gateways (pending
// and lag: the most behind of them; last push: the oldest).
func (r *Replicator) peerStatus(p *peerLink, now time.Time) peerState {
	ps := PeerStatus{Peer: Peer{Name: p.Name}}
	var addrs, errs []string
	var contact, lastPush time.Time
	var oldest int64
	for i, d := range p.dests {
		n, old := r.t.lag(d.key)
		ps.Pending = max(ps.Pending, n)
		if old != 0 && (oldest == 0 || old < oldest) {
			oldest = old
		}
		addrs = append(addrs, d.Addr)
		d.mu.Lock()
		if d.lastErr != "" {
			errs = append(errs, d.Addr+": "+d.lastErr)
		}
		ps.Pushes += d.pushes
		ps.PushErrors += d.pushErrors
		ps.BytesSent += d.bytesSent
		ps.StatesSent += d.statesSent
		if i == 0 || d.lastPush.Before(lastPush) {
			lastPush = d.lastPush
		}
		if d.lastPush.After(contact) {
			contact = d.lastPush
		}
		d.mu.Unlock()
	}
	ps.Addr = strings.Join(addrs, ",")
	ps.LastError = strings.Join(errs, "; ")
	ps.LastPush = timeStr(lastPush)
	if oldest != 0 {
		ps.LagSeconds = max(0, now.Sub(time.Unix(0, oldest)).Seconds())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ps.BytesReceived, ps.Syncs, ps.LastSync = p.bytesReceived, p.syncs, timeStr(p.lastSync)
	ps.ChunksCompared, ps.ChunksFetched, ps.SyncBytes, ps.SyncFullBytes = p.chunksCompared, p.chunksFetched, p.syncBytes, p.syncFullBytes
	if p.lastHeard.After(contact) {
		contact = p.lastHeard
	}
	ps.LastContact = timeStr(contact)
	asOf := p.asOfLocked(now)
	if asOf != 0 {
		ps.AsOf = timeStr(time.Unix(0, asOf))
	}
	for node, snd := range p.senders {
		ss := SenderStatus{Node: node, LastHeard: timeStr(snd.lastHeard)}
		if snd.asOf != 0 {
			ss.AsOf = timeStr(time.Unix(0, snd.asOf))
		}
		ps.Senders = append(ps.Senders, ss)
	}
	sort.Slice(ps.Senders, func(i, j int) bool { return ps.Senders[i].Node < ps.Senders[j].Node })
	return peerState{PeerStatus: ps, contact: contact, asOf: asOf}
}

func timeStr(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(time.RFC3339Nano)
	return &s
}
