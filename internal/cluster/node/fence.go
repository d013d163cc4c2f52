package node

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/counterd/counterd/internal/cluster/ring"
	"github.com/counterd/counterd/internal/contract"
)

// fencer remembers which ids this node has read-repaired as owner at the
// current ring version, and the ownership epoch it claimed for each
// (epoch.go). Before serving its first operation on an id after a ring
// change, an owner pulls the id's state from the other replicas (answers
// count only from peers that agree on the ring and accepted its claim)
// and merges it, so it never applies on top of a stale version.
type fencer struct {
	mu      sync.Mutex        // guards version, done, running
	version uint64            // ring version done refers to
	done    map[string]uint32 // ids fenced at version: the epoch claimed, 0 if none (a read view's fence)
	// running has a channel per id being fenced, closed when that fence
	// ends: one fence per id at a time, so concurrent first operations do
	// not claim over each other.
	running map[string]chan struct{}
}

func (f *fencer) init() { f.done, f.running = map[string]uint32{}, map[string]chan struct{}{} }

// start takes the ids of todo that no other fence is running for, and
// returns them, a channel of a running fence of the others (nil if none)
// and the function that ends this fence.
func (f *fencer) start(todo []string) (mine []string, wait chan struct{}, end func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	chs := map[string]chan struct{}{}
	for _, id := range todo {
		if ch, ok := f.running[id]; ok {
			wait = ch
			continue
		}
		ch := make(chan struct{})
		f.running[id], chs[id] = ch, ch
		mine = append(mine, id)
	}
	return mine, wait, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for id, ch := range chs {
			close(ch)
			delete(f.running, id)
		}
	}
}

// pending returns the ids of ids not yet fenced at ring version v (with a
// claim when claim). It returns stale, and nothing else, when a fence of
// a newer version than v began: the caller's snapshot of the ring is old
// (taken before a change that another operation already fenced), and
// going back to v would throw away the epochs claimed at the newer one,
// so the owner's writes there would no longer be lifted to its epoch
// (liftToEpoch) and a write of a previous owner's epoch could share its
// version with them (marks of one would then count as the other's).
func (f *fencer) pending(v uint64, ids []string, claim bool) (out []string, stale bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if v < f.version {
		return nil, true
	}
	if f.version != v {
		f.version, f.done = v, map[string]uint32{}
	}
	for _, id := range ids {
		if e, ok := f.done[id]; !ok || claim && e == 0 {
			out = append(out, id)
		}
	}
	return out, false
}

func (f *fencer) markDone(v uint64, ids []string, epochs map[string]uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.version != v {
		return
	}
	for _, id := range ids {
		f.done[id] = max(f.done[id], epochs[id])
	}
}

// forget makes the next owner operation on ids fence (and claim) again:
// a marked write whose replication failed (its push may have been answered
// stale: a replica promised a newer owner) must not be reported seen on
// the strength of this node's own copy until a fence has checked that
// copy against the replicas (marked.go).
func (f *fencer) forget(ids []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range ids {
		delete(f.done, id)
	}
}

// epoch is the epoch this node claimed for id at ring version v (0: none).
func (f *fencer) epoch(v uint64, id string) uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.version != v {
		return 0
	}
	return f.done[id]
}

// ensure fences ids at the current ring version and returns that version.
// With claim (an owner's operation), it also claims a new ownership epoch
// for each id from a write quorum of its replicas; without (a read view's
// designated answerer, which may not be the owner) it only pulls.
func (f *fencer) ensure(ctx context.Context, n *Node, ids []string, claim bool) (uint64, error) {
	for {
		s := n.ring.Snapshot()
		if s.Len() <= 1 || len(ids) == 0 {
			return s.Version(), nil
		}
		todo, stale := f.pending(s.Version(), ids, claim)
		if stale {
			continue // the ring moved on: fence at its new version
		}
		if len(todo) == 0 {
			return s.Version(), nil
		}
		mine, wait, end := f.start(todo)
		if len(mine) > 0 {
			epochs, err := n.pullQuorum(ctx, s, mine, claim)
			if err == nil {
				if claim {
					n.recheckRecords(mine, epochs)
					n.claimMarks(mine, epochs)
				}
				f.markDone(s.Version(), mine, epochs)
			}
			end()
			if err != nil {
				return 0, err
			}
		} else {
			end()
		}
		if wait != nil {
			select { // another fence of some of ids; then look again
			case <-wait:
			case <-ctx.Done():
				return 0, &UnavailableError{Op: "takeover fence", Err: ctx.Err()}
			}
		}
	}
}

