package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/counterd/counterd/internal/cluster/ring"
	"github.com/counterd/counterd/internal/contract"
)

// Read views: Aggregate and Len count every id exactly once at every
// instant of a join, leave, crash or rejoin.
//
// The coordinator sends its ring's node set with the request; a node
// answers only when its own ring has the same node set, and only for the
// ids it is the designated answerer of: the first replica of the id (in
// that ring) that is not in the request's down set, which is the owner
// while nobody is down. A part also fails if the node's ring moved while
// it read. Each part reports the node's incarnation, ring version and
// whether the handoffs into that ring are complete there: its own, and
// every other member's into it (each member marks the end of its handoff
// into a ring to every other member of that ring, the handed_off call).
// The coordinator accepts a round only when every node's handoffs were
// already complete, at the same incarnation and ring version, in an
// earlier round (so every handoff into this ring finished before any part
// of this round read), and its own ring did not move. Otherwise it
// retries. A node that cannot be reached joins the down set and its ids
// are answered by their next replica; that replica's part still waits for
// the unreachable node's mark, since the unreachable node may hold states
// it took as owner while the replica was away (a rejoin) and not yet
// handed over. See docs/cluster.md, "Read views".

// viewRequest is the ring a read view is taken at (localRequest.View).
type viewRequest struct {
	Nodes []string `json:"nodes"`          // the coordinator's ring node set, sorted
	Down  []string `json:"down,omitempty"` // unreachable nodes: their next replica answers
}

// viewAnswer is what a part says about the ring it read at
// (localResponse.View).
type viewAnswer struct {
	Incarnation string `json:"inc"`
	Version     uint64 `json:"version"`
	HandedOff   bool   `json:"handed_off"` // the handoffs into Version are complete on this node (its own and its peers')
}

// handoffMark is a member's word that it has pushed, durably, every state
// it holds that the receiver replicates in the ring whose node set hashes
// to Nodes (localRequest.Mark, op "handed_off").
type handoffMark struct {
	Nodes       uint64 `json:"nodes"` // nodesHash of the ring handed off into
	Incarnation string `json:"inc"`   // the sender's incarnation
	Version     uint64 `json:"version"`
}

// inboundMarks holds the last handoff mark of every peer. Safe for
// concurrent use.
type inboundMarks struct {
	mu sync.Mutex // guards by
	by map[string]handoffMark
}

// record keeps m as from's latest mark, unless a later one of the same
// incarnation arrived first.
func (im *inboundMarks) record(from string, m handoffMark) {
	im.mu.Lock()
	defer im.mu.Unlock()
	if im.by == nil {
		im.by = map[string]handoffMark{}
	}
	if prev, ok := im.by[from]; ok && prev.Incarnation == m.Incarnation && prev.Version > m.Version {
		return
	}
	im.by[from] = m
}

// keepOnly drops every mark that is not for the node set hashing to h (the
// ring this node just installed). A mark holds only for the life of the
// ring it was sent in: a member that was dropped from this node's ring
// (killed) and rejoins after a restart has a handoff to make again, into a
// ring whose node set hashes the same as the one it marked in its previous
// life, and the old mark must not stand for it.
func (im *inboundMarks) keepOnly(h uint64) {
	im.mu.Lock()
	defer im.mu.Unlock()
	for p, m := range im.by {
		if m.Nodes != h {
			delete(im.by, p)
		}
	}
}

// missing returns the members of s but self that have not marked their
// handoff into s's node set.
func (im *inboundMarks) missing(s *ring.Snapshot, self string) []string {
	h := nodesHash(s)
	im.mu.Lock()
	defer im.mu.Unlock()
	var out []string
	for _, p := range s.Nodes() {
		if p != self && im.by[p].Nodes != h {
			out = append(out, p)
		}
	}
	return out
}

// inboundDone reports whether the handoffs into ring s are complete on this
// node: its own, and every other member's into it.
func (n *Node) inboundDone(s *ring.Snapshot) bool {
	if n.handedOff.Load().Version() != s.Version() {
		return false
	}
	if len(n.marks.missing(s, n.self)) > 0 {
		n.askMarks(s)
		return false
	}
	return true
}

// ownMark is this node's mark for its current ring, nil while its handoff
// into that ring is not complete.
func (n *Node) ownMark() *handoffMark {
	s := n.ring.Snapshot()
	if n.handedOff.Load().Version() != s.Version() {
		return nil
	}
	return &handoffMark{Nodes: nodesHash(s), Incarnation: n.incarnation, Version: s.Version()}
}

