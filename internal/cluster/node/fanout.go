package node

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/rollup"
)

// Cluster-wide operations run on every node of the ring in parallel. Each
// node answers for the ids it owns in its ring, so an id is counted once.

// Scan pages through every node in ring order: the cursor holds the node's
// index in the sorted node list (top 16 bits) and that node's own cursor.
// An id is listed by its owner only. A ring change during a scan may skip
// or repeat ids.
func (n *Node) Scan(ctx context.Context, cursor uint64, match string, count int) ([]string, uint64, error) {
	nodes := n.ring.Snapshot().Nodes()
	i, local := int(cursor>>scanNodeShift), cursor&(1<<scanNodeShift-1)
	if i >= len(nodes) {
		return nil, 0, nil
	}
	resp, err := n.onNode(ctx, nodes[i], &localRequest{Op: "scan", Cursor: local, Match: match, Count: count})
	if err != nil {
		return nil, 0, err
	}
	if resp.Next != 0 {
		return resp.IDs, uint64(i)<<scanNodeShift | resp.Next, nil
	}
	if i+1 == len(nodes) {
		return resp.IDs, 0, nil
	}
	return resp.IDs, uint64(i+1) << scanNodeShift, nil
}

// scanNodeShift: engine cursors use 40 bits (shard << 32 | slab index).
const scanNodeShift = 48

// Aggregate sums the additive counters whose id starts with prefix over
// every node (each node sums the ids it owns).
func (n *Node) Aggregate(ctx context.Context, prefix string) (engine.Aggregate, error) {
	if len(prefix) > engine.MaxIDLen {
		return engine.Aggregate{}, fmt.Errorf("%w: prefix longer than %d bytes", engine.ErrInvalidID, engine.MaxIDLen)
	}
	out := engine.Aggregate{Prefix: prefix}
	err := n.fanOut(ctx, &localRequest{Op: "aggregate", Prefix: prefix}, func(r *localResponse) error {
		v, err := counter.AddInt64(out.Value, r.Aggregate.Value)
		if err != nil {
			return fmt.Errorf("%w: sum of %q*", engine.ErrOverflow, prefix)
		}
		out.Value, out.Count = v, out.Count+r.Aggregate.Count
		return nil
	})
	return out, err
}

// Len counts the counters of the cluster (each node counts those it owns).
func (n *Node) Len(ctx context.Context) (int, error) {
	total := 0
	err := n.fanOut(ctx, &localRequest{Op: "len"}, func(r *localResponse) error {
		total += r.N
		return nil
	})
	return total, err
}

// FlushAll deletes every counter on every node. The nodes flush in
// parallel, so a state one node pushed (replication, anti-entropy) just
// before it flushed can reach a node that already had: a second round
// deletes those. Writes racing with FlushAll may survive it.
func (n *Node) FlushAll(ctx context.Context, wo engine.WriteOptions) error {
	for range 2 {
		if err := n.fanOut(ctx, &localRequest{Op: "flushall", Durability: wo.Durability}, nil); err != nil {
			return err
		}
	}
	return nil
}

// SetRollup sets a rollup spec on every node (writes may be applied, and
// rolled up, on any node).
func (n *Node) SetRollup(ctx context.Context, key string, spec rollup.Spec) error {
	return n.fanOut(ctx, &localRequest{Op: "setrollup", Key: key, Spec: spec}, nil)
}

// DeleteRollup deletes a rollup spec on every node.
func (n *Node) DeleteRollup(ctx context.Context, key string) (bool, error) {
	found := false
	err := n.fanOut(ctx, &localRequest{Op: "deleterollup", Key: key}, func(r *localResponse) error {
		found = found || r.OK
		return nil
	})
	return found, err
}

// Rollup reads a rollup spec (specs are set on every node).
func (n *Node) Rollup(ctx context.Context, key string) (rollup.Spec, bool, error) {
	return n.store.Rollup(ctx, key)
}

// Rollups lists the rollup specs (specs are set on every node).
func (n *Node) Rollups(ctx context.Context) (map[string]rollup.Spec, error) {
	return n.store.Rollups(ctx)
}

