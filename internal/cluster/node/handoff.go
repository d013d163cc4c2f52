package node

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/counterd/counterd/internal/cluster/ring"
	"github.com/counterd/counterd/internal/contract"
)

// handoffLoop hands state over after every ring change, one change set at a
// time (changes that arrive meanwhile are coalesced), then marks the
// handoff complete to every other member of the ring (readview.go).
func (n *Node) handoffLoop() {
	prev := n.initialRing
	var unmarked []string // members of prev not yet told its handoff is complete
	fails := 0            // failed attempts at the current ring
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-n.handoff:
		}
		cur := n.ring.Snapshot()
		if cur.Version() == prev.Version() {
			if len(unmarked) > 0 {
				if unmarked = n.markHandedOff(cur, unmarked); len(unmarked) > 0 {
					n.retryHandoffLater(false)
				}
			}
			continue
		}
		// Every ring installed since prev is a base: this node may have
		// taken writes as owner under a ring that came and went while it
		// was busy (a node leaving and rejoining), which a diff of prev
		// and cur alone would not send to their replicas in cur.
		olds := append([]*ring.Snapshot{prev}, n.passedRings(cur)...)
		if h := knobs.beforeHandoff.Load(); h != nil {
			(*h)(n.self, cur)
		}
		if _, err := n.handOff(n.ctx, olds, cur, nil); err != nil {
			n.log.Warn("cluster: handoff incomplete, retrying", "err", err)
			fails++
			// The first retry comes soon: a rejoined node's connection is
			// often still in its reconnect backoff at the first attempt
			// (reconnect.go), and read views wait for this handoff.
			n.retryHandoffLater(fails == 1)
			continue
		}
		prev, fails = cur, 0
		n.dropPassedRings(cur)
		n.handedOff.Store(cur)
		others := slices.DeleteFunc(cur.Nodes(), func(p string) bool { return p == n.self })
		if unmarked = n.markHandedOff(cur, others); len(unmarked) > 0 {
			n.retryHandoffLater(true)
		}
	}
}

// passedRings returns the rings installed since the last completed
// handoff, cur excluded.
func (n *Node) passedRings(cur *ring.Snapshot) []*ring.Snapshot {
	n.passed.mu.Lock()
	defer n.passed.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(n.passed.rings), func(s *ring.Snapshot) bool { return s.Version() == cur.Version() })
}

// dropPassedRings forgets the rings up to cur, whose handoff is complete.
func (n *Node) dropPassedRings(cur *ring.Snapshot) {
	n.passed.mu.Lock()
	defer n.passed.mu.Unlock()
	n.passed.rings = slices.DeleteFunc(n.passed.rings, func(s *ring.Snapshot) bool { return s.Version() <= cur.Version() })
}

// firstHandoffRetry is the delay of a failed handoff's first retry; later
// ones wait RejoinInterval.
const firstHandoffRetry = 200 * time.Millisecond

// handoffRetryDelay is how long a failed handoff waits before its next
// attempt: firstHandoffRetry when soon (the first retry), else
// RejoinInterval. The background loop and a drain share it.
func (n *Node) handoffRetryDelay(soon bool) time.Duration {
	if soon {
		return min(n.cfg.RejoinInterval, firstHandoffRetry)
	}
	return n.cfg.RejoinInterval
}

func (n *Node) retryHandoffLater(soon bool) {
	d := n.handoffRetryDelay(soon)
	n.goLoop(func() {
		select {
		case <-n.ctx.Done():
		case <-time.After(d):
			select {
			case n.handoff <- struct{}{}:
			default:
			}
		}
	})
}

// isCRDT reports whether k accepts writes on every node. Such states are
// never dropped by handoff: a node that wrote into its own slot must keep
// it, or its next write would restart the slot below what replicas hold.
func isCRDT(k contract.Kind) bool { return k == contract.KindPN || k == contract.KindSharded }

