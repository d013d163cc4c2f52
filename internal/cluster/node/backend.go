package node

import (
	"context"
	"errors"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/idem"
	"github.com/counterd/counterd/internal/rollup"
)

var _ contract.Backend = (*Node)(nil)

// Apply applies op on its owner (forwarding it there in one hop), or on
// this node for an unkeyed add to a pn or sharded counter.
func (n *Node) Apply(ctx context.Context, op contract.Op, wo contract.WriteOptions) (contract.Result, error) {
	if err := op.Validate(n.cfg.Limits); err != nil {
		return contract.Result{}, err
	}
	if err := n.quotaReserved([]contract.Op{op}, false); err != nil {
		return contract.Result{}, err
	}
	res, err := n.applyOps(ctx, []contract.Op{op}, false, wo)
	if err != nil {
		return contract.Result{}, err
	}
	return res[0], nil
}

// ApplyBatch splits ops by owner and applies each part on its owner, in
// parallel. A part is atomic; the batch as a whole is atomic only when all
// its ops have one owner (see docs/cluster.md).
func (n *Node) ApplyBatch(ctx context.Context, ops []contract.Op, wo contract.WriteOptions) ([]contract.Result, error) {
	if err := contract.ValidateBatch(ops, n.cfg.Limits); err != nil {
		return nil, err
	}
	if err := n.quotaReserved(ops, true); err != nil {
		return nil, err
	}
	return n.applyOps(ctx, ops, true, wo)
}

// applyOps applies ops (one op when !batch) where they belong.
func (n *Node) applyOps(ctx context.Context, ops []contract.Op, batch bool, wo contract.WriteOptions) ([]contract.Result, error) {
	ctx, cancel := n.bounded(ctx)
	defer cancel()
	if err := n.retired(); err != nil {
		return nil, err // even CRDT adds: nobody would take its pushes
	}
	if err := n.checkSources(ops, batch); err != nil {
		if !batch {
			err = n.quotaBeforeCrossNode(ctx, &ops[0], err)
		}
		return nil, err
	}
	if !batch && n.crdtLocal(ctx, &ops[0], wo.IdempotencyKey) {
		return n.applyHere(ctx, ops, batch, wo)
	}
	if !batch {
		var res []contract.Result
		if wo.IdempotencyKey != "" {
			ctx = withRetrySafe(ctx)
		}
		err := n.routed(ctx, "apply", ops[0].ID, func(ctx context.Context) (err error) {
			res, err = n.localApply(ctx, ops, batch, wo)
			return err
		}, func(ctx context.Context, node string) (err error) {
			res, err = n.forwardApply(ctx, node, ops, batch, wo)
			return err
		})
		return res, err
	}
	return n.applySplit(ctx, ops, wo, true)
}

// validateIDs checks read ids before they are sent: ids are protobuf
// strings on the wire, which must be valid UTF-8.
func validateIDs(ids ...string) error {
	for _, id := range ids {
		if err := contract.ValidateID(id); err != nil {
			return err
		}
	}
	return nil
}

// checkSources rejects a PFMERGE whose sources have another owner than its
// destination: the owner merges sketches it holds (like Redis Cluster's
// CROSSSLOT).
func (n *Node) checkSources(ops []contract.Op, batch bool) error {
	s := n.ring.Snapshot()
	for i := range ops {
		dst := s.Owner(ops[i].ID)
		for _, src := range ops[i].Sources {
			if s.Owner(src) == dst {
				continue
			}
			if batch {
				return &contract.BatchError{Index: i, Err: errCrossNode}
			}
			return errCrossNode
		}
	}
	return nil
}

