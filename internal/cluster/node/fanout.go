package node

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/cespare/xxhash/v2"

	"github.com/counterd/counterd/internal/cluster/ring"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/rollup"
)

// Cluster-wide operations run on every node of the ring in parallel.
// Aggregate, Len and Scan read at one ring (readview.go), so an id is
// counted once.

// Scan pages through every node in ring order: the cursor holds the node's
// index in the sorted node list (top 16 bits), a tag of the ring's node set
// (bits 40-47) and that node's own cursor. Each page is a read view
// (readview.go): the node lists only the ids it owns, at a ring every node
// agrees on and has finished its handoff into; the other nodes only
// confirm the ring. A ring change between two pages fails the next page
// with ErrUnavailable (restart the scan at cursor 0): ids would have moved
// between nodes, so some would be skipped or repeated. A page fails while
// any node of the ring cannot be reached.
func (n *Node) Scan(ctx context.Context, cursor uint64, match string, count int) ([]string, uint64, error) {
	i, ctag, local := parseScanCursor(cursor)
	var target string
	var tag uint64
	var done bool
	var ids []string
	var next uint64
	err := n.viewFanOut(ctx, viewRead{
		op: "scan", strict: true,
		prepare: func(nodes []string) error {
			tag = ringTag(nodes)
			if cursor != 0 && ctag != tag {
				return errScanRingChanged
			}
			target, done = "", i >= len(nodes)
			if !done {
				target = nodes[i]
			}
			if i+1 == len(nodes) {
				done = true // after this page
			}
			return nil
		},
		req: func(node string) *localRequest {
			if node == target {
				return &localRequest{Op: "scan", Cursor: local, Match: match, Count: count}
			}
			return &localRequest{Op: "view"}
		},
		reset: func() { ids, next = nil, 0 },
		merge: func(node string, r *localResponse) error {
			if node == target {
				ids, next = r.IDs, r.Next
			}
			return nil
		},
	})
	switch {
	case err != nil:
		return nil, 0, err
	case target == "":
		return nil, 0, nil // past the last node
	case next != 0:
		return ids, scanCursor(i, tag, next), nil
	case done:
		return ids, 0, nil
	}
	return ids, scanCursor(i+1, tag, 0), nil
}

// scanCursor packs a cluster scan cursor: node index, ring tag, the node's
// engine cursor (below 2^40).
func scanCursor(node int, tag, local uint64) uint64 {
	return uint64(node)<<scanNodeShift | tag<<scanTagShift | local
}

// parseScanCursor unpacks scanCursor.
func parseScanCursor(c uint64) (node int, tag, local uint64) {
	return int(c >> scanNodeShift), (c >> scanTagShift) & 0xFF, c & (1<<scanTagShift - 1)
}

// scanNodeShift: engine cursors use 40 bits (shard << 32 | slab index);
// the ring tag takes the 8 bits above them.
const (
	scanNodeShift = 48
	scanTagShift  = 40
)

var errScanRingChanged = fmt.Errorf("%w: the ring changed during the scan; start again at cursor 0", contract.ErrUnavailable)

// ringTag is an 8-bit tag of a node set, never 0.
func ringTag(nodes []string) uint64 {
	return xxhash.Sum64String(strings.Join(nodes, "\x00"))%255 + 1
}

// Aggregate sums the additive counters whose id starts with prefix over
// the cluster: each id once, read on its owner (or, while the owner cannot
// be reached, on its next replica) at one ring (readview.go).
func (n *Node) Aggregate(ctx context.Context, prefix string) (contract.Aggregate, error) {
	if len(prefix) > contract.MaxIDLen {
		return contract.Aggregate{}, fmt.Errorf("%w: prefix longer than %d bytes", contract.ErrInvalidID, contract.MaxIDLen)
	}
	var out contract.Aggregate
	err := n.viewFanOut(ctx, viewRead{
		op:    "aggregate",
		req:   func(string) *localRequest { return &localRequest{Op: "aggregate", Prefix: prefix} },
		reset: func() { out = contract.Aggregate{Prefix: prefix} },
		merge: func(_ string, r *localResponse) error {
			v, err := counter.AddInt64(out.Value, r.Aggregate.Value)
			if err != nil {
				return fmt.Errorf("%w: sum of %q*", contract.ErrOverflow, prefix)
			}
			out.Value, out.Count = v, out.Count+r.Aggregate.Count
			return nil
		}})
	return out, err
}

