package node

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/counterd/counterd/internal/cluster/ring"
	"github.com/counterd/counterd/internal/engine"
)

// fencer remembers which ids this node has read-repaired as owner at the
// current ring version. Before serving its first operation on an id after
// a ring change, an owner pulls the id's state from the other replicas
// (answers count only from peers that agree on the ring) and merges it, so
// it never applies on top of a stale version.
type fencer struct {
	mu      sync.Mutex          // guards version, done
	version uint64              // ring version done refers to
	done    map[string]struct{} // ids fenced at version
}

func (f *fencer) init() { f.done = map[string]struct{}{} }

// pending returns the ids of ids not yet fenced at ring version v.
func (f *fencer) pending(v uint64, ids []string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.version != v {
		f.version, f.done = v, map[string]struct{}{}
	}
	var out []string
	for _, id := range ids {
		if _, ok := f.done[id]; !ok {
			out = append(out, id)
		}
	}
	return out
}

func (f *fencer) markDone(v uint64, ids []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.version != v {
		return
	}
	for _, id := range ids {
		f.done[id] = struct{}{}
	}
}

// ensure fences ids at the current ring version and returns that version.
func (f *fencer) ensure(ctx context.Context, n *Node, ids []string) (uint64, error) {
	s := n.ring.Snapshot()
	if s.Len() <= 1 || len(ids) == 0 {
		return s.Version(), nil
	}
	todo := f.pending(s.Version(), ids)
	if len(todo) == 0 {
		return s.Version(), nil
	}
	if err := n.pullQuorum(ctx, s, todo); err != nil {
		return 0, err
	}
	f.markDone(s.Version(), todo)
	return s.Version(), nil
}

// nodesHash fingerprints a ring's node set.
func nodesHash(s *ring.Snapshot) uint64 { return xxhash.Sum64String(strings.Join(s.Nodes(), "\x00")) }

// pullQuorum fetches ids from the other replicas in s and merges them. It
// succeeds when, for every id, enough replicas agreeing on the ring have
// answered to complete a write quorum with this node, and no reachable
// replica still disagrees (the previous owner, which is in the new replica
// set after a join, must have seen the change and so stopped applying). It
// retries until FenceTimeout.
func (n *Node) pullQuorum(ctx context.Context, s *ring.Snapshot, ids []string) error {
	want := nodesHash(s)
	need := map[string]int{}
	byPeer := map[string][]string{}
	for _, id := range ids {
		reps := s.Replicas(id, 0)
		if k := quorum(len(reps)) - 1; k > 0 {
			need[id] = k
		}
		for _, r := range reps {
			if r != n.self {
				byPeer[r] = append(byPeer[r], id)
			}
		}
	}
	deadline := time.Now().Add(n.cfg.FenceTimeout)
	for start := time.Now(); ; {
		agreed, disagreed := n.fetchRound(ctx, byPeer, want)
		for _, peer := range agreed {
			for _, id := range byPeer[peer] {
				if need[id]--; need[id] <= 0 {
					delete(need, id)
				}
			}
			delete(byPeer, peer)
		}
		if len(need) == 0 && disagreed == 0 {
			n.metrics.fence.Observe(time.Since(start).Seconds())
			return nil
		}
		if n.ring.Version() != s.Version() {
			return errRingChanged
		}
		if time.Now().After(deadline) {
			return &UnavailableError{Op: "takeover fence", Err: fmt.Errorf("%d ids lack a replica quorum that agrees on ring v%d", len(need), s.Version())}
		}
		select {
		case <-ctx.Done():
			return &UnavailableError{Op: "takeover fence", Err: ctx.Err()}
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// fetchRound asks every peer in byPeer for its ids once and merges every
// state received. It returns the peers that answered with ring hash want,
// and how many answered with another ring (unreachable peers are neither).
func (n *Node) fetchRound(ctx context.Context, byPeer map[string][]string, want uint64) (agreed []string, disagreed int) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for peer, ids := range byPeer {
		wg.Go(func() {
			same, ok := true, true
			for chunk := range slices.Chunk(ids, maxIDsPerFetch) {
				agrees, err := n.fetchMerge(ctx, peer, chunk, want)
				if err != nil {
					ok = false
					break
				}
				same = same && agrees
			}
			if !ok {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if same {
				agreed = append(agreed, peer)
			} else {
				disagreed++
			}
		})
	}
	wg.Wait()
	return agreed, disagreed
}

// fetchMerge fetches ids from peer and merges them; it reports whether the
// peer's ring node set hashes to want.
func (n *Node) fetchMerge(ctx context.Context, peer string, ids []string, want uint64) (bool, error) {
	req := &fetchRequest{header: n.header(false), IDs: ids}
	var resp fetchResponse
	if err := n.call(ctx, peer, "Fetch", req, &resp); err != nil {
		return false, err
	}
	if err := resp.Err.err(peer, nil); err != nil {
		return false, err
	}
	n.idem.put(resp.Idem)
	if len(resp.States) > 0 {
		if _, err := n.merge(ctx, resp.States, engine.WriteOptions{Durability: engine.Async}); err != nil {
			n.log.Warn("cluster: fence merge", "from", peer, "err", err)
			return false, err
		}
	}
	return resp.Nodes == want, nil
}

func (n *Node) serveFetch(_ context.Context, req *fetchRequest) *fetchResponse {
	// Take the gate so the answer reflects every op admitted under the
	// ring it reports.
	n.gate.RLock()
	s := n.ring.Snapshot()
	n.gate.RUnlock()
	return &fetchResponse{States: n.exportIDs(req.IDs), Nodes: nodesHash(s), Idem: n.idem.forIDs(req.IDs, time.Time{})}
}
