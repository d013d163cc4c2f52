package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/counterd/counterd/internal/cluster/membership"
	cnode "github.com/counterd/counterd/internal/cluster/node"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/quota"
	"github.com/counterd/counterd/internal/ratelimit"
	"github.com/counterd/counterd/internal/region"
	"github.com/counterd/counterd/internal/tracing"
)

// clusterMode is a member of a peer cluster (--join): gossip membership,
// ring placement, forwarding and replication on top of an embedded engine
// whose pn replica name is the node id.
type clusterMode struct {
	cn  *cnode.Node
	eng *engine.Engine
	// changes records every change to eng for the peer regions (nil
	// without --peer-regions).
	changes *region.Changes
	sec     *security
	log     *slog.Logger
	// globalInterval is --ratelimit-global-interval.
	globalInterval time.Duration
}

// openCluster opens the engine and the cluster node. Gossip starts in
// start, once the listeners are bound, so peers learn the actual
// addresses.
func openCluster(cfg Config, sec *security, quotas *quota.Config, tp *tracing.Tracer, log *slog.Logger) (*clusterMode, error) {
	if cfg.GRPC == "" {
		return nil, fmt.Errorf("server: cluster mode (--join) needs --grpc for peer traffic")
	}
	if quotas != nil && cfg.PeerRegions != "" {
		// Keys that arrive from other regions are merged, not created
		// through their owner, so no quota would count them.
		return nil, fmt.Errorf("server: --quotas with --join is not supported with --peer-regions yet")
	}
	ccfg, err := clusterConfig(cfg, sec, log)
	if err != nil {
		return nil, err
	}
	ccfg.PeerDialOptions = tracing.DialOptions(tp)
	eng, err := openEngine(cfg, log) // sets the engine's NodeID to --node-id
	if err != nil {
		return nil, err
	}
	ccfg.Limits = eng.Limits()
	store, changes := regionStore(cfg, eng)
	cn, err := cnode.New(ccfg, store)
	if err != nil {
		_ = eng.Close()
		return nil, err
	}
	m := &clusterMode{cn: cn, eng: eng, changes: changes, sec: sec, log: log, globalInterval: cfg.RateLimitGlobalInterval}
	if quotas != nil {
		// The counts live in the cluster: kept as they are (SIGHUP
		// recounts them, docs/security.md).
		if err := cn.UseQuotas(quotas); err != nil {
			_ = m.close()
			return nil, err
		}
		logQuotasOn(log, cfg, quotas)
	}
	return m, nil
}

// clusterConfig is the cluster node's configuration from the flags.
func clusterConfig(cfg Config, sec *security, log *slog.Logger) (cnode.Config, error) {
	dur, _ := contract.ParseDurability(cfg.Durability)
	ccfg := cnode.Config{
		NodeID:        cfg.NodeID,
		Gossip:        cfg.Gossip,
		Join:          splitList(cfg.Join),
		Durability:    dur,
		Logger:        log,
		PeerTLS:       sec.peerClient(),
		LeaseDuration: cfg.ClusterLease,
		LeaseDrift:    cfg.ClusterLeaseDrift,
	}
	if cfg.ClusterLease == 0 {
		ccfg.LeaseDuration = -1 // no lease; the node's zero means its default
	}
	// Beside the engine's files: a node that forgot members still refuses
	// them after a restart.
	ccfg.Membership.ForgetFile = filepath.Join(cfg.Data, "cluster-forgotten.json")
	timing, err := membership.ParseTiming(cfg.ClusterTiming)
	if err != nil {
		return ccfg, err
	}
	timing.Apply(&ccfg.Membership)
	if sec != nil {
		ccfg.Membership.SecretKey = sec.gossipKey
		ccfg.Membership.Admit = sec.admitPeer()
	}
	return ccfg, nil
}

func (m *clusterMode) backend() contract.Backend { return m.cn }

// register mounts /cluster and the peer service.
func (m *clusterMode) register(mux *http.ServeMux, gs *grpc.Server) {
	mountPaths(mux, m.cn.Routes()["/cluster"], cnode.HTTPRoutes())
	m.cn.Register(gs) // --grpc is required in cluster mode
}

// start joins the cluster, announcing the bound addresses.
func (m *clusterMode) start(_ context.Context, b Addrs) error {
	return m.cn.Start(cnode.Meta{HTTP: b.HTTP, RESP: b.RESP, GRPC: b.GRPC})
}

func (m *clusterMode) drain(ctx context.Context) error { return m.cn.Drain(ctx) }

func (m *clusterMode) close() error {
	_ = m.cn.Close()
	return closeEngine(m.eng, m.log)
}

func (m *clusterMode) rateLimits(ctx context.Context, lim *ratelimit.Limiter) (*sharedLimits, error) {
	return engineLimits(m.eng, m.cn, m.sec, m.log, m.globalInterval)(ctx, lim)
}

// peerRegions: the node ships the ids it owns; one that starts empty gets
// its counters from the other members (handoff), not from the peer
// regions' copies.
func (m *clusterMode) peerRegions(rc *region.Config) (bool, error) {
	rc.Local, rc.Changes = m.eng, m.changes
	rc.Cluster = &region.Cluster{Owns: m.owns, RingVersion: m.cn.RingVersion, Region: m.cn, Export: m.cn.ExportState}
	return false, nil
}

func (m *clusterMode) owns(id string) bool { return m.cn.Ring().Owner(id) == m.cn.ID() }

func (m *clusterMode) traits() traits {
	return traits{keepKeys: true, limiters: m.eng.Limiters(), ring: m.cn, collectors: m.cn.Collectors()}
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