// handOff moves state after the ring went from olds (the last ring handed
// off into, then the rings installed since) to cur: every state this node
// holds goes to the replicas in cur that did not hold it in every one of
// olds (all of them when this node was not a replica in all of olds, or is
// not one any more), durably; a state of a versioned kind this node no
// longer replicates is then dropped, only if every new replica
// acknowledged it and it did not change meanwhile. When only is not nil,
// states go only to the peers in it (a retry of those that failed). It
// returns the peers that did not acknowledge (nil when nothing was pushed
// because the export failed).
func (n *Node) handOff(ctx context.Context, olds []*ring.Snapshot, cur *ring.Snapshot, only map[string]bool) (map[string]bool, error) {
	if n.retired() != nil {
		return nil, nil // forgotten: peers refuse its stale state anyway
	}
	start := time.Now()
	// Rate-limit state first: it is in memory, small, and the new owners
	// already decide its keys.
	limErr := n.handOffLimits(ctx, olds[0], cur)
	defer func() { // after the counters: a joining node's policies are no hurry
		if err := n.exchangePolicies(ctx); err != nil {
			n.log.Debug("cluster: policy exchange", "err", err)
		}
	}()
	byPeer := map[string][]State{}
	var leaving []State
	var plan handoffPlan
	err := n.store.ExportAll(ctx, func(st State) error {
		targets, isReplica := plan.targets(n.self, olds, cur, st.ID)
		if only != nil {
			targets = slices.DeleteFunc(targets, func(p string) bool { return !only[p] })
		}
		for _, p := range targets {
			byPeer[p] = append(byPeer[p], st)
		}
		if !isReplica && !isCRDT(st.Kind) && len(targets) > 0 {
			leaving = append(leaving, st)
		}
		return nil
	})
	if err != nil {
		return nil, errors.Join(limErr, err)
	}
	failed := n.pushAll(ctx, byPeer, true)
	sent, bytes := 0, 0
	for _, states := range byPeer {
		sent += len(states)
		for i := range states {
			bytes += len(states[i].ID) + len(states[i].Data)
		}
	}
	n.metrics.handoff.WithLabelValues("sent").Add(float64(sent))
	n.metrics.handoffBytes.Add(float64(bytes))
	dropped := n.dropHanded(ctx, leaving, cur, failed)
	n.metrics.handoff.WithLabelValues("dropped").Add(float64(dropped))
	if sent > 0 || dropped > 0 || len(failed) > 0 {
		n.log.Info("cluster handoff", "ring", cur.Version(), "sent", sent, "bytes", bytes, "dropped", dropped,
			"failed_peers", len(failed), "took", time.Since(start).Round(time.Millisecond))
	}
	if len(failed) > 0 {
		n.metrics.handoff.WithLabelValues("failed").Add(float64(len(failed)))
		return failed, errors.Join(limErr, errors.New("cluster: handoff: some peers did not acknowledge"))
	}
	return failed, limErr
}

// drainHandOff hands off into cur (handOff) for a drain: it retries the
// peers that did not acknowledge, with the background loop's delays, until
// every one did or ctx ends, and then returns the last attempt's error.
func (n *Node) drainHandOff(ctx context.Context, olds []*ring.Snapshot, cur *ring.Snapshot) error {
	var only map[string]bool // nil: every peer
	for attempt := 1; ; attempt++ {
		failed, err := n.handOff(ctx, olds, cur, only)
		if err == nil {
			if attempt > 1 {
				n.log.Info("cluster: drain handoff complete", "attempts", attempt)
			}
			return nil
		}
		if attempt == 1 {
			n.log.Warn("cluster: drain handoff incomplete, retrying until the drain's deadline", "err", err, "failed_peers", len(failed))
		}
		if failed != nil { // the export worked: only the failed peers again
			only = failed
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(n.handoffRetryDelay(attempt == 1)):
		}
	}
}

// handoffPlan decides where a handoff sends a state; its buffers are reused
// from one id to the next. Not safe for concurrent use.
type handoffPlan struct{ oldR, newR, out []string }

// targets returns the replicas of id in cur that self must send its state
// to after the ring went from olds to cur: every one that did not replicate
// id in each of olds, or all of them when self did not replicate it in
// each of olds or does not in cur (isReplica). The slice is reused by the
// next call.
func (h *handoffPlan) targets(self string, olds []*ring.Snapshot, cur *ring.Snapshot, id string) (out []string, isReplica bool) {
	held := func(p string) bool {
		for _, old := range olds {
			if h.oldR = old.AppendReplicas(h.oldR[:0], id, 0); !slices.Contains(h.oldR, p) {
				return false
			}
		}
		return true
	}
	h.newR = cur.AppendReplicas(h.newR[:0], id, 0)
	isReplica = slices.Contains(h.newR, self)
	wasReplica := held(self)
	h.out = h.out[:0]
	for _, p := range h.newR {
		if p != self && (!isReplica || !wasReplica || !held(p)) {
			h.out = append(h.out, p)
		}
	}
	return h.out, isReplica
}

// pushAll pushes to every peer in parallel (durable: fsynced there) and
// returns the peers that failed.
func (n *Node) pushAll(ctx context.Context, byPeer map[string][]State, durable bool) map[string]bool {
	var mu sync.Mutex
	var wg sync.WaitGroup
	failed := map[string]bool{}
	for peer, states := range byPeer {
		wg.Go(func() {
			var err error
			if h := knobs.handoffPush.Load(); h != nil && durable {
				err = (*h)(ctx, n.self, peer)
			}
			if err == nil {
				_, err = n.pushStatesMarks(ctx, peer, states, durable, durable)
			}
			if err != nil {
				n.log.Debug("cluster: push", "to", peer, "err", err)
				mu.Lock()
				failed[peer] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return failed
}

// dropHanded drops the states this node handed off, when every new replica
// acknowledged them.
func (n *Node) dropHanded(ctx context.Context, states []State, cur *ring.Snapshot, failed map[string]bool) int {
	dropped := 0
	for _, st := range states {
		if slices.ContainsFunc(cur.Replicas(st.ID, 0), func(p string) bool { return failed[p] }) {
			continue
		}
		if ok, err := n.store.Drop(ctx, st.ID, st.Version); err == nil && ok {
			dropped++
			n.persist(n.dedupe.dropID(st.ID)) // its marks went with it
		}
	}
	return dropped
}
