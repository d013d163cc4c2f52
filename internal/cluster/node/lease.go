package node

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/counterd/counterd/internal/cluster/membership"
	"github.com/counterd/counterd/internal/cluster/ring"
	"github.com/counterd/counterd/internal/contract"
)

// Owner leases bound in time what an owner cut off from the cluster still
// does before gossip declares it dead.
//
// Holder. Every LeaseDuration/4 a node asks M/2+1 of the other alive
// members to renew its lease (the Lease peer call): the M/2 grants it needs
// and one spare, the members after it in sorted order (so each member is
// asked by about half of the others, not by all), those whose last call
// failed or was refused last. It renews only while it uses its lease: an
// owner operation in the last leaseIdle (25 leases, 10 s by default); an
// idle node lets its lease lapse, and its next owner operation waits for
// one renewal round (one round trip) before it starts. A member grants a
// lease while the sender is on its own ring, and remembers when. Which
// members a holder asks, and whether it asks at all, changes nothing
// below: a lease still needs grants from a majority, and every new owner
// still hears from enough members (it asks all of them, wideRenewal) that
// each majority of grantors intersects them. Idle, a 16-node cluster
// sends no Lease call instead of 2,400 per second. The holder's lease runs until
// LeaseDuration after it *sent* the renewal round whose grant made a
// majority of the members it knows (alive + dead, itself included): with M
// members it needs grants from M/2 others within the last LeaseDuration.
// An owner serves an owner operation (counter, hash, window, hll writes;
// reads on the owner) only while its lease runs: it waits briefly for one
// before the operation, and checks it again when the operation is about to
// be acknowledged (after the read, after a write's replication). A node on
// the small side of a partition thus stops acknowledging writes and
// serving owner reads at most LeaseDuration after its last successful
// renewal, whether or not gossip noticed the cut yet. pn and sharded adds
// need no lease (they are applied wherever they arrive).
//
// New owner. A grantor that dropped a node from its ring grants it nothing
// more, and reports in every Lease answer how long the leases it granted
// to nodes off its ring (those that did not leave gracefully: a leaving
// node stops serving before it leaves) may still run, plus LeaseDrift. Before
// a new owner serves its first owner operation at a ring version whose
// members include a dead node it has not yet waited for, it collects such
// reports from enough members that agree on its ring that every majority
// of grantors intersects them (M - M/2, itself included), and waits until
// the latest of them has run out. The old owner's lease ended at most
// LeaseDuration after a round sent before any of its grants, so it ended
// before the new owner serves: the two never serve the same id at once,
// unless their clocks' rates differ by more than LeaseDrift over a lease.
// With the default timing (suspected 0.3 s after the cut, dead 0.3 s
// later, lease 400 ms + 100 ms drift) the lease has run out by the time the
// ring drops the node, so failover does not get slower.
//
// Ownership epochs (epoch.go) still order what the two owners wrote; the
// lease adds the bound in time for reads and async writes, which epochs do
// not fence.

// Defaults of the lease settings.
const (
	DefaultLeaseDuration = 400 * time.Millisecond
	DefaultLeaseDrift    = 100 * time.Millisecond
)

// maxLeaseRounds bounds the renewal calls in flight to one peer.
const maxLeaseRounds = 4

var errNoLease = fmt.Errorf("%w: this node's owner lease ran out (no majority of the cluster renewed it: partition or failures); owner operations are refused", contract.ErrUnavailable)

// leaseRequest asks the receiver to renew the sender's lease.
type leaseRequest struct {
	header
}

type leaseResponse struct {
	Granted bool   `json:"granted"`
	Nodes   uint64 `json:"nodes"` // hash of the responder's ring node set
	// Wait is how long a lease the responder granted to a node off its
	// ring may still run, drift included.
	Wait time.Duration `json:"wait"`
	Err  *wireError    `json:"err,omitempty"`
}

// leaseReport is a peer's last Lease answer, as the takeover wait uses it.
type leaseReport struct {
	nodes uint64        // the peer's ring node set
	at    time.Duration // when the answer arrived (leases.now)
	until time.Duration // when every lease it granted off its ring runs out
}

// leases is a node's lease state, as holder, grantor and new owner. Safe
// for concurrent use.
type leases struct {
	base    time.Time     // origin of now (monotonic)
	until   atomic.Int64  // owner operations are allowed while now < until
	members atomic.Int64  // members (alive + dead) a majority is counted of
	cleared atomic.Uint64 // 1 + the ring version whose takeover wait is done (0: none)
	kick    chan struct{} // 1-buffered: renew now
	lastUse atomic.Int64  // now() when an owner operation last asked for the lease
	wide    atomic.Bool   // the next round goes to every alive member (takeover wait)

	mu       sync.Mutex               // guards the fields below
	got      map[string]time.Duration // peer -> send time of the round it last granted
	granted  map[string]time.Duration // peer -> when this node last granted it a lease
	reports  map[string]leaseReport   // peer -> its last answer
	ringAt   time.Duration            // when this node's ring last changed
	expired  map[string]bool          // nodes off the ring whose leases ran out since they left it
	inflight map[string]int           // renewal calls in flight, by peer
	failed   map[string]time.Duration // peer -> when its last renewal call failed or was refused
	changed  chan struct{}            // closed and replaced when got or reports change
}

