package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
)

var _ contract.CounterMarker = (*Node)(nil)

// markedRequest applies marked ops on the owner of their ids
// (ApplyMarked).
type markedRequest struct {
	header
	Ops        []contract.MarkedOp `json:"ops"`
	Durability contract.Durability `json:"durability"`
	TTL        time.Duration       `json:"ttl"`
}

type markedResponse struct {
	Seen [][]string `json:"seen"`
	Err  *wireError `json:"err,omitempty"`
}

// errMarkSettling: a new owner waits for the handoffs into its ring
// before it applies a marked op (their marks may still be on the way).
var errMarkSettling = fmt.Errorf("%w: the ring is settling (handoff in progress); retry", contract.ErrUnavailable)

// ApplyCounterMarked applies each op with its marks on the owner of its
// counter (contract.CounterMarker). Ops are grouped per owner and the
// groups run in parallel; a group answered with a wrong owner is sent
// once more where the receiver says. Marked ops are always replicated to
// a write quorum before they are answered (sync), whatever wo says: an
// event whose offset the consumer commits must not be lost with its
// owner.
func (n *Node) ApplyCounterMarked(ctx context.Context, ops []contract.MarkedOp, ttl time.Duration, wo contract.WriteOptions) ([][]string, error) {
	if err := n.checkMarked(ops, ttl); err != nil {
		return nil, err
	}
	ctx, cancel := n.bounded(ctx)
	defer cancel()
	if err := n.retired(); err != nil {
		return nil, err
	}
	seen := make([][]string, len(ops))
	if len(ops) == 0 {
		return seen, nil
	}
	idx := make([]int, len(ops))
	for i := range idx {
		idx[i] = i
	}
	if err := n.markedRoute(ctx, ops, idx, ttl, wo, seen, true); err != nil {
		return nil, err
	}
	return seen, nil
}

// checkMarked validates marked ops: each op valid, without sources (its
// marks live with one counter), each mark 1..maxMarkLen bytes.
func (n *Node) checkMarked(ops []contract.MarkedOp, ttl time.Duration) error {
	if ttl <= 0 || ttl > contract.MaxTTL {
		return fmt.Errorf("%w: mark ttl %v", contract.ErrInvalidArgument, ttl)
	}
	for i := range ops {
		op := &ops[i].Op
		if err := op.Validate(n.cfg.Limits); err != nil {
			return &contract.BatchError{Index: i, Err: err}
		}
		if len(op.Sources) > 0 {
			return &contract.BatchError{Index: i, Err: fmt.Errorf("%w: a marked op has one counter (no sources)", contract.ErrInvalidArgument)}
		}
		for _, m := range ops[i].Marks {
			if m == "" || len(m) > maxMarkLen {
				return &contract.BatchError{Index: i, Err: fmt.Errorf("%w: a mark is 1..%d bytes", contract.ErrInvalidArgument, maxMarkLen)}
			}
		}
	}
	return nil
}

// markedRoute applies ops[idx] on their owners, filling seen[idx[i]].
func (n *Node) markedRoute(ctx context.Context, ops []contract.MarkedOp, idx []int, ttl time.Duration, wo contract.WriteOptions, seen [][]string, retry bool) error {
	s := n.ring.Snapshot()
	by := map[string][]int{}
	for _, i := range idx {
		o := s.Owner(ops[i].Op.ID)
		by[o] = append(by[o], i)
	}
	errs := make(chan error, len(by))
	for owner, part := range by {
		go func() {
			sub := make([]contract.MarkedOp, len(part))
			for j, i := range part {
				sub[j] = ops[i]
			}
			var got [][]string
			var err error
			if owner == n.self || owner == "" {
				got, err = n.applyMarkedLocal(ctx, sub, ttl, wo)
			} else {
				for _, piece := range markedPieces(sub) {
					var g [][]string
					g, err = n.forwardMarked(ctx, owner, piece.ops, ttl, wo)
					n.metrics.forwarded.WithLabelValues("apply_marked", resultLabel(err)).Inc()
					if err == nil && len(g) != len(piece.ops) {
						err = &UnavailableError{Op: "apply marked", Err: fmt.Errorf("%d answers for %d ops", len(g), len(piece.ops))}
					}
					if err != nil {
						var be *contract.BatchError
						if errors.As(err, &be) && be.Index >= 0 && be.Index < len(piece.ops) {
							err = &contract.BatchError{Index: piece.first + be.Index, Err: be.Err}
						}
						break
					}
					got = append(got, g...)
				}
			}
			var wrong *WrongOwnerError
			if errors.As(err, &wrong) && retry {
				// The receiver's ring (or ours) moved: route again once.
				errs <- n.markedRoute(ctx, ops, part, ttl, wo, seen, false)
				return
			}
			if err == nil && len(got) != len(sub) {
				err = &UnavailableError{Op: "apply marked", Err: fmt.Errorf("%d answers for %d ops", len(got), len(sub))}
			}
			if err != nil {
				var be *contract.BatchError
				if errors.As(err, &be) && be.Index >= 0 && be.Index < len(part) {
					err = &contract.BatchError{Index: part[be.Index], Err: be.Err}
				}
				errs <- err
				return
			}
			for j, i := range part {
				seen[i] = got[j]
			}
			errs <- nil
		}()
	}
	var all []error
	for range by {
		if err := <-errs; err != nil {
			all = append(all, err)
		}
	}
	if len(all) == 0 {
		return nil
	}
	return all[0]
}

