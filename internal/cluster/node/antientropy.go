package node

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/engine"
)

// antiEntropy sends each peer a digest (version and data hash) of the states
// this node shares with it; the peer answers with its states that differ
// (merged here) and the ids it lacks or holds differently (pushed to it).
// The digests of states not written since the last round come from the
// digest cache (digestcache.go).
//
// A state updated since the previous round began is left out, by the
// sender (except in a full round) and by the receiver: its replication is
// under way, and a digest of it would differ only because a push is on
// its way; the repair would then ship the state and all its dedupe marks
// both ways for nothing. Such a state's replicas converge through the
// pushes (a write pushes the whole state to every replica, and a push
// that failed stays pending: push.go), and anti-entropy compares it once
// it has not changed for a round. Under a steady stream of new or
// rewritten counters, that was most of the cost of a round (issue 25:
// 10% of a 3-node cluster's CPU consuming the pipeline benchmark).
func (n *Node) antiEntropy(ctx context.Context) error {
	s := n.ring.Snapshot()
	if s.Len() < 2 {
		return nil
	}
	full, settled := n.digests.nextRound(n.store.Now().UnixNano())
	since := n.digests.begin()
	digests := map[string][]digestItem{}
	var reps []string
	err := n.store.EachMeta(ctx, func(id string, m engine.StateMeta) error {
		if !full && m.UpdatedAt > settled {
			return nil // settling: see above
		}
		reps = s.AppendReplicas(reps[:0], id, 0)
		if !slices.ContainsFunc(reps, func(p string) bool { return p != n.self }) {
			return nil
		}
		var it digestItem
		var ok bool
		if !full {
			it, ok = n.digests.get(id, m)
		}
		if !ok {
			st, held, err := n.export(id)
			if err != nil || !held {
				return err
			}
			it = digestOf(st)
			n.digests.put(st.Meta(), it, since)
		}
		for _, p := range reps {
			if p != n.self {
				digests[p] = append(digests[p], it)
			}
		}
		return nil
	})
	n.digests.end()
	if err != nil {
		return err
	}
	defer n.digests.prune()
	var errs []error
	for peer, items := range digests {
		for chunk := range slices.Chunk(items, maxStatesPerCall) {
			errs = append(errs, n.exchangeDigest(ctx, peer, chunk))
		}
	}
	return errors.Join(append(errs, n.exchangePolicies(ctx))...)
}

// digestOf summarises a state. CRDT versions are per-node Lamport clocks
// that differ between converged replicas, so only their data counts; and a
// sharded counter's data names the node holding it, so only its slots do
// (else converged replicas would exchange every sharded state each round).
func digestOf(st State) digestItem {
	sum := xxhash.Sum64(st.Data)
	if st.Kind == contract.KindSharded && !st.Deleted {
		var sh counter.Sharded
		if sh.UnmarshalBinary(st.Data) == nil {
			sum = slotsSum(sh.Slots())
		}
	}
	if st.Deleted {
		sum = ^sum
	}
	v := st.Version
	if isCRDT(st.Kind) || st.Kind == contract.KindHLL {
		v = 0
	}
	return digestItem{ID: st.ID, Version: v, Sum: sum ^ uint64(st.ExpiresAt)}
}

func (n *Node) exchangeDigest(ctx context.Context, peer string, items []digestItem) error {
	var resp digestResponse
	if err := n.call(ctx, peer, "Digest", &digestRequest{header: n.header(false), Items: items}, &resp); err != nil {
		return err
	}
	if err := resp.Err.err(peer, nil); err != nil {
		return err
	}
	if _, err := n.mergeWithRecords(ctx, resp.States, resp.Idem, resp.Marks, contract.WriteOptions{Durability: contract.Async}); err != nil {
		return err
	}
	repairs := len(resp.States) + len(resp.Want)
	n.metrics.antiEntropy.Add(float64(repairs))
	if len(resp.Want) == 0 {
		return nil
	}
	_, err := n.pushStatesMarks(ctx, peer, n.exportIDs(resp.Want), false, true)
	return err
}

func (n *Node) serveDigest(_ context.Context, req *digestRequest) *digestResponse {
	resp := &digestResponse{}
	since := n.digests.begin()
	defer n.digests.end()
	settled := n.digests.lastRound()
	for _, it := range req.Items {
		m, ok, err := n.store.MetaOf(it.ID)
		if err == nil && ok && m.UpdatedAt > settled {
			continue // written here since this node's last round: see antiEntropy
		}
		var mine digestItem
		if err == nil && ok {
			mine, ok, err = n.digestFor(it.ID, m, since)
		}
		if err != nil {
			return &digestResponse{Err: toWire(err)}
		}
		if !ok {
			resp.Want = append(resp.Want, it.ID)
			continue
		}
		if mine != it {
			st, ok, err := n.export(it.ID)
			if err != nil {
				return &digestResponse{Err: toWire(err)}
			}
			resp.Want = append(resp.Want, it.ID)
			if ok {
				resp.States = append(resp.States, st)
			}
		}
	}
	resp.Idem = n.idem.forIDs(stateIDs(resp.States), time.Now().Add(-idemPushWindow))
	resp.Marks, _ = n.dedupe.forIDs(stateIDs(resp.States), "", n.markNow())
	return resp
}

// slotsSum hashes sharded slots (sorted by replica).
func slotsSum(slots []counter.ShardedSlot) uint64 {
	var d xxhash.Digest
	d.Reset()
	var b []byte
	for _, x := range slots {
		b = binary.AppendUvarint(b[:0], uint64(len(x.Replica)))
		b = append(b, x.Replica...)
		b = binary.AppendUvarint(b, x.Seq)
		b = binary.AppendVarint(b, x.Sum)
		_, _ = d.Write(b)
	}
	return d.Sum64()
}
