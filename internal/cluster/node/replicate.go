package node

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/counterd/counterd/internal/cluster/ring"
	"github.com/counterd/counterd/internal/contract"
)

// Bounds on one peer message, well below gRPC's default 4 MiB limit (a
// dense hll state is 16 KiB, a third more in JSON).
const (
	maxStatesPerCall = 500     // states or digest items per Replicate or Digest call
	maxBytesPerCall  = 1 << 20 // state data per Replicate call
	maxIDsPerFetch   = 64      // ids per Fetch call
)

// chunks splits states into runs of at most maxStatesPerCall states and
// about maxBytesPerCall bytes of data.
func chunks(states []State) [][]State {
	var out [][]State
	start, size := 0, 0
	for i, st := range states {
		if i > start && (i-start == maxStatesPerCall || size+len(st.Data) > maxBytesPerCall) {
			out = append(out, states[start:i])
			start, size = i, 0
		}
		size += len(st.Data)
	}
	if start < len(states) {
		out = append(out, states[start:])
	}
	return out
}

// ---- after a write: replicate now (sync) or batch (async) ----

// replicateAfter replicates what ops changed: at once to a write quorum for
// sync writes (and for every write while draining), else through the next
// push batch. A delete replicates as a tombstone (the engine keeps none).
func (n *Node) replicateAfter(ctx context.Context, ops []contract.Op, res []contract.Result, wo contract.WriteOptions) error {
	sync := n.durability(wo) == contract.Sync
	var changes []change
	for i, r := range res {
		if !r.Changed && !sync {
			continue
		}
		c := change{id: ops[i].ID}
		if (ops[i].Type == contract.OpDelete || ops[i].Type == contract.OpExpire && ops[i].TTL < 0) && r.Changed {
			at := n.store.Now().UnixNano() // the clock UpdatedAt stamps come from
			c.tomb = &State{ID: c.id, Kind: r.Kind, Version: r.Version, UpdatedAt: at, Deleted: true}
			n.tombs.add(c.id, at)
		}
		changes = append(changes, c)
	}
	if len(changes) == 0 {
		return nil
	}
	if sync || n.leaving.Load() {
		return n.replicateNow(ctx, changes, sync)
	}
	n.dirty.mark(changes)
	return nil
}

// change is an id to replicate; tomb, when set, is what to send if the id
// no longer exists locally.
type change struct {
	id   string
	tomb *State
}

// replicateNow pushes the current state of ids to their replicas and waits
// until each id is held by a write quorum (this node counts when it is a
// replica). Peers that fail are retried by the push loop.
func (n *Node) replicateNow(ctx context.Context, changes []change, durable bool) error {
	s := n.ring.Snapshot()
	if n.alone(s) && !n.minority.Load() {
		// No replica to push to (a cluster of one): no export. The flag
		// is read after the ring: a ring of one left by a shrink has it
		// set (refresh), and its writes go to the check below.
		return nil
	}
	states := n.exportChanges(changes)
	// The minority flag is set before the ring shrinks (refresh): a write
	// applied under a larger ring must not count this smaller one's
	// quorum, which may be this node alone.
	if n.minority.Load() && slices.ContainsFunc(states, func(st State) bool { return !isCRDT(st.Kind) }) {
		n.dirty.mark(changes)
		return errMinority
	}
	plan := n.planPush(s, states)
	if len(plan.byPeer) == 0 {
		return nil
	}
	type ack struct {
		peer  string
		stale map[string]bool
		err   error
	}
	acks := make(chan ack, len(plan.byPeer))
	for peer, states := range plan.byPeer {
		go func() {
			// Detached from ctx: a push that outlives an early quorum
			// answer still completes.
			cctx, cancel := context.WithTimeout(n.ctx, n.cfg.RPCTimeout)
			defer cancel()
			stale, err := n.pushStatesStale(cctx, peer, states, durable)
			acks <- ack{peer, stale, err}
		}()
	}
	missing := plan.need
	for range plan.byPeer {
		var a ack
		select {
		case a = <-acks:
		case <-ctx.Done():
			return &UnavailableError{Op: "replicate", Err: ctx.Err()}
		}
		if a.err != nil {
			n.dirty.mark(stateChanges(plan.byPeer[a.peer]))
			continue
		}
		for _, st := range plan.byPeer[a.peer] {
			if a.stale[st.ID] {
				continue // the peer promised a newer owner: no acknowledgement
			}
			if missing[st.ID]--; missing[st.ID] <= 0 {
				delete(missing, st.ID)
			}
		}
		if len(missing) == 0 {
			return nil
		}
	}
	return &UnavailableError{Op: "replicate", Err: fmt.Errorf("write quorum not reached for %d ids (e.g. %q)", len(missing), firstKey(missing))}
}

// alone reports whether s is a ring of this node only: no id has a
// replica to push to.
func (n *Node) alone(s *ring.Snapshot) bool {
	return s.Len() == 0 || s.Len() == 1 && s.Owner("") == n.self
}

func firstKey(m map[string]int) string {
	for k := range m {
		return k
	}
	return ""
}

// pushPlan says which peer gets which states, and how many peer acks each
// id needs for a write quorum.
type pushPlan struct {
	byPeer map[string][]State
	need   map[string]int
}

// planPush sends each state to the replicas of its id other than this node.
func (n *Node) planPush(s *ring.Snapshot, states []State) pushPlan {
	p := pushPlan{byPeer: map[string][]State{}, need: map[string]int{}}
	var reps []string
	for _, st := range states {
		reps = s.AppendReplicas(reps[:0], st.ID, 0)
		need := quorum(len(reps))
		if slices.Contains(reps, n.self) {
			need--
		}
		if need > 0 {
			p.need[st.ID] = need
		}
		for _, r := range reps {
			if r != n.self {
				p.byPeer[r] = append(p.byPeer[r], st)
			}
		}
	}
	return p
}

