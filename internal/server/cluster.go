package server

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/counterd/counterd/internal/cluster/membership"
	cnode "github.com/counterd/counterd/internal/cluster/node"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/quota"
)

// openCluster joins a peer cluster: gossip membership, ring placement,
// forwarding and replication on top of an embedded engine whose pn replica
// name is the node id. Gossip starts in the start hook, once the listeners
// are bound, so peers learn the actual addresses.
func openCluster(_ context.Context, cfg Config, sec *security, quotas *quota.Config, log *slog.Logger) (*node, error) {
	if cfg.GRPC == "" {
		return nil, fmt.Errorf("server: cluster mode (--join) needs --grpc for peer traffic")
	}
	if quotas != nil && cfg.PeerRegions != "" {
		// Keys that arrive from other regions are merged, not created
		// through their owner, so no quota would count them.
		return nil, fmt.Errorf("server: --quotas with --join is not supported with --peer-regions yet")
	}
	eng, err := openEngine(cfg, log) // sets the engine's NodeID to --node-id
	if err != nil {
		return nil, err
	}
	dur, _ := engine.ParseDurability(cfg.Durability)
	ccfg := cnode.Config{
		NodeID:        cfg.NodeID,
		Gossip:        cfg.Gossip,
		Join:          splitList(cfg.Join),
		Durability:    dur,
		Limits:        eng.Limits(),
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
		_ = eng.Close()
		return nil, err
	}
	timing.Apply(&ccfg.Membership)
	if sec != nil {
		ccfg.Membership.SecretKey = sec.gossipKey
		ccfg.Membership.Admit = sec.admitPeer()
	}
	store, changes := regionStore(cfg, eng)
	cn, err := cnode.New(ccfg, store)
	if err != nil {
		_ = eng.Close()
		return nil, err
	}
	if quotas != nil {
		// The counts live in the cluster: kept as they are (SIGHUP
		// recounts them, docs/security.md).
		if err := cn.UseQuotas(quotas); err != nil {
			_ = cn.Close()
			_ = eng.Close()
			return nil, err
		}
		log.Info("quotas on", "quotas_file", cfg.Quotas, "quotas", len(quotas.Rules), "default", quotas.Default != nil)
	}
	closeEng := closeEngine(eng, log)
	return &node{
		Backend: cn,
		close: func() error {
			_ = cn.Close()
			return closeEng()
		},
		grpc:   cn.Register,
		routes: cn.Routes(),
		start: func(_ context.Context, b Addrs) error {
			return cn.Start(cnode.Meta{HTTP: b.HTTP, RESP: b.RESP, GRPC: b.GRPC})
		},
		drain:       cn.Drain,
		rlShared:    engineLimits(eng, cn, sec, log),
		rlKeepKeys:  true,
		ringVersion: cn.RingVersion,
		keyOwner:    cn.KeyOwner,
		collectors:  cn.Collectors(),
		region:      clusterRegionOf(cn, eng, changes),
	}, nil
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