// nodesHash fingerprints a ring's node set and placement: two nodes agree
// on a ring when their fingerprints are equal. A ring placing by whole ids
// has the fingerprint of a version before hash tags (its node set's alone),
// so such nodes and the ones of that version agree; one placing by tag
// another.
func nodesHash(s *ring.Snapshot) uint64 { return ringHash(s.Nodes(), s.Tags()) }

// nodeSetHash is nodesHash of the ring that ring.SetTags(nodes, tags)
// installs (sorted, without duplicates or empty ids).
func nodeSetHash(nodes []string, tags bool) uint64 {
	set := slices.DeleteFunc(slices.Clone(nodes), func(id string) bool { return id == "" })
	slices.Sort(set)
	return ringHash(slices.Compact(set), tags)
}

func ringHash(sorted []string, tags bool) uint64 {
	h := xxhash.Sum64String(strings.Join(sorted, "\x00"))
	if tags {
		h ^= 0x9e3779b97f4a7c15 // any constant: a different fingerprint for the same node set
	}
	return h
}

// pullQuorum fetches ids from the other replicas in s and merges them. It
// succeeds when, for every id, enough replicas agreeing on the ring have
// answered (and, with claim, promised the epoch this node claims for the
// id) to complete a write quorum with this node, and no reachable replica
// still disagrees (the previous owner, which is in the new replica set
// after a join, must have seen the change and so stopped applying). A
// claim refused by a replica that promised a higher epoch is made again
// above it. It retries until FenceTimeout and returns the epochs claimed.
func (n *Node) pullQuorum(ctx context.Context, s *ring.Snapshot, ids []string, claim bool) (map[string]uint32, error) {
	want := nodesHash(s)
	need := map[string]int{}
	ask := map[string]map[string]bool{} // peer -> ids to ask it
	epochs := map[string]uint32{}
	reset := func(id string, above uint32) {
		reps := s.Replicas(id, 0)
		if k := quorum(len(reps)) - 1; k > 0 {
			need[id] = k
		}
		for _, r := range reps {
			if r != n.self {
				if ask[r] == nil {
					ask[r] = map[string]bool{}
				}
				ask[r][id] = true
			}
		}
		if claim {
			epochs[id] = n.claimLocal(id, above)
		}
	}
	for _, id := range ids {
		reset(id, 0)
	}
	deadline := time.Now().Add(n.cfg.FenceTimeout)
	for start := time.Now(); ; {
		// A round waits for no peer past the fence's deadline, a pull
		// without claim (a read view's part, itself bounded by
		// viewPartTimeout) for at most half the fence's time: a peer that
		// hangs is then missing from the round's answers instead of
		// holding the fence for a whole call timeout.
		until := deadline
		if !claim {
			until = minTime(deadline, time.Now().Add(n.cfg.FenceTimeout/2))
		}
		answers := n.fetchRound(ctx, ask, epochs, want, until)
		disagreed := 0
		refused := map[string]uint32{}
		for peer, a := range answers {
			if !a.sameRing {
				disagreed++
				continue
			}
			for id, p := range a.refused {
				if claim && p != 0 {
					refused[id] = max(refused[id], p)
					continue
				}
				delete(ask[peer], id)
				if need[id]--; need[id] <= 0 {
					delete(need, id)
				}
			}
			if len(ask[peer]) == 0 {
				delete(ask, peer)
			}
		}
		for id, p := range refused {
			reset(id, p) // claim above the higher promise, from every replica again
		}
		if len(need) == 0 && disagreed == 0 {
			n.metrics.fence.Observe(time.Since(start).Seconds())
			return epochs, nil
		}
		if n.ring.Version() != s.Version() {
			return nil, errRingChanged
		}
		if time.Now().After(deadline) {
			return nil, &UnavailableError{Op: "takeover fence", Err: fmt.Errorf("%d ids lack a replica quorum that agrees on ring v%d", len(need), s.Version())}
		}
		select {
		case <-ctx.Done():
			return nil, &UnavailableError{Op: "takeover fence", Err: ctx.Err()}
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// fetchAnswer is one peer's answer in a fence round: whether it agrees on
// the ring, and per id asked 0 when it accepted the claim (or none was
// made), else the epoch it promised another claimant.
type fetchAnswer struct {
	sameRing bool
	refused  map[string]uint32
}

// fetchRound asks every peer in ask for its ids once (claiming epochs, when
// given), waiting for none past deadline, and merges every state received. It returns the answers of the
// peers that answered for all their ids (unreachable peers are missing).
func (n *Node) fetchRound(ctx context.Context, ask map[string]map[string]bool, epochs map[string]uint32, want uint64, deadline time.Time) map[string]fetchAnswer {
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := map[string]fetchAnswer{}
	for peer, set := range ask {
		ids := slices.Sorted(maps.Keys(set))
		wg.Go(func() {
			ctx, cancel := context.WithDeadline(ctx, deadline)
			defer cancel()
			a := fetchAnswer{sameRing: true, refused: map[string]uint32{}}
			for chunk := range slices.Chunk(ids, maxIDsPerFetch) {
				if err := n.fetchMerge(ctx, peer, chunk, epochs, want, &a); err != nil {
					return
				}
			}
			mu.Lock()
			out[peer] = a
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// fetchMerge fetches ids from peer, claiming epochs[id] for each id when
// epochs holds it, merges the states and adds the peer's answer to a.
func (n *Node) fetchMerge(ctx context.Context, peer string, ids []string, epochs map[string]uint32, want uint64, a *fetchAnswer) error {
	req := &fetchRequest{header: n.header(false), IDs: ids}
	if len(epochs) > 0 {
		req.Claims = make([]uint32, len(ids))
		for i, id := range ids {
			req.Claims[i] = epochs[id]
		}
	}
	var resp fetchResponse
	if err := n.call(ctx, peer, "Fetch", req, &resp); err != nil {
		return err
	}
	if err := resp.Err.err(peer, nil); err != nil {
		return err
	}
	if _, err := n.mergeWithRecords(ctx, resp.States, resp.Idem, resp.Marks, contract.WriteOptions{Durability: contract.Async}); err != nil {
		n.log.Warn("cluster: fence merge", "from", peer, "err", err)
		return err
	}
	a.sameRing = a.sameRing && resp.Nodes == want
	for i, id := range ids {
		a.refused[id] = 0 // a peer without epochs enforces none: accepted
		if i < len(resp.Refused) {
			a.refused[id] = resp.Refused[i]
		}
	}
	return nil
}

func (n *Node) serveFetch(_ context.Context, req *fetchRequest) *fetchResponse {
	// Take the gate so the answer reflects every op admitted under the
	// ring it reports.
	n.gate.RLock()
	s := n.ring.Snapshot()
	n.gate.RUnlock()
	if req.IdemKey != "" { // lookupRecord (idem.go): the record alone
		// Under the ids' locks: a push being merged (serveReplicate)
		// has its records in the cache when the lock is free.
		unlock := n.promises.lockIDs(req.IDs)
		defer unlock()
		resp := &fetchResponse{Nodes: nodesHash(s)}
		if r, ok := n.idem.record(req.IdemKey, req.IdemFP); ok {
			resp.Idem = []idemRecord{r}
		}
		return resp
	}
	if len(req.Claims) == 0 {
		marks, _ := n.dedupe.forIDs(req.IDs, "", n.markNow())
		return &fetchResponse{States: n.exportIDs(req.IDs), Nodes: nodesHash(s), Idem: n.idem.forIDs(req.IDs, time.Time{}), Marks: marks}
	}
	if len(req.Claims) != len(req.IDs) {
		return &fetchResponse{Err: toWire(fmt.Errorf("%w: %d claims for %d ids", contract.ErrInvalidArgument, len(req.Claims), len(req.IDs)))}
	}
	// A claim and the export it answers with are one step against the
	// check and merge of a push (serveReplicate): a push merged before
	// the claim is in the export, one after it is answered stale.
	unlock := n.promises.lockIDs(req.IDs)
	defer unlock()
	resp := &fetchResponse{States: n.exportIDs(req.IDs), Nodes: nodesHash(s), Refused: make([]uint32, len(req.IDs))}
	floors := map[string]uint32{}
	for _, st := range resp.States {
		floors[st.ID] = epochOf(st.Version)
	}
	for i, id := range req.IDs {
		if req.Claims[i] == 0 {
			continue
		}
		if p := n.promises.claim(id, req.Claims[i], req.From, floors[id]); p != (promise{req.Claims[i], req.From}) {
			resp.Refused[i] = max(p.Epoch, 1)
		}
	}
	resp.Idem = n.idem.forIDs(req.IDs, time.Time{})
	resp.Marks, _ = n.dedupe.forIDs(req.IDs, "", n.markNow())
	return resp
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