func (n *Node) forwardMarked(ctx context.Context, node string, ops []contract.MarkedOp, ttl time.Duration, wo contract.WriteOptions) ([][]string, error) {
	req := &markedRequest{header: n.header(true), Ops: ops, Durability: wo.Durability, TTL: ttl}
	var resp markedResponse
	if err := n.call(ctx, node, "ApplyMarked", req, &resp); err != nil {
		return nil, err
	}
	if err := resp.Err.err(node, nil); err != nil {
		return nil, err
	}
	return resp.Seen, nil
}

func (n *Node) serveApplyMarked(ctx context.Context, req *markedRequest) *markedResponse {
	if err := n.checkMarked(req.Ops, req.TTL); err != nil {
		return &markedResponse{Err: toWire(err)}
	}
	seen, err := n.applyMarkedLocal(ctx, req.Ops, req.TTL, contract.WriteOptions{Durability: req.Durability})
	if err != nil {
		return &markedResponse{Err: toWire(err)}
	}
	return &markedResponse{Seen: seen}
}

// markSettleWait is how often a marked op that waits for inbound handoffs
// looks again.
const markSettleWait = 20 * time.Millisecond

// applyMarkedLocal applies ops, all owned by this node, each with its
// marks, and replicates them to a write quorum. It waits (until ctx ends)
// while the handoffs into this node's ring are not complete: a state or
// marks handed in later would come too late for the check.
func (n *Node) applyMarkedLocal(ctx context.Context, ops []contract.MarkedOp, ttl time.Duration, wo contract.WriteOptions) ([][]string, error) {
	n.inflight.Add(1)
	defer n.inflight.Add(-1)
	plain := make([]contract.Op, len(ops))
	for i := range ops {
		plain[i] = ops[i].Op
	}
	ids := opIDs(plain)
	for {
		seen, applied, res, err := n.applyMarkedOnce(ctx, ops, plain, ids, ttl)
		if errors.Is(err, errMarkSettling) {
			select {
			case <-ctx.Done():
				return nil, err
			case <-time.After(markSettleWait):
				continue
			}
		}
		if err != nil {
			return nil, err
		}
		if len(applied) > 0 {
			if err := n.replicateAfter(ctx, applied, res, contract.WriteOptions{Durability: contract.Sync}); err != nil {
				// Not acknowledged: maybe lost to a newer owner (a stale
				// answer). The retry fences again first, so this node's
				// marks count only if the fenced state holds the write.
				n.fence.forget(opIDs(applied))
				return nil, err
			}
		}
		return seen, nil
	}
}

// applyMarkedOnce is one attempt of applyMarkedLocal as the owner: it
// returns the seen marks, and the ops it applied with their results.
//
// A marked op is never CRDT-local (it needs its owner's marks), so in a
// minority it is refused like any owned write (checkMajority).
func (n *Node) applyMarkedOnce(ctx context.Context, ops []contract.MarkedOp, plain []contract.Op, ids []string, ttl time.Duration) (seen [][]string, applied []contract.Op, res []contract.Result, err error) {
	if n.minority.Load() {
		return nil, nil, nil, errMinority
	}
	err = n.quotaApply(ctx, plain, func(check, done func() error) error {
		return n.ownerDo(ctx, ids, nil, func() error {
			if !n.inboundDone(n.ring.Snapshot()) {
				return errMarkSettling
			}
			if n.minority.Load() {
				return errMinority
			}
			if check != nil {
				if err := check(); err != nil {
					return err
				}
			}
			var err error
			seen, applied, res, err = n.applyMarkedOwned(ctx, ops, ids, ttl)
			if done != nil {
				if derr := done(); derr != nil {
					err = errors.Join(err, derr)
				}
			}
			return err
		})
	})
	return seen, applied, res, err
}

