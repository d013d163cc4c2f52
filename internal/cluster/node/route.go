package node

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/counterd/counterd/internal/contract"
)

// routed runs an operation on id's owner: local when this node owns id,
// else remote(owner) with the hop flag set. A WrongOwnerError (the sender's
// ring was stale, or ours changed under us) is retried once, at the owner
// the receiver named or at the owner in our refreshed ring; never more, so
// a request makes at most two hops in total and never loops. A call to an
// owner that turns out to be dead is sent once more to the new owner
// (failedOver), which also counts as the second hop.
func (n *Node) routed(ctx context.Context, op, id string, local func(context.Context) error, remote func(context.Context, string) error) error {
	if err := n.retired(); err != nil {
		return err // its copies are stale
	}
	var hint string
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		owner := n.ring.Owner(id)
		if hint != "" && hint != n.self && n.peers.get(hint).GRPC != "" {
			owner = hint // the receiver's ring is newer than ours
		}
		if owner == n.self || owner == "" {
			err = local(ctx)
		} else {
			err = remote(ctx, owner)
			n.metrics.forwarded.WithLabelValues(op, resultLabel(err)).Inc()
			// Reads fall back to a replica at once instead (read).
			if attempt == 0 && err != nil && op == "apply" && n.failedOver(ctx, id, owner, err) {
				continue
			}
		}
		var wo *WrongOwnerError
		if !errors.As(err, &wo) {
			return err
		}
		hint = wo.Owner
		if hint == owner {
			hint = ""
		}
	}
	return err
}

func resultLabel(err error) string {
	var wo *WrongOwnerError
	var ue *UnavailableError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &wo):
		return "wrong_owner"
	case errors.As(err, &ue):
		return "unavailable"
	}
	return "error"
}

// ownerDo runs fn as the owner of ids: it fences the ids (takeover
// read-repair after a ring change), then holds the gate shared while it
// checks ownership and runs fn, so a ring change waits for fn. It fails with
// *WrongOwnerError when this node does not own one of ids (exempt ids
// skipped).
func (n *Node) ownerDo(ctx context.Context, ids []string, exempt func(string) bool, fn func() error) error {
	if err := n.joinedOrAlone(); err != nil {
		return err
	}
	if len(ownedIDs(ids, exempt)) > 0 {
		if err := n.awaitLease(ctx); err != nil {
			return err // cut off: claim nothing, serve nothing
		}
	}
	for try := 0; ; try++ {
		owned := ownedIDs(ids, exempt)
		if err := n.checkOwner(owned); err != nil {
			return err
		}
		v, err := n.fence.ensure(ctx, n, owned, true)
		if errors.Is(err, errRingChanged) && try < 3 {
			continue
		}
		if err != nil {
			return err
		}
		err = n.leaseGuard(ctx, owned, v)
		if errors.Is(err, errRingChanged) && try < 3 {
			continue
		}
		if err != nil {
			return err
		}
		if h := knobs.afterFence.Load(); h != nil {
			(*h)(n.self, v)
		}
		n.gate.RLock()
		if n.ring.Version() != v {
			// The ring changed while fencing: fence again. Never run fn
			// under a ring not fenced: its writes would find no epoch
			// (liftToEpoch) and keep a previous owner's versions.
			n.gate.RUnlock()
			if try < 3 {
				continue
			}
			return errRingChanged
		}
		err = n.checkOwner(owned)
		if err == nil {
			err = fn()
		}
		n.gate.RUnlock()
		return err
	}
}

func ownedIDs(ids []string, exempt func(string) bool) []string {
	if exempt == nil {
		return ids
	}
	return slices.DeleteFunc(slices.Clone(ids), exempt)
}

// joinedOrAlone fails while this node has not yet met any of the other
// --join nodes: alone, it would own every id and diverge from the cluster;
// and for good once the cluster forgot it (forget.go).
func (n *Node) joinedOrAlone() error {
	if err := n.retired(); err != nil {
		return err
	}
	if !n.joined.Load() && n.hasOtherSeeds() {
		return errNotJoined
	}
	return nil
}

// checkOwner fails with *WrongOwnerError unless this node owns every id.
func (n *Node) checkOwner(ids []string) error {
	s := n.ring.Snapshot()
	for _, id := range ids {
		if o := s.Owner(id); o != n.self {
			return &WrongOwnerError{ID: id, Owner: o, RingVersion: s.Version()}
		}
	}
	return nil
}

// opIDs lists the ids an op touches (PFMERGE reads its sources too).
func opIDs(ops []contract.Op) []string {
	ids := make([]string, 0, len(ops))
	for i := range ops {
		ids = append(ids, ops[i].ID)
		ids = append(ids, ops[i].Sources...)
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// crdtLocal reports whether op is applied by this node into its own slot
// instead of by the owner: an add to a pn or sharded counter (named by
// op.Kind, or already held locally with that kind). Keyed adds too: this
// node's idempotency table sees a retry that comes back to it, and the
// record travels with the next push (100 ms), so a retry that reaches
// another node after that replays as well (see docs/cluster.md for the
// window in which it does not).
func (n *Node) crdtLocal(ctx context.Context, op *contract.Op, _ string) bool {
	if op.Type != contract.OpAdd {
		return false
	}
	k := op.Kind
	if k == contract.KindNone {
		v, err := n.store.Get(ctx, op.ID)
		if err != nil {
			return false
		}
		k = v.Kind
	} else if (k == contract.KindPN || k == contract.KindSharded) && n.quota.cfg.Load().counter(op.ID) != nil {
		// Creating a key under max_keys: on its owner, which counts it
		// (quota.go).
		if _, _, exists, err := n.store.TTL(ctx, op.ID); err != nil || !exists {
			return false
		}
	}
	return k == contract.KindPN || k == contract.KindSharded
}

// durability resolves the default durability.
func (n *Node) durability(wo contract.WriteOptions) contract.Durability {
	if wo.Durability == contract.DurabilityDefault {
		return n.cfg.Durability
	}
	return wo.Durability
}

var errCrossNode = fmt.Errorf("%w: the ids live on different nodes (use ids with one owner)", contract.ErrInvalidArgument)