func (l *leases) init() {
	l.base = time.Now()
	l.kick = make(chan struct{}, 1)
	l.got, l.granted, l.reports = map[string]time.Duration{}, map[string]time.Duration{}, map[string]leaseReport{}
	l.expired, l.inflight, l.failed = map[string]bool{}, map[string]int{}, map[string]time.Duration{}
	l.changed = make(chan struct{})
}

func (l *leases) now() time.Duration { return time.Since(l.base) }

// changedCh returns the channel closed at the next change.
func (l *leases) changedCh() chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changed
}

func (l *leases) broadcastLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *leases) renewNow() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// recomputeLocked sets until from the grants: the (M/2)-th latest grant's
// round plus d, or forever when this node is a majority alone.
func (l *leases) recomputeLocked(d time.Duration) {
	need := int(l.members.Load()) / 2
	if need <= 0 {
		l.until.Store(math.MaxInt64)
		return
	}
	ts := make([]time.Duration, 0, len(l.got))
	for _, t := range l.got {
		ts = append(ts, t)
	}
	if len(ts) < need {
		l.until.Store(0)
		return
	}
	slices.Sort(ts)
	l.until.Store(int64(ts[len(ts)-need] + d))
}

// leaseOn reports whether leases are in force (Config.LeaseDuration > 0).
func (n *Node) leaseOn() bool { return n.cfg.LeaseDuration > 0 }

// leaseHeld reports whether this node's lease runs now.
func (n *Node) leaseHeld() bool {
	return !n.leaseOn() || int64(n.lease.now()) < n.lease.until.Load()
}

// leaseMembers records the member count a majority is counted of (alive
// and dead members; those that left do not count, like the majority check).
func (n *Node) leaseMembers(ms []membership.Member) {
	total := 0
	for _, m := range ms {
		if m.State == membership.StateAlive || m.State == membership.StateDead {
			total++
		}
	}
	n.lease.mu.Lock()
	defer n.lease.mu.Unlock()
	if n.lease.members.Swap(int64(total)) != int64(total) {
		n.lease.recomputeLocked(n.cfg.LeaseDuration)
		n.lease.broadcastLocked()
	}
}

// leaseRingChanged notes a new ring: reports of older rings no longer
// count, and nodes back on it must be waited for again when they leave.
func (n *Node) leaseRingChanged(s *ring.Snapshot) {
	n.lease.mu.Lock()
	defer n.lease.mu.Unlock()
	n.lease.ringAt = n.lease.now()
	for _, id := range s.Nodes() {
		delete(n.lease.expired, id)
	}
}

// leaseLoop renews this node's lease every LeaseDuration/4, and at once
// when an operation waits for one.
func (n *Node) leaseLoop() {
	if !n.leaseOn() {
		return
	}
	t := time.NewTicker(n.cfg.LeaseDuration / 4)
	defer t.Stop()
	for {
		n.renewLease()
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		case <-n.lease.kick:
		}
	}
}

// leaseIdle is how many leases after its last owner operation a node
// stops renewing its lease.
const leaseIdle = 25

// useLease notes that an owner operation needs the lease (renewals go on).
func (l *leases) useLease(d time.Duration) {
	now := int64(l.now())
	if now-l.lastUse.Load() > int64(d/8) {
		l.lastUse.Store(now)
	}
}

// leaseInUse reports whether an owner operation asked for the lease in the
// last leaseIdle leases.
func (n *Node) leaseInUse() bool {
	return int64(n.lease.now())-n.lease.lastUse.Load() < int64(leaseIdle*n.cfg.LeaseDuration)
}

