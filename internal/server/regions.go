package server

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"time"

	"github.com/counterd/counterd/internal/api/resp"
	cnode "github.com/counterd/counterd/internal/cluster/node"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/region"
)

// bootstrapTimeout bounds the bootstrap of an empty region node from its
// peer regions before it serves.
const bootstrapTimeout = 60 * time.Second

// openRegions opens replication with the peer regions (--peer-regions),
// nil without any. An embedded node whose engine is empty first fetches this
// region's state from the peers' copies of it (chunked, hash-addressed
// sync), so a region restarted from an empty data directory gets back
// what it had shipped before it serves.
func openRegions(ctx context.Context, cfg Config, m mode, sec *security, log *slog.Logger) (*region.Replicator, error) {
	peers, _ := region.ParsePeers(cfg.PeerRegions, cfg.Region) // validated
	if len(peers) == 0 {
		return nil, nil
	}
	rcfg := region.Config{
		Name: cfg.Region, Node: cfg.NodeID, Peers: peers,
		Dir:      filepath.Join(cfg.Data, "regions"),
		Interval: cfg.RegionInterval, SyncInterval: cfg.RegionSyncInterval,
		TLS: sec.peerClient(), AuthorizePeers: sec != nil && sec.peerCA != nil, Logger: log,
	}
	bootstrap, err := m.peerRegions(&rcfg)
	if err != nil {
		return nil, err
	}
	rep, err := region.Open(rcfg)
	if err != nil {
		return nil, err
	}
	if bootstrap {
		bctx, cancel := context.WithTimeout(ctx, bootstrapTimeout)
		n, from, err := rep.Bootstrap(bctx)
		cancel()
		if err != nil {
			log.Warn("region bootstrap: no peer region answered; starting empty", "err", err)
		} else {
			log.Info("region bootstrap done", "merged", n, "from", from)
		}
	}
	return rep, nil
}

// regionStore returns the store of a cluster node: with --peer-regions,
// one recording every change to the node's engine (its writes as the
// owner, the states it merges as a replica or a new owner) for shipping
// to the peer regions; the node ships the ids it owns.
func regionStore(cfg Config, eng *engine.Engine) (cnode.Store, *region.Changes) {
	st := cnode.EngineStore(eng)
	peers, _ := region.ParsePeers(cfg.PeerRegions, cfg.Region) // validated
	if len(peers) == 0 {
		return st, nil
	}
	ch := region.NewChanges(peers)
	return &trackedStore{Store: st, tracked: ch.Wrap(st, eng), ch: ch}, ch
}

// trackedStore is a cluster node's store recording its changes.
type trackedStore struct {
	cnode.Store
	tracked contract.Backend // Apply, ApplyBatch and FlushAll, recorded
	ch      *region.Changes
}

func (s *trackedStore) Apply(ctx context.Context, op contract.Op, wo contract.WriteOptions) (contract.Result, error) {
	return s.tracked.Apply(ctx, op, wo)
}

func (s *trackedStore) ApplyBatch(ctx context.Context, ops []contract.Op, wo contract.WriteOptions) ([]contract.Result, error) {
	return s.tracked.ApplyBatch(ctx, ops, wo)
}

func (s *trackedStore) FlushAll(ctx context.Context, wo contract.WriteOptions) error {
	return s.tracked.FlushAll(ctx, wo)
}

// ApplyStored records the owner's ops that store records with their
// effects (the pipeline's marked writes) as Apply does.
func (s *trackedStore) ApplyStored(ctx context.Context, ops []contract.Op, wo contract.WriteOptions, then func([]contract.Result) ([]engine.StoredRecord, error)) ([]contract.Result, error) {
	res, err := s.Store.ApplyStored(ctx, ops, wo, then)
	if err == nil {
		for i := range res {
			s.ch.Note(&ops[i], &res[i])
		}
	}
	return res, err
}

func (s *trackedStore) Merge(ctx context.Context, states []engine.State, wo contract.WriteOptions) (int, error) {
	n, err := s.Store.Merge(ctx, states, wo)
	if n > 0 {
		s.ch.NoteStates(states)
	}
	return n, err
}

func (s *trackedStore) MergeRecords(ctx context.Context, states []engine.State, wo contract.WriteOptions, then func() []engine.StoredRecord) (int, error) {
	n, err := s.Store.MergeRecords(ctx, states, wo, then)
	if n > 0 {
		s.ch.NoteStates(states)
	}
	return n, err
}

// regionStatus is GET /regions: the replicator's, or the configuration.
func regionStatus(cfg Config, rep *region.Replicator) func() region.Status {
	if rep != nil {
		return rep.Status
	}
	return func() region.Status { return region.Status{Region: cfg.Region, Node: cfg.NodeID} }
}

func globalRead(rep *region.Replicator) func(context.Context, string) (any, error) {
	if rep == nil {
		return nil
	}
	return func(ctx context.Context, id string) (any, error) { return rep.Global(ctx, id) }
}

func globalAggregate(rep *region.Replicator) func(context.Context, string) (any, error) {
	if rep == nil {
		return nil
	}
	return func(ctx context.Context, prefix string) (any, error) { return rep.GlobalAggregate(ctx, prefix) }
}

// respGlobal serves COUNTERD.GET key SCOPE global from rep.
func respGlobal(rep *region.Replicator) resp.GlobalReader {
	if rep == nil {
		return nil
	}
	return func(ctx context.Context, id string) (string, bool, []resp.RegionValue, error) {
		g, err := rep.Global(ctx, id)
		if err != nil {
			return "", false, nil, err
		}
		if g.Kind == contract.KindHash.String() {
			return "", false, nil, fmt.Errorf("%w: %q is a hash (read its fields over HTTP with scope=global)", contract.ErrWrongKind, id)
		}
		out := make([]resp.RegionValue, 0, len(g.Regions))
		for _, r := range g.Regions {
			rv := resp.RegionValue{Region: r.Region, Value: valueText(r.Value)}
			if r.AsOf != nil {
				rv.AsOfMS = r.AsOf.UnixMilli()
			}
			out = append(out, rv)
		}
		return valueText(g.Value), g.Exists, out, nil
	}
}

func valueText(v any) string {
	switch x := v.(type) {
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	}
	return fmt.Sprint(v)
}