// fanOut runs req on every node of the ring in parallel and passes each
// answer to merge (serially). Any failure fails the whole operation: a
// partial sum would be wrong without saying so.
func (n *Node) fanOut(ctx context.Context, req *localRequest, merge func(*localResponse) error) error {
	if err := n.retired(); err != nil {
		return err
	}
	nodes := n.ring.Snapshot().Nodes()
	resps := make([]*localResponse, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, node := range nodes {
		wg.Go(func() {
			r := *req
			resps[i], errs[i] = n.onNode(ctx, node, &r)
		})
	}
	wg.Wait()
	for i := range nodes {
		if errs[i] != nil {
			return errs[i]
		}
		if merge != nil {
			if err := merge(resps[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// onNode runs a local request on node (this one or a peer).
func (n *Node) onNode(ctx context.Context, node string, req *localRequest) (*localResponse, error) {
	if node == n.self {
		resp := n.serveLocal(ctx, req)
		return resp, resp.Err.err(node, nil)
	}
	req.header = n.header(false)
	resp := &localResponse{}
	err := n.call(ctx, node, "Local", req, resp)
	n.metrics.forwarded.WithLabelValues("local_"+req.Op, resultLabel(err)).Inc()
	if err != nil {
		return nil, err
	}
	return resp, resp.Err.err(node, nil)
}

func (n *Node) serveLocal(ctx context.Context, req *localRequest) *localResponse {
	resp := &localResponse{}
	var err error
	switch req.Op {
	case "scan":
		resp.IDs, resp.Next, err = n.scanOwned(ctx, req.Cursor, req.Match, req.Count)
	case "aggregate":
		resp.Aggregate, err = n.aggregateOwned(ctx, req.Prefix)
	case "len":
		resp.N, err = n.countOwned(ctx)
	case "flushall":
		err = n.store.FlushAll(ctx, engine.WriteOptions{Durability: req.Durability})
	case "setrollup":
		err = n.store.SetRollup(ctx, req.Key, req.Spec)
	case "deleterollup":
		resp.OK, err = n.store.DeleteRollup(ctx, req.Key)
	default:
		err = errUnknownOp
	}
	resp.Err = toWire(err)
	return resp
}

// scanOwned is one page of the local scan, keeping the ids this node owns.
func (n *Node) scanOwned(ctx context.Context, cursor uint64, match string, count int) ([]string, uint64, error) {
	ids, next, err := n.store.Scan(ctx, cursor, match, count)
	if err != nil {
		return nil, 0, err
	}
	s := n.ring.Snapshot()
	owned := ids[:0]
	for _, id := range ids {
		if s.Owner(id) == n.self {
			owned = append(owned, id)
		}
	}
	return owned, next, nil
}

// eachOwned calls fn for every local id matching match that this node owns.
func (n *Node) eachOwned(ctx context.Context, match string, fn func(id string) error) error {
	var cursor uint64
	for {
		ids, next, err := n.scanOwned(ctx, cursor, match, 1000)
		if err != nil {
			return err
		}
		for _, id := range ids {
			if err := fn(id); err != nil {
				return err
			}
		}
		if next == 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		cursor = next
	}
}

func (n *Node) aggregateOwned(ctx context.Context, prefix string) (engine.Aggregate, error) {
	a := engine.Aggregate{Prefix: prefix}
	err := n.eachOwned(ctx, escapeGlob(prefix)+"*", func(id string) error {
		v, err := n.store.Get(ctx, id)
		if err != nil || !v.Exists || !v.Kind.Additive() {
			return err
		}
		if a.Value, err = counter.AddInt64(a.Value, v.Value); err != nil {
			return fmt.Errorf("%w: sum of %q*", engine.ErrOverflow, prefix)
		}
		a.Count++
		return nil
	})
	return a, err
}

func (n *Node) countOwned(ctx context.Context) (int, error) {
	c := 0
	err := n.eachOwned(ctx, "", func(string) error { c++; return nil })
	return c, err
}

// escapeGlob quotes the Redis glob metacharacters of s.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