// exchangeMarks sends mark (nil: none, only asking) to each of peers in
// parallel and records the marks they answer with. It returns the peers
// that did not answer.
func (n *Node) exchangeMarks(mark *handoffMark, peers []string) []string {
	var mu sync.Mutex
	var failed []string
	var wg sync.WaitGroup
	for _, p := range peers {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(n.ctx, markTimeout)
			defer cancel()
			r := &localResponse{}
			err := n.call(ctx, p, "Local", &localRequest{header: n.header(false), Op: "handed_off", Mark: mark}, r)
			if err == nil {
				err = r.Err.err(p, nil)
			}
			if err != nil {
				n.log.Debug("cluster: handoff mark", "peer", p, "err", err)
				mu.Lock()
				failed = append(failed, p)
				mu.Unlock()
				return
			}
			if r.Mark != nil {
				n.marks.record(p, *r.Mark)
			}
		})
	}
	wg.Wait()
	return failed
}

// markHandedOff tells each of peers that this node's handoff into s is
// complete, and returns those that did not acknowledge.
func (n *Node) markHandedOff(s *ring.Snapshot, peers []string) []string {
	return n.exchangeMarks(&handoffMark{Nodes: nodesHash(s), Incarnation: n.incarnation, Version: s.Version()}, peers)
}

// askMarks asks the members of s whose mark for s is missing for theirs,
// in the background, one round at a time: a node that restarted has lost
// the marks its peers sent before, and peers whose ring did not change
// send none again.
func (n *Node) askMarks(s *ring.Snapshot) {
	if !n.asking.CompareAndSwap(false, true) {
		return
	}
	missing := n.marks.missing(s, n.self)
	if len(missing) == 0 || n.ctx.Err() != nil {
		n.asking.Store(false)
		return
	}
	n.wg.Go(func() {
		defer n.asking.Store(false)
		n.exchangeMarks(nil, missing)
	})
}

// markTimeout bounds one handoff mark call.
const markTimeout = time.Second

var (
	errViewMismatch = fmt.Errorf("%w: the nodes disagree on the ring; retry", contract.ErrUnavailable)
	errViewSettling = fmt.Errorf("%w: the ring is settling (handoff in progress); retry", contract.ErrUnavailable)
	errViewDown     = fmt.Errorf("%w: every replica of some ids is unreachable", contract.ErrUnavailable)
)

// viewPartTimeout bounds one node's part: a node that does not answer in
// time is treated as down for the rest of the read.
const viewPartTimeout = 2 * time.Second

// viewBudget bounds a read view's retries when the caller's context has no
// deadline.
const viewBudget = 5 * time.Second

// newIncarnation names this process's life: ring versions restart at a
// restart, so a version alone does not say the ring is the same.
func newIncarnation() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// viewCache remembers, per node, the incarnation and ring version at which
// the coordinator last saw that node's handoff complete. Safe for
// concurrent use.
type viewCache struct {
	mu   sync.Mutex
	seen map[string]viewAnswer
}

// settled reports whether a was already seen complete; it records a when
// it is complete now, so the next round can accept it.
func (c *viewCache) settled(node string, a viewAnswer) bool {
	if !a.HandedOff {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen = map[string]viewAnswer{}
	}
	prev, ok := c.seen[node]
	c.seen[node] = a
	return ok && prev == a
}

// designated returns the node that answers for id in s when the nodes in
// down are unreachable: its first replica not in down ("" if none).
func designated(s *ring.Snapshot, id string, down []string, buf []string) string {
	if len(down) == 0 {
		return s.Owner(id)
	}
	for _, r := range s.AppendReplicas(buf[:0], id, 0) {
		if !slices.Contains(down, r) {
			return r
		}
	}
	return ""
}

// viewPart runs fn as this node's part of a read view, with answers
// reporting whether this node answers for an id.
func (n *Node) viewPart(v *viewRequest, fn func(answers func(id string) bool) error) (*viewAnswer, error) {
	if err := n.joinedOrAlone(); err != nil {
		return nil, err
	}
	s := n.ring.Snapshot()
	if !slices.Equal(s.Nodes(), v.Nodes) || slices.Contains(v.Down, n.self) {
		return nil, errViewMismatch
	}
	a := &viewAnswer{Incarnation: n.incarnation, Version: s.Version(), HandedOff: n.inboundDone(s)}
	buf := make([]string, 0, 8)
	err := fn(func(id string) bool {
		d := designated(s, id, v.Down, buf)
		return d == n.self
	})
	if err != nil {
		return nil, err
	}
	if n.ring.Version() != s.Version() {
		return nil, errRingChanged
	}
	return a, nil
}

