package server

import (
	"context"
	"fmt"
	"log/slog"

	cnode "github.com/counterd/counterd/internal/cluster/node"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/ratelimit"
)

// engineLimits is the rlShared hook of the embedded and cluster modes:
// the policies live in a ratelimit.PolicyLog stored in the engine's Pebble
// (seeded with the --ratelimit-policies file, which loses to any change
// made through the API) and a PolicySync keeps lim's policies equal to it.
// With cn (cluster mode) the node replicates the log, moves lim's state
// with the ring, and a Router decides each check on its key's owner
// (forwarding over TLS with sec's peer settings).
// logSeeded reports how --ratelimit-policies seeded a policy store: a
// warning for each stored policy kept although the file differs.
func logSeeded(log *slog.Logger, added, kept []string, err error) error {
	if err != nil {
		return fmt.Errorf("server: --ratelimit-policies: %w", err)
	}
	for _, name := range kept {
		log.Warn("rate-limit policy already stored differs from --ratelimit-policies; keeping the stored one (change it through the API)", "policy", name)
	}
	if len(added)+len(kept) > 0 {
		log.Info("rate-limit policies seeded", "added", len(added), "kept", len(kept))
	}
	return nil
}

func engineLimits(eng *engine.Engine, cn *cnode.Node, sec *security, log *slog.Logger) func(context.Context, *ratelimit.Limiter) (*sharedLimits, error) {
	return func(ctx context.Context, lim *ratelimit.Limiter) (*sharedLimits, error) {
		pl, err := ratelimit.OpenPolicyLog(eng.NodeID(), cnode.EnginePolicies(eng))
		if err != nil {
			return nil, fmt.Errorf("server: rate-limit policies: %w", err)
		}
		added, kept, err := pl.Seed(lim.Policies())
		if err := logSeeded(log, added, kept, err); err != nil {
			return nil, err
		}
		var checker ratelimit.Checker = lim
		closeRouter := func() {}
		syncCfg := ratelimit.PolicySyncConfig{Interval: -1, Logger: log} // one node: every change is its own
		if cn != nil {
			cn.SetRateLimit(cnode.RateLimit{Limiter: lim, Policies: pl})
			router, err := ratelimit.NewRouter(lim, sec.routerConfig(cn.KeyOwner))
			if err != nil {
				return nil, err
			}
			checker, closeRouter = router, func() { _ = router.Close() }
			syncCfg.Interval = 0 // the default: peers' changes show within a second
		}
		ps, err := ratelimit.NewPolicySync(ctx, lim, pl, syncCfg)
		if err != nil {
			closeRouter()
			return nil, err
		}
		return &sharedLimits{checker: checker, policies: ps, close: func() { _ = ps.Close(); closeRouter() }}, nil
	}
}
