package server

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"time"

	"github.com/counterd/counterd/internal/api/resp"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/region"
)

// bootstrapTimeout bounds the bootstrap of an empty region node from its
// peer regions before it serves.
const bootstrapTimeout = 60 * time.Second

// openRegions opens replication with the peer regions (--peer-regions),
// nil without any. A node whose engine is empty first fetches this
// region's state from the peers' copies of it (chunked, hash-addressed
// sync), so a region restarted from an empty data directory gets back
// what it had shipped before it serves.
func openRegions(ctx context.Context, cfg Config, nd *node, sec *security, log *slog.Logger) (*region.Replicator, error) {
	peers, _ := region.ParsePeers(cfg.PeerRegions, cfg.Region) // validated
	if len(peers) == 0 {
		return nil, nil
	}
	if nd.eng == nil {
		return nil, fmt.Errorf("server: --peer-regions: %w: needs embedded mode", ErrUnsupportedMode)
	}
	rep, err := region.Open(region.Config{
		Name: cfg.Region, Node: cfg.NodeID, Peers: peers, Local: nd.eng,
		Dir:      filepath.Join(cfg.Data, "regions"),
		Interval: cfg.RegionInterval, SyncInterval: cfg.RegionSyncInterval,
		TLS: sec.peerClient(), Logger: log,
	})
	if err != nil {
		return nil, err
	}
	if nd.eng.Len() == 0 {
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
		if g.Kind == engine.KindHash.String() {
			return "", false, nil, fmt.Errorf("%w: %q is a hash (read its fields over HTTP with scope=global)", engine.ErrWrongKind, id)
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