// applyMarkedOwned is the owner's step, under the gate: with the ids'
// mark locks held, it looks up each op's marks in the counter's marks
// (counting only those whose write the counter's state holds), applies
// the ops none of whose marks exists in one engine batch, and in the same
// flush stores their marks; the ids' export stripes are held until the
// marks are in the store, so a push that shows a write carries its marks.
func (n *Node) applyMarkedOwned(ctx context.Context, ops []contract.MarkedOp, ids []string, ttl time.Duration) (seen [][]string, applied []contract.Op, res []contract.Result, err error) {
	unlockM := n.markLocks.lock(ids)
	defer unlockM()
	unlockS := n.stripes.rlock(ids)
	defer unlockS()
	now := n.markNow()
	seen = make([][]string, len(ops))
	fresh := map[string][]string{} // per id: marks taken by earlier ops of this call
	var which []int
	for i := range ops {
		id := ops[i].Op.ID
		// The version and kind only: Export would encode the state.
		version, kind, ok, err := n.store.VersionOf(id)
		if err != nil {
			return nil, nil, nil, err
		}
		crdt := false
		if ok {
			crdt = isCRDT(kind)
		} else {
			version = 0
		}
		s := n.dedupe.seen(id, ops[i].Marks, version, crdt, now)
		for _, m := range ops[i].Marks {
			if slices.Contains(fresh[id], m) && !slices.Contains(s, m) {
				s = append(s, m)
			}
		}
		if len(s) > 0 {
			seen[i] = s
			continue
		}
		fresh[id] = append(fresh[id], ops[i].Marks...)
		which = append(which, i)
	}
	if len(which) == 0 {
		return seen, nil, nil, nil
	}
	applied = make([]contract.Op, len(which))
	for j, i := range which {
		applied[j] = ops[i].Op
	}
	v := n.ring.Version() // under the gate: the fence's version
	exp := now + int64(ttl)
	res, err = n.store.ApplyStored(ctx, applied, contract.WriteOptions{Durability: contract.Sync}, func(res []contract.Result) ([]engine.StoredRecord, error) {
		groups := make([]markGroup, 0, len(res))
		var lifted []engine.StoredRecord
		keep := func(s []engine.StoredRecord) { lifted = append(lifted, s...) }
		for j := range res {
			// Lift the version to this node's epoch, as applyOwned does,
			// inside the flush that writes the effect (with the marks the
			// lift moves to the epoch).
			if err := n.liftToEpoch(v, applied[j].ID, &res[j], keep); err != nil {
				return nil, err
			}
			marks := ops[which[j]].Marks
			if len(marks) == 0 {
				continue
			}
			g := markGroup{ID: applied[j].ID, Key: res[j].Version, Wrote: []uint64{res[j].Version}, Expires: exp, Events: slices.Clone(marks)}
			if !res[j].Changed || isCRDT(res[j].Kind) {
				// Nothing written (or a slot with no epochs): the group
				// still needs a name of its own.
				g.Key = res[j].Version ^ uint64(now)
			}
			groups = append(groups, g)
		}
		return append(lifted, n.dedupe.merge(groups, now)...), nil
	})
	if err != nil {
		var be *contract.BatchError
		if errors.As(err, &be) && be.Index >= 0 && be.Index < len(which) {
			err = &contract.BatchError{Index: which[be.Index], Err: be.Err}
		}
		return nil, nil, nil, err
	}
	return seen, applied, res, nil
}

// A forwarded ApplyMarked message holds at most maxMarkedOps ops and
// about maxMarkBytes of marks (gRPC's messages are bounded).
const maxMarkedOps = 4096

type markedPiece struct {
	first int
	ops   []contract.MarkedOp
}

// markedPieces splits ops into pieces of at most maxMarkedOps ops and about
// maxMarkBytes of marks (an op is never split: its marks go with it).
func markedPieces(ops []contract.MarkedOp) []markedPiece {
	var out []markedPiece
	start, size := 0, 0
	for i := range ops {
		n := 64
		for _, m := range ops[i].Marks {
			n += len(m) + 2
		}
		if i > start && (i-start == maxMarkedOps || size+n > maxMarkBytes) {
			out = append(out, markedPiece{start, ops[start:i]})
			start, size = i, 0
		}
		size += n
	}
	if start < len(ops) {
		out = append(out, markedPiece{start, ops[start:]})
	}
	return out
}