// renewLease sends one renewal round, without waiting for the answers: to
// leasePeers, to every other alive member when a takeover wait asked for
// it, to nobody while the lease is not in use. Each call is on its own, so
// that a peer that does not answer delays no other's grant; at most
// maxLeaseRounds calls per peer are in flight.
func (n *Node) renewLease() {
	m := n.members.Load()
	if m == nil {
		return
	}
	n.leaseMembers(m.Members())
	wide := n.lease.wide.Swap(false)
	if !wide && !n.leaseInUse() {
		return
	}
	sent := n.lease.now()
	req := &leaseRequest{header: n.header(false)}
	for _, peer := range n.leasePeers(m.Alive(), wide) {
		if !n.lease.startCall(peer) {
			continue
		}
		n.metrics.lease.WithLabelValues("renewal_calls").Inc()
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			defer n.lease.endCall(peer)
			ctx, cancel := context.WithTimeout(n.ctx, n.cfg.LeaseDuration)
			defer cancel()
			var resp leaseResponse
			err := n.call(ctx, peer, "Lease", req, &resp)
			n.lease.noteCall(peer, err == nil && resp.Err == nil && resp.Granted)
			if err != nil || resp.Err != nil {
				return
			}
			n.leaseAnswer(peer, sent, &resp)
		}()
	}
}

// leasePeers returns whom a renewal round asks among the alive members:
// all the others when wide, else M/2+1 of them (M: members alive and dead),
// the M/2 grants a lease needs plus a spare, taken in sorted order after
// this node, with those whose last call failed or was refused last.
func (n *Node) leasePeers(alive []string, wide bool) []string {
	slices.Sort(alive)
	i, _ := slices.BinarySearch(alive, n.self)
	var out []string
	for _, p := range append(slices.Clone(alive[i:]), alive[:i]...) {
		if p != n.self {
			out = append(out, p)
		}
	}
	k := int(n.lease.members.Load())/2 + 1
	if wide || k >= len(out) {
		return out
	}
	l := &n.lease
	l.mu.Lock()
	defer l.mu.Unlock()
	slices.SortStableFunc(out, func(a, b string) int {
		_, fa := l.failed[a]
		_, fb := l.failed[b]
		switch {
		case fa == fb:
			return 0
		case fb:
			return -1
		}
		return 1
	})
	return out[:k]
}

// noteCall records whether peer granted the renewal it was asked for.
func (l *leases) noteCall(peer string, granted bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if granted {
		delete(l.failed, peer)
	} else {
		l.failed[peer] = l.now()
	}
}

// startCall reserves one of peer's maxLeaseRounds call slots.
func (l *leases) startCall(peer string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inflight[peer] >= maxLeaseRounds {
		return false
	}
	l.inflight[peer]++
	return true
}

func (l *leases) endCall(peer string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inflight[peer]--; l.inflight[peer] <= 0 {
		delete(l.inflight, peer)
	}
}

// leaseAnswer records peer's answer to the round sent at sent.
func (n *Node) leaseAnswer(peer string, sent time.Duration, r *leaseResponse) {
	l := &n.lease
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if r.Granted && sent > l.got[peer] {
		l.got[peer] = sent
		l.recomputeLocked(n.cfg.LeaseDuration)
	}
	l.reports[peer] = leaseReport{nodes: r.Nodes, at: now, until: now + max(r.Wait, 0)}
	l.broadcastLocked()
}

// serveLease grants the sender's lease if it is on this node's ring, and
// reports how long the leases granted to nodes off the ring may run. The
// ring is read under the lease lock, so a grant is either recorded before
// a report that sees its holder off the ring, or refused.
func (n *Node) serveLease(_ context.Context, req *leaseRequest) *leaseResponse {
	l := &n.lease
	l.mu.Lock()
	defer l.mu.Unlock()
	s := n.ring.Snapshot()
	now := l.now()
	resp := &leaseResponse{Nodes: nodesHash(s)}
	if slices.Contains(s.Nodes(), req.From) {
		l.granted[req.From] = now
		resp.Granted = true
	}
	resp.Wait = n.outsideWaitLocked(s, now)
	return resp
}

// outsideWaitLocked is how long the leases this node granted to nodes off
// ring s (and not left gracefully) may still run, drift included.
func (n *Node) outsideWaitLocked(s *ring.Snapshot, now time.Duration) time.Duration {
	hold := n.cfg.LeaseDuration + n.cfg.LeaseDrift
	var wait time.Duration
	var left map[string]bool
	for p, g := range n.lease.granted {
		rem := g + hold - now
		if rem <= 0 {
			delete(n.lease.granted, p)
			continue
		}
		if slices.Contains(s.Nodes(), p) {
			continue
		}
		if left == nil {
			left = n.leftMembers()
		}
		if !left[p] {
			wait = max(wait, rem)
		}
	}
	return wait
}

// leftMembers is the set of members that left gracefully.
func (n *Node) leftMembers() map[string]bool {
	out := map[string]bool{}
	if m := n.members.Load(); m != nil {
		for _, mem := range m.Members() {
			if mem.State == membership.StateLeft {
				out[mem.ID] = true
			}
		}
	}
	return out
}