// exportIDs exports the states this node holds among ids.
func (n *Node) exportIDs(ids []string) []State {
	out := make([]State, 0, len(ids))
	for _, id := range ids {
		st, ok, err := n.export(id)
		if err != nil {
			n.log.Warn("cluster: export", "id", id, "err", err)
			continue
		}
		if ok {
			out = append(out, st)
		}
	}
	return out
}

// exportChanges exports each change, or its tombstone if it is gone.
func (n *Node) exportChanges(changes []change) []State {
	out := make([]State, 0, len(changes))
	for _, c := range changes {
		st, ok, err := n.export(c.id)
		switch {
		case err != nil:
			n.log.Warn("cluster: export", "id", c.id, "err", err)
		case ok:
			out = append(out, st)
		case c.tomb != nil:
			out = append(out, *c.tomb)
		}
	}
	return out
}

func stateChanges(states []State) []change {
	out := make([]change, len(states))
	for i := range states {
		out[i] = change{id: states[i].ID}
		if states[i].Deleted {
			out[i].tomb = &states[i]
		}
	}
	return out
}

// pushStates sends states to peer in chunks, each with the recent
// idempotency records of its ids; durable asks for fsync.
func (n *Node) pushStates(ctx context.Context, peer string, states []State, durable bool) error {
	_, err := n.pushStatesStale(ctx, peer, states, durable)
	return err
}

// pushStatesStale is pushStates returning the ids whose states peer
// merged but answered stale: written in an ownership epoch below the one
// it promised (epoch.go).
func (n *Node) pushStatesStale(ctx context.Context, peer string, states []State, durable bool) (map[string]bool, error) {
	return n.pushStatesMarks(ctx, peer, states, durable, false)
}

// pushStatesMarks is pushStatesStale; each chunk also carries the dedupe
// marks of its ids (marks.go): all of them when allMarks (handoff), else
// those the last pushes to peer did not deliver. Marks beyond what one
// message should hold go ahead of their states in messages of their own
// (a receiver keeps marks whose write it does not hold yet; they count
// once it does).
func (n *Node) pushStatesMarks(ctx context.Context, peer string, states []State, durable, allMarks bool) (map[string]bool, error) {
	since := time.Now().Add(-idemPushWindow)
	var stale map[string]bool
	from := peer
	if allMarks {
		from = ""
	}
	for _, chunk := range chunks(states) {
		// The states were exported before: every write they show has its
		// marks in the store already (stripes), so forIDs returns them.
		marks, upTo := n.dedupe.forIDs(stateIDs(chunk), from, n.markNow())
		pieces := markChunks(marks)
		for _, piece := range pieces[:max(0, len(pieces)-1)] {
			var resp replicateResponse
			if err := n.call(ctx, peer, "Replicate", &replicateRequest{header: n.header(false), Sync: durable, Marks: piece}, &resp); err != nil {
				return stale, err
			}
			if err := resp.Err.err(peer, nil); err != nil {
				return stale, err
			}
		}
		req := &replicateRequest{header: n.header(false), States: chunk, Sync: durable, Idem: n.idem.forIDs(stateIDs(chunk), since)}
		if len(pieces) > 0 {
			req.Marks = pieces[len(pieces)-1]
		}
		var resp replicateResponse
		if err := n.call(ctx, peer, "Replicate", req, &resp); err != nil {
			return stale, err
		}
		if err := resp.Err.err(peer, nil); err != nil {
			return stale, err
		}
		n.dedupe.delivered(peer, upTo)
		for _, id := range resp.Stale {
			if stale == nil {
				stale = map[string]bool{}
			}
			stale[id] = true
		}
	}
	return stale, nil
}

func stateIDs(states []State) []string {
	ids := make([]string, len(states))
	for i := range states {
		ids[i] = states[i].ID
	}
	return ids
}

func (n *Node) serveReplicate(ctx context.Context, req *replicateRequest) *replicateResponse {
	wo := contract.WriteOptions{Durability: contract.Async}
	if req.Sync {
		wo.Durability = contract.Sync
	}
	// The epoch check and the merge (in memory) are one step against a
	// claim and its export (serveFetch): see epoch.go. A stale state (an
	// old owner's write after the claim) is not merged and its records
	// are not kept: that write will lose to the new owner's. Records go in
	// before the wait for the disk (which comes after, without the lock):
	// a merge whose wait fails (the sender gave up) has still changed
	// memory, and its retry must replay.
	unlock := n.promises.lockIDs(stateIDs(req.States))
	var stale []string
	fresh := make([]State, 0, len(req.States))
	for _, st := range req.States {
		if !isCRDT(st.Kind) && n.promises.stale(st.ID, st.Version, req.From) {
			stale = append(stale, st.ID)
			continue
		}
		fresh = append(fresh, st)
	}
	// The records go to disk in the same batch as the states (idem.go).
	recs := slices.DeleteFunc(slices.Clone(req.Idem), func(r idemRecord) bool {
		return slices.ContainsFunc(r.IDs, func(id string) bool { return slices.Contains(stale, id) })
	})
	changed, err := n.mergeWithRecords(ctx, fresh, recs, req.Marks, contract.WriteOptions{Durability: contract.Async})
	unlock()
	if err == nil && wo.Durability == contract.Sync {
		_, err = n.store.Merge(ctx, nil, wo) // waits until what was merged is on disk
	}
	return &replicateResponse{Changed: changed, Stale: stale, Err: toWire(err)}
}