// peerDown reports whether err says node could not be reached (as opposed
// to an answer from it).
func peerDown(err error) bool {
	var ue *UnavailableError
	return errors.As(err, &ue) && ue.Node != ""
}

// viewRead is one read view: what each node is asked and how the answers
// of the accepted round are combined.
type viewRead struct {
	op string // for metrics
	// prepare, if set, runs once per round with the round's ring node set
	// before the parts are sent; its error ends the read.
	prepare func(nodes []string) error
	req     func(node string) *localRequest // the part asked of node
	reset   func()                          // before the accepted round's merges
	merge   func(node string, r *localResponse) error
	// strict: an unreachable node fails the read (503) instead of joining
	// the down set (Scan: a node's page cannot be answered by another).
	strict bool
}

// viewFanOut runs v as a read view on every node of the ring. It retries
// until a round is accepted or the budget (the context deadline, or
// viewBudget) runs out, then fails with the last reason (ErrUnavailable).
func (n *Node) viewFanOut(ctx context.Context, v viewRead) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, viewBudget)
		defer cancel()
	}
	var down []string
	backoff, quick := 5*time.Millisecond, true
	for {
		err := n.viewRound(ctx, v, &down)
		if err == nil || !errors.Is(err, contract.ErrUnavailable) || errors.Is(err, errScanRingChanged) {
			return err
		}
		if v.strict && peerDown(err) {
			return err
		}
		n.metrics.forwarded.WithLabelValues("view_"+v.op, "retry").Inc()
		if errors.Is(err, errViewSettling) && quick {
			quick = false
			continue // usually the first sighting of settled handoffs: confirm at once
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (read view %s gave up: %v)", err, v.op, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// viewRound is one attempt of viewFanOut. It adds unreachable nodes to
// *down.
func (n *Node) viewRound(ctx context.Context, v viewRead, down *[]string) error {
	if err := n.joinedOrAlone(); err != nil {
		return err
	}
	s := n.ring.Snapshot()
	nodes := s.Nodes()
	*down = slices.DeleteFunc(*down, func(d string) bool { return !slices.Contains(nodes, d) })
	if len(*down) >= min(n.ring.Config().ReplicationFactor, len(nodes)) {
		*down = nil // nobody left to answer for some ids: start over
		return errViewDown
	}
	if v.prepare != nil {
		if err := v.prepare(nodes); err != nil {
			return err
		}
	}
	ask := slices.DeleteFunc(slices.Clone(nodes), func(d string) bool { return slices.Contains(*down, d) })
	resps := make([]*localResponse, len(ask))
	errs := make([]error, len(ask))
	var wg sync.WaitGroup
	for i, node := range ask {
		r := v.req(node)
		r.View = &viewRequest{Nodes: nodes, Down: slices.Clone(*down)}
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, viewPartTimeout)
			defer cancel()
			if h := knobs.viewCall.Load(); h != nil {
				if errs[i] = (*h)(n.self, node); errs[i] != nil {
					return
				}
			}
			resps[i], errs[i] = n.onNode(pctx, node, r)
		})
	}
	wg.Wait()
	var retry error
	for i, node := range ask {
		switch err := errs[i]; {
		case err == nil:
		case peerDown(err) && node != n.self:
			if v.strict {
				return err
			}
			*down = append(*down, node)
			retry = err
			continue
		case errors.Is(err, contract.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			retry = err
			continue
		default:
			return err
		}
		if resps[i].View == nil {
			return fmt.Errorf("%w: node %q answered without a read view (older version?)", contract.ErrUnavailable, node)
		}
		if !n.views.settled(node, *resps[i].View) && retry == nil {
			retry = errViewSettling
		}
	}
	if retry != nil {
		return retry
	}
	if n.ring.Version() != s.Version() {
		return errRingChanged
	}
	v.reset()
	for i, r := range resps {
		if err := v.merge(ask[i], r); err != nil {
			return err
		}
	}
	return nil
}