// awaitLease returns nil once this node holds its lease, waiting for a
// renewal up to twice LeaseDuration.
func (n *Node) awaitLease(ctx context.Context) error {
	if n.leaseOn() {
		n.lease.useLease(n.cfg.LeaseDuration)
	}
	if n.leaseHeld() {
		return nil
	}
	timer := time.NewTimer(2 * n.cfg.LeaseDuration)
	defer timer.Stop()
	for {
		ch := n.lease.changedCh()
		if n.leaseHeld() {
			return nil
		}
		n.lease.renewNow()
		select {
		case <-ch:
		case <-timer.C:
			n.metrics.lease.WithLabelValues("no_lease").Inc()
			return errNoLease
		case <-ctx.Done():
			return &UnavailableError{Op: "owner lease", Err: ctx.Err()}
		}
	}
}

// leaseGuard runs before an owner operation on owned at ring version v
// (after its fence): it holds the lease, and no node that was dropped from
// the ring can still hold one.
func (n *Node) leaseGuard(ctx context.Context, owned []string, v uint64) error {
	if !n.leaseOn() || len(owned) == 0 {
		return nil
	}
	if err := n.awaitLease(ctx); err != nil {
		return err
	}
	s := n.ring.Snapshot()
	if s.Version() != v {
		return errRingChanged
	}
	return n.leaseTakeover(ctx, s)
}

// leaseAck is the last check before an owner operation on owned (owned
// ids are those not in crdt) is acknowledged: the lease still runs.
func (n *Node) leaseAck(ids []string, crdt map[string]bool) error {
	if n.leaseHeld() {
		return nil
	}
	for _, id := range ids {
		if !crdt[id] {
			n.metrics.lease.WithLabelValues("lapsed").Inc()
			return errNoLease
		}
	}
	return nil
}

// leaseTakeover waits, once per ring version, until every dead member off
// ring s that this node has not waited for yet can hold no lease: reports
// from M - M/2 members agreeing on s (this node included), each received
// after this node's ring changed, bound the last lease any of them
// granted to a node off the ring.
func (n *Node) leaseTakeover(ctx context.Context, s *ring.Snapshot) error {
	l := &n.lease
	if l.cleared.Load() == s.Version()+1 {
		return nil
	}
	m := n.members.Load()
	if m == nil {
		return nil
	}
	var suspects []string
	l.mu.Lock()
	for _, mem := range m.Members() {
		if mem.State == membership.StateDead && !slices.Contains(s.Nodes(), mem.ID) && !l.expired[mem.ID] {
			suspects = append(suspects, mem.ID)
		}
	}
	l.mu.Unlock()
	if len(suspects) > 0 {
		total := int(l.members.Load())
		need := total - total/2
		start := time.Now()
		deadline := start.Add(n.cfg.FenceTimeout)
		for {
			ch := l.changedCh()
			until, have := n.takeoverUntil(s)
			if have >= need {
				if err := n.sleepUntil(ctx, until); err != nil {
					return err
				}
				n.metrics.lease.WithLabelValues("takeover_waited").Inc()
				n.log.Debug("cluster: waited for dropped nodes' leases", "nodes", suspects, "ring", s.Version(), "took", time.Since(start))
				break
			}
			if n.ring.Version() != s.Version() {
				return errRingChanged
			}
			if time.Now().After(deadline) {
				n.metrics.lease.WithLabelValues("takeover_timeout").Inc()
				return &UnavailableError{Op: "lease takeover", Err: fmt.Errorf("%d of %d members reported their leases on ring v%d (dropped: %v)", have, need, s.Version(), suspects)}
			}
			l.wide.Store(true) // reports from every member, not only the usual grantors
			l.renewNow()
			select {
			case <-ch:
			case <-time.After(20 * time.Millisecond):
			case <-ctx.Done():
				return &UnavailableError{Op: "lease takeover", Err: ctx.Err()}
			}
		}
	}
	if n.ring.Version() != s.Version() {
		return errRingChanged
	}
	l.mu.Lock()
	for _, id := range suspects {
		l.expired[id] = true
	}
	l.mu.Unlock()
	l.cleared.Store(s.Version() + 1)
	return nil
}

// takeoverUntil returns when every lease granted to a node off ring s runs
// out, as far as this node and the reports that agree on s know, and how
// many nodes (this one included) that covers.
func (n *Node) takeoverUntil(s *ring.Snapshot) (time.Duration, int) {
	l := &n.lease
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	until := now + n.outsideWaitLocked(s, now)
	have := 1
	want := nodesHash(s)
	for _, r := range l.reports {
		if r.nodes == want && r.at > l.ringAt {
			have++
			until = max(until, r.until)
		}
	}
	return until, have
}

// sleepUntil waits until the lease clock reads t.
func (n *Node) sleepUntil(ctx context.Context, t time.Duration) error {
	d := t - n.lease.now()
	if d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return &UnavailableError{Op: "lease takeover", Err: ctx.Err()}
	}
}