// Len counts the counters of the cluster, each once, at one ring.
func (n *Node) Len(ctx context.Context) (int, error) {
	total := 0
	err := n.viewFanOut(ctx, viewRead{
		op:    "len",
		req:   func(string) *localRequest { return &localRequest{Op: "len"} },
		reset: func() { total = 0 },
		merge: func(_ string, r *localResponse) error { total += r.N; return nil },
	})
	return total, err
}

// FlushAll deletes every counter on every node. The nodes flush in
// parallel, so a state one node pushed (replication, anti-entropy) just
// before it flushed can reach a node that already had: a second round
// deletes those. Writes racing with FlushAll may survive it.
func (n *Node) FlushAll(ctx context.Context, wo contract.WriteOptions) error {
	ctx, cancel := n.bounded(ctx)
	defer cancel()
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
	ctx, cancel := n.bounded(ctx)
	defer cancel()
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
	case "scan", "aggregate", "len", "view":
		if req.View == nil {
			err = fmt.Errorf("%w: %s without a read view (older peer?)", contract.ErrUnavailable, req.Op)
			break
		}
		resp.View, err = n.viewPart(req.View, func(answers func(string) bool) error {
			return n.serveView(ctx, req, resp, answers)
		})
	case "flushall":
		err = n.store.FlushAll(ctx, contract.WriteOptions{Durability: req.Durability})
	case "setrollup":
		err = n.store.SetRollup(ctx, req.Key, req.Spec)
	case "deleterollup":
		resp.OK, err = n.store.DeleteRollup(ctx, req.Key)
	case "series":
		resp.Series, err = n.localSeries(ctx, req.SeriesOf)
	case "handed_off":
		if req.Mark != nil && req.From != "" {
			n.marks.record(req.From, *req.Mark)
		}
		resp.Mark = n.ownMark()
	default:
		err = errUnknownOp
	}
	if err != nil {
		*resp = localResponse{}
	}
	resp.Err = toWire(err)
	return resp
}

// serveView is this node's part of a read view: the ids answers accepts.
func (n *Node) serveView(ctx context.Context, req *localRequest, resp *localResponse, answers func(string) bool) (err error) {
	switch req.Op {
	case "scan":
		resp.IDs, resp.Next, err = n.scanAnswered(ctx, req.Cursor, req.Match, req.Count, answers)
	case "aggregate":
		resp.Aggregate, err = n.aggregateAnswered(ctx, req.Prefix, answers)
	case "len":
		resp.N, err = n.countAnswered(ctx, answers)
	}
	return err
}

// scanAnswered is one page of the local scan, keeping the ids answers
// accepts.
func (n *Node) scanAnswered(ctx context.Context, cursor uint64, match string, count int, answers func(string) bool) ([]string, uint64, error) {
	ids, next, err := n.store.Scan(ctx, cursor, match, count)
	if err != nil {
		return nil, 0, err
	}
	return slices.DeleteFunc(ids, func(id string) bool { return !answers(id) }), next, nil
}