// localApply applies ops owned by this node (or CRDT-local) and replicates
// the result.
func (n *Node) localApply(ctx context.Context, ops []contract.Op, batch bool, wo contract.WriteOptions) ([]contract.Result, error) {
	n.inflight.Add(1)
	defer n.inflight.Add(-1)
	local := n.crdtOnly(ctx, ops, wo.IdempotencyKey)
	if err := n.checkMajority(local); err != nil {
		return nil, err
	}
	var res []contract.Result
	err := n.quotaApply(ctx, ops, func(check, done func() error) error {
		return n.ownerDo(ctx, opIDs(ops), func(id string) bool { return local[id] }, func() (err error) {
			// Again under the gate: the op may have waited (fence) while the
			// ring shrank to this node's side of a partition.
			if err := n.checkMajority(local); err != nil {
				return err
			}
			if check != nil {
				if err := check(); err != nil {
					return err
				}
			}
			res, err = n.applyKeyed(ctx, ops, batch, wo)
			if done != nil {
				if derr := done(); derr != nil {
					err = errors.Join(err, derr)
				}
			}
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	if err := n.replicateAfter(ctx, ops, res, wo); err != nil {
		return res, err
	}
	if n.durability(wo) != contract.Sync {
		// Acknowledged within the lease. A sync write needs no check: it
		// is acknowledged only once a write quorum merged it without a
		// newer epoch's promise, so the new owner's fence pulled it.
		err = n.leaseAck(opIDs(ops), local)
	}
	return res, err
}

// applyKeyed applies ops to the store. A keyed mutation that another node
// already applied (its record arrived with a push or a fence) is replayed
// from the record instead; one applied here leaves a record that travels
// with the next push of its ids.
func (n *Node) applyKeyed(ctx context.Context, ops []contract.Op, batch bool, wo contract.WriteOptions) ([]contract.Result, error) {
	if wo.IdempotencyKey == "" {
		return n.applyOwned(ctx, ops, batch, wo)
	}
	q := idem.Request{Key: wo.IdempotencyKey, FP: engine.Fingerprint(ops)}
	return idem.Do(ctx, &clusterIdem{n: n, ops: ops, batch: batch, wo: wo}, q, nil)
}

// checkMajority refuses owner writes while this node sees at most half of
// the cluster: on the small side of a partition its writes could be
// acknowledged and then lost when the majority's higher versions win on
// heal. CRDT-local ids (unkeyed pn and sharded adds) stay writable.
func (n *Node) checkMajority(local map[string]bool) error {
	if !n.minority.Load() {
		return nil
	}
	for _, ok := range local {
		if !ok {
			return errMinority
		}
	}
	return nil
}

// crdtOnly returns the ids whose every op in ops is CRDT-local: those need
// no ownership.
func (n *Node) crdtOnly(ctx context.Context, ops []contract.Op, key string) map[string]bool {
	m := make(map[string]bool, len(ops))
	for i := range ops {
		ok := len(ops[i].Sources) == 0 && n.crdtLocal(ctx, &ops[i], key)
		if prev, seen := m[ops[i].ID]; seen {
			ok = ok && prev
		}
		m[ops[i].ID] = ok
	}
	return m
}

// applyHere applies CRDT-local ops without an ownership check.
func (n *Node) applyHere(ctx context.Context, ops []contract.Op, batch bool, wo contract.WriteOptions) ([]contract.Result, error) {
	n.inflight.Add(1)
	defer n.inflight.Add(-1)
	res, err := n.applyKeyed(ctx, ops, batch, wo)
	if err != nil {
		return nil, err
	}
	return res, n.replicateAfter(ctx, ops, res, wo)
}

// applyOwned applies ops to the store and lifts the version of each id
// written as its owner to the epoch this node claimed for it (epoch.go),
// so that what it writes beats every state of a previous owner.
func (n *Node) applyOwned(ctx context.Context, ops []contract.Op, batch bool, wo contract.WriteOptions) ([]contract.Result, error) {
	res, err := n.applyStore(ctx, ops, batch, wo)
	if err != nil {
		return nil, err
	}
	v := n.ring.Version() // under the gate when owned: the fence's version
	for i := range res {
		if res[i].Replayed {
			continue
		}
		if err := n.liftToEpoch(v, ops[i].ID, &res[i], n.persist); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// liftToEpoch raises the version of a write r of id that is not
// CRDT-local to this node's epoch of id (the fence of ring version v), so
// that it beats every state of a previous owner. At the epoch's first
// write, the dedupe marks of id move to the epoch (markStore.lifted):
// store gets their changes before the state is raised.
func (n *Node) liftToEpoch(v uint64, id string, r *contract.Result, store func([]engine.StoredRecord)) error {
	if !r.Changed || isCRDT(r.Kind) {
		return nil
	}
	e := n.fence.epoch(v, id)
	floor := epochFloor(e)
	if r.Version >= floor {
		return nil
	}
	store(n.dedupe.lifted(id, e, n.markNow()))
	if _, _, err := n.store.RaiseVersion(id, floor); err != nil {
		return err
	}
	// This write's version, raised as RaiseVersion raises the id's (or,
	// deleted, its tombstone's): the id's version now may already count
	// writes that came after this one, and two concurrent first writes of
	// an epoch would report it both.
	r.Version = floor | r.Version&(1<<epochBits-1)
	return nil
}

func (n *Node) applyStore(ctx context.Context, ops []contract.Op, batch bool, wo contract.WriteOptions) ([]contract.Result, error) {
	if batch {
		return n.store.ApplyBatch(ctx, ops, wo)
	}
	r, err := n.store.Apply(ctx, ops[0], wo)
	if err != nil {
		return nil, err
	}
	return []contract.Result{r}, nil
}

// forwardApply sends ops to node, which must own them.
func (n *Node) forwardApply(ctx context.Context, node string, ops []contract.Op, batch bool, wo contract.WriteOptions) ([]contract.Result, error) {
	req := &applyRequest{header: n.header(true), Ops: ops, Batch: batch, Durability: wo.Durability, IdemKey: wo.IdempotencyKey}
	var resp applyResponse
	if err := n.call(ctx, node, "Apply", req, &resp); err != nil {
		return nil, err
	}
	if err := resp.Err.err(node, nil); err != nil {
		return nil, err
	}
	res := make([]contract.Result, len(resp.Results))
	for i, r := range resp.Results {
		res[i] = r.Result
		res[i].Replayed = r.Replayed
	}
	return res, nil
}

func (n *Node) serveApply(ctx context.Context, req *applyRequest) *applyResponse {
	if len(req.Ops) == 0 {
		return &applyResponse{Err: toWire(errEmptyRequest)}
	}
	wo := contract.WriteOptions{Durability: req.Durability, IdempotencyKey: req.IdemKey}
	res, err := n.localApply(ctx, req.Ops, req.Batch, wo)
	if err != nil {
		return &applyResponse{Err: toWire(err)}
	}
	out := make([]wireResult, len(res))
	for i, r := range res {
		out[i] = wireResult{Result: r, Replayed: r.Replayed}
	}
	return &applyResponse{Results: out}
}

// applySplit groups a batch by target node and applies the groups in
// parallel; retry allows one re-split of groups answered with a wrong
// owner.
func (n *Node) applySplit(ctx context.Context, ops []contract.Op, wo contract.WriteOptions, retry bool) ([]contract.Result, error) {
	groups := n.groupOps(ctx, ops, wo.IdempotencyKey)
	out := make([]contract.Result, len(ops))
	errs := make([]error, len(groups))
	done := make(chan struct{}, len(groups))
	for gi, g := range groups {
		go func() {
			defer func() { done <- struct{}{} }()
			part := make([]contract.Op, len(g.idx))
			for i, j := range g.idx {
				part[i] = ops[j]
			}
			var res []contract.Result
			var err error
			switch {
			case g.node == n.self:
				res, err = n.localApply(ctx, part, true, wo)
			default:
				res, err = n.forwardApply(ctx, g.node, part, true, wo)
				n.metrics.forwarded.WithLabelValues("batch", resultLabel(err)).Inc()
			}
			if isWrongOwner(err) && retry {
				res, err = n.applySplit(ctx, part, wo, false)
			}
			var be *contract.BatchError
			if err != nil && len(part) == 1 && len(ops) > 1 && !errors.As(err, &be) && !errors.Is(err, contract.ErrUnavailable) {
				// The engine reports a one-op batch's failure without an
				// index; the caller's batch has more ops.
				err = &contract.BatchError{Index: 0, Err: err}
			}
			errs[gi] = remapBatchError(err, g.idx)
			for i, r := range res {
				out[g.idx[i]] = r
			}
		}()
	}
	for range groups {
		<-done
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

type opGroup struct {
	node string
	idx  []int // indexes into the batch, in order
}

// groupOps assigns every op to the node that applies it: this node for
// CRDT-local adds, else the owner of its id.
func (n *Node) groupOps(ctx context.Context, ops []contract.Op, key string) []opGroup {
	s := n.ring.Snapshot()
	var groups []opGroup
	at := map[string]int{}
	for i := range ops {
		node := n.self
		if !n.crdtLocal(ctx, &ops[i], key) {
			if o := s.Owner(ops[i].ID); o != "" {
				node = o
			}
		}
		gi, ok := at[node]
		if !ok {
			gi = len(groups)
			at[node] = gi
			groups = append(groups, opGroup{node: node})
		}
		groups[gi].idx = append(groups[gi].idx, i)
	}
	return groups
}

// ---- reads: on the owner ----

// Get reads id on its owner, which merges every replica slot it has.
func (n *Node) Get(ctx context.Context, id string) (contract.View, error) {
	if err := contract.ValidateID(id); err != nil {
		return contract.View{}, err
	}
	resp, err := n.read(ctx, readRequest{Op: "get", ID: id})
	if err != nil || resp.View == nil {
		return contract.View{ID: id}, err
	}
	return *resp.View, nil
}

// HGet reads one hash field on the owner.
func (n *Node) HGet(ctx context.Context, id, field string) (int64, bool, error) {
	if err := contract.ValidateID(id); err != nil {
		return 0, false, err
	}
	resp, err := n.read(ctx, readRequest{Op: "hget", ID: id, Field: field})
	if err != nil {
		// ErrNotInteger is HGet's answer for a float field, which exists.
		return 0, errors.Is(err, contract.ErrNotInteger), err
	}
	return resp.Int, resp.OK, nil
}

// PFCount estimates the union of hll counters that share one owner.
func (n *Node) PFCount(ctx context.Context, ids ...string) (uint64, float64, error) {
	if len(ids) == 0 {
		return n.store.PFCount(ctx) // the engine's error
	}
	if err := validateIDs(ids...); err != nil {
		return 0, 0, err
	}
	s := n.ring.Snapshot()
	for _, id := range ids[1:] {
		if s.Owner(id) != s.Owner(ids[0]) {
			return 0, 0, errCrossNode
		}
	}
	resp, err := n.read(ctx, readRequest{Op: "pfcount", ID: ids[0], IDs: ids})
	if err != nil {
		return 0, 0, err
	}
	return resp.Uint, resp.Float, nil
}

// TTL reads id's time to live on its owner.
func (n *Node) TTL(ctx context.Context, id string) (time.Duration, bool, bool, error) {
	if contract.ValidateID(id) != nil {
		return 0, false, false, nil // a missing counter (contract.Backend)
	}
	resp, err := n.read(ctx, readRequest{Op: "ttl", ID: id})
	if err != nil {
		return 0, false, false, err
	}
	return resp.Duration, resp.OK, resp.Exists, nil
}

// Series reads id's rollup series: on its owner, or for a pn or sharded
// counter (or one the owner does not hold yet) summed over every node
// (series.go).
func (n *Node) Series(ctx context.Context, id string, g rollup.Granularity, from, to time.Time) (*rollup.Series, error) {
	if err := contract.ValidateID(id); err != nil {
		return nil, err
	}
	resp, err := n.read(ctx, readRequest{Op: "series", ID: id, G: g, From: from, To: to})
	if err != nil {
		return nil, err
	}
	if resp.Kind == contract.KindNone || isCRDT(resp.Kind) {
		// pn/sharded, or not on the owner yet: adds may be on any node.
		return n.seriesEverywhere(ctx, &seriesQuery{ID: id, G: g, From: from, To: to})
	}
	return resp.Series.series()
}

// Uniques reads id's unique-count estimate on its owner.
func (n *Node) Uniques(ctx context.Context, id string, unit rollup.Granularity, num int) (*rollup.Estimate, error) {
	if err := contract.ValidateID(id); err != nil {
		return nil, err
	}
	resp, err := n.read(ctx, readRequest{Op: "uniques", ID: id, G: unit, N: num})
	if err != nil {
		return nil, err
	}
	return resp.Estimate, nil
}

// read runs req on the owner of req.ID. When the owner cannot be reached
// (it died and gossip has not declared it dead yet), the read falls back to
// another replica, which answers from its copy without the owner's fence:
// possibly stale, but available.
func (n *Node) read(ctx context.Context, req readRequest) (*readResponse, error) {
	ctx, cancel := n.bounded(ctx)
	defer cancel()
	var resp *readResponse
	err := n.routed(ctx, "read_"+req.Op, req.ID, func(ctx context.Context) error {
		resp = n.localRead(ctx, &req)
		return resp.Err.err(n.self, nil)
	}, func(ctx context.Context, node string) (err error) {
		// Half of what is left: an owner that hangs leaves the other
		// half to the fallback on a replica.
		dl, _ := ctx.Deadline()
		octx, cancel := context.WithTimeout(ctx, time.Until(dl)/2)
		defer cancel()
		resp, err = n.remoteRead(octx, node, req)
		return err
	})
	var ue *UnavailableError
	if errors.As(err, &ue) && ue.Node != "" {
		if r, ferr := n.readReplica(ctx, req, ue.Node); ferr == nil {
			return r, nil
		}
	}
	return resp, err
}

func (n *Node) remoteRead(ctx context.Context, node string, req readRequest) (*readResponse, error) {
	req.header = n.header(true)
	resp := &readResponse{}
	if err := n.call(ctx, node, "Read", &req, resp); err != nil {
		return nil, err
	}
	return resp, resp.Err.err(node, nil)
}

// readReplica reads req from the first replica of req.ID other than down
// that answers, without ownership check.
func (n *Node) readReplica(ctx context.Context, req readRequest, down string) (*readResponse, error) {
	req.AnyReplica = true
	var err error
	for _, r := range n.ring.Snapshot().Replicas(req.ID, 0) {
		if r == down {
			continue
		}
		var resp *readResponse
		if r == n.self {
			resp = n.localRead(ctx, &req)
			err = resp.Err.err(r, nil)
		} else {
			resp, err = n.remoteRead(ctx, r, req)
			n.metrics.forwarded.WithLabelValues("read_replica", resultLabel(err)).Inc()
		}
		if err == nil {
			return resp, nil
		}
	}
	return nil, err
}

func (n *Node) serveRead(ctx context.Context, req *readRequest) *readResponse {
	return n.localRead(ctx, req)
}

// localRead answers req as the owner of its ids.
func (n *Node) localRead(ctx context.Context, req *readRequest) *readResponse {
	resp := &readResponse{}
	ids := req.IDs
	if len(ids) == 0 {
		ids = []string{req.ID}
	}
	var err error
	if req.AnyReplica {
		err = n.readStore(ctx, req, resp)
	} else {
		err = n.ownerDo(ctx, ids, nil, func() error {
			if err := n.readStore(ctx, req, resp); err != nil {
				return err
			}
			return n.leaseAck(ids, nil) // served within the lease
		})
	}
	resp.Err = toWire(err)
	return resp
}

func (n *Node) readStore(ctx context.Context, req *readRequest, resp *readResponse) (err error) {
	switch req.Op {
	case "get":
		var v contract.View
		v, err = n.store.Get(ctx, req.ID)
		resp.View = &v
	case "hget":
		resp.Int, resp.OK, err = n.store.HGet(ctx, req.ID, req.Field)
	case "pfcount":
		resp.Uint, resp.Float, err = n.store.PFCount(ctx, req.IDs...)
	case "ttl":
		resp.Duration, resp.OK, resp.Exists, err = n.store.TTL(ctx, req.ID)
	case "series":
		var s *rollup.Series
		if s, err = n.store.Series(ctx, req.ID, req.G, req.From, req.To); s != nil {
			resp.Series = toWireSeries(s)
		}
		if v, gerr := n.store.Get(ctx, req.ID); gerr == nil {
			resp.Kind = v.Kind
		}
	case "uniques":
		resp.Estimate, err = n.store.Uniques(ctx, req.ID, req.G, req.N)
	default:
		err = errUnknownOp
	}
	return err
}

func (n *Node) Now() time.Time        { return n.store.Now() }
func (n *Node) Stats() contract.Stats { return n.store.Stats() }

// ExportState returns id's state as its owner holds it, or, if the owner
// does not answer, as the first other replica that does (a replica may
// lag the owner by one push). It serves reads of a raw state on any
// member, such as a region's part of a global hll union on a node that
// holds no replica of the id. ok is false when the id does not exist.
func (n *Node) ExportState(ctx context.Context, id string) (st State, ok bool, err error) {
	if err := validateIDs(id); err != nil {
		return State{}, false, err
	}
	for _, r := range n.ring.Snapshot().Replicas(id, 0) {
		if r == n.self {
			st, ok, err = n.export(id)
		} else {
			var resp fetchResponse
			if err = n.call(ctx, r, "Fetch", &fetchRequest{header: n.header(false), IDs: []string{id}}, &resp); err == nil {
				err = resp.Err.err(r, nil)
			}
			if err == nil {
				for _, s := range resp.States {
					if s.ID == id {
						st, ok = s, true
					}
				}
			}
		}
		if err == nil {
			return st, ok, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return State{}, false, err
}