// eachAnswered calls fn for each page of the local ids matching match that
// answers accepts. With fence, each page is fenced first (pulled from the
// other replicas once per ring version, as an owner's first read does), so
// a sync write acknowledged by a quorum that did not include this node is
// counted after a failover.
func (n *Node) eachAnswered(ctx context.Context, match string, answers func(string) bool, fence bool, fn func(ids []string) error) error {
	var cursor uint64
	for {
		ids, next, err := n.scanAnswered(ctx, cursor, match, 1000, answers)
		if err != nil {
			return err
		}
		if fence {
			if _, err := n.fence.ensure(ctx, n, ids, false); err != nil {
				return err
			}
		}
		if err := fn(ids); err != nil {
			return err
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

// aggregateAnswered sums the additive counters among the ids answers
// accepts. The ids that may lack an acknowledged sync write here are
// pulled from the other replicas at every read (pullReplicas) before they
// are counted: pn and sharded counters (an add is applied where it is
// received and acknowledged by a write quorum that need not include this
// node, before its push arrives), and the ids this node answers for in
// place of an unreachable owner (which may have acknowledged writes with
// another replica since this node's fence).
func (n *Node) aggregateAnswered(ctx context.Context, prefix string, answers func(string) bool) (contract.Aggregate, error) {
	a := contract.Aggregate{Prefix: prefix}
	count := func(v contract.View) error {
		if !v.Exists || !v.Kind.Additive() {
			return nil
		}
		var err error
		if a.Value, err = counter.AddInt64(a.Value, v.Value); err != nil {
			return fmt.Errorf("%w: sum of %q*", contract.ErrOverflow, prefix)
		}
		a.Count++
		return nil
	}
	var pull []string
	err := n.eachAnswered(ctx, escapeGlob(prefix)+"*", answers, true, func(ids []string) error {
		s := n.ring.Snapshot()
		pull = pull[:0]
		for _, id := range ids {
			v, err := n.store.Get(ctx, id)
			if err != nil {
				return err
			}
			if v.Exists && v.Kind.Additive() && (isCRDT(v.Kind) || s.Owner(id) != n.self) {
				pull = append(pull, id)
				continue
			}
			if err := count(v); err != nil {
				return err
			}
		}
		if err := n.pullReplicas(ctx, s, pull); err != nil {
			return err
		}
		for _, id := range pull {
			v, err := n.store.Get(ctx, id)
			if err != nil {
				return err
			}
			if err := count(v); err != nil {
				return err
			}
		}
		return nil
	})
	return a, err
}

func (n *Node) countAnswered(ctx context.Context, answers func(string) bool) (int, error) {
	c := 0
	err := n.eachAnswered(ctx, "", answers, false, func(ids []string) error { c += len(ids); return nil })
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

// pullReplicas merges the other replicas' states of ids into this node,
// and returns once, for every id, enough replicas answered that every
// write quorum of the id's replicas (a sync write is acknowledged once
// one holds it, which need not include this node) meets the replicas
// read, this one included. Unlike the takeover fence it
// claims nothing, runs at every read, and does not wait for the slowest
// replica.
func (n *Node) pullReplicas(ctx context.Context, s *ring.Snapshot, ids []string) error {
	if len(ids) == 0 || s.Len() <= 1 {
		return nil
	}
	want := nodesHash(s)
	need := map[string]int{}
	ask := map[string][]string{}
	for _, id := range ids {
		// Replicas read (this one and k others) plus a write quorum must
		// exceed the replicas: R=3 reads one other, R=2 none (every
		// write quorum holds both).
		reps := s.Replicas(id, 0)
		k := len(reps) - quorum(len(reps))
		if !slices.Contains(reps, n.self) {
			k++
		}
		if k <= 0 {
			continue
		}
		need[id] = k
		for _, r := range reps {
			if r != n.self {
				ask[r] = append(ask[r], id)
			}
		}
	}
	if len(need) == 0 {
		return nil
	}
	type answer struct {
		ids []string
		err error
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel() // the slower peers' calls: their answers are not needed
	ch := make(chan answer, len(ask))
	for peer, pids := range ask {
		go func() {
			a := fetchAnswer{sameRing: true, refused: map[string]uint32{}}
			for chunk := range slices.Chunk(pids, maxIDsPerFetch) {
				if err := n.fetchMerge(pctx, peer, chunk, nil, want, &a); err != nil {
					ch <- answer{err: err}
					return
				}
			}
			ch <- answer{ids: pids}
		}()
	}
	var last error
	for range ask {
		var a answer
		select {
		case a = <-ch:
		case <-ctx.Done():
			return &UnavailableError{Op: "read view pull", Err: ctx.Err()}
		}
		if a.err != nil {
			last = a.err
			continue
		}
		for _, id := range a.ids {
			if need[id]--; need[id] <= 0 {
				delete(need, id)
			}
		}
		if len(need) == 0 {
			return nil
		}
	}
	return fmt.Errorf("%w: read view: %d ids lack a replica quorum (e.g. %q): %v", contract.ErrUnavailable, len(need), firstKey(need), last)
}
