package server

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/quota"
)

// loadQuotas reads --quotas (nil without it).
func loadQuotas(cfg Config) (*quota.Config, error) {
	if cfg.Quotas == "" {
		return nil, nil
	}
	q, err := quota.Load(cfg.Quotas)
	if err != nil {
		return nil, fmt.Errorf("server: --quotas: %w", err)
	}
	return q, nil
}

// quotaBackend is the node's backend as a QuotaBackend, nil when --quotas
// is not set or the mode does not enforce quotas.
func quotaBackend(cfg Config, be contract.Backend) contract.QuotaBackend {
	if cfg.Quotas == "" {
		return nil
	}
	qb, _ := be.(contract.QuotaBackend)
	return qb
}

// reloadQuotasOnHUP re-reads --quotas on every SIGHUP until ctx is done.
// A file that does not parse is logged and the quotas in force stay; key
// counts are kept (contract.QuotaBackend.SetQuotas recounts them: exactly
// on the embedded engine, from a scan of the cluster on a cluster node).
func reloadQuotasOnHUP(ctx context.Context, cfg Config, qb contract.QuotaBackend, log *slog.Logger) {
	if qb == nil {
		return
	}
	onSIGHUP(ctx, func() {
		q, err := loadQuotas(cfg)
		if err != nil {
			log.Error("quotas file reload failed; the quotas in force stay", "err", err)
			return
		}
		if err := qb.SetQuotas(q); err != nil {
			log.Error("quotas reload failed; the quotas in force stay", "err", err)
			return
		}
		log.Info("quotas file reloaded", "quotas_file", cfg.Quotas, "quotas", len(q.Rules), "default", q.Default != nil)
	})
}

// quotaUsage backs GET /quotas and the quota metrics (nil: no quotas).
func quotaUsage(qb contract.QuotaBackend) func(context.Context) ([]quota.Usage, error) {
	if qb == nil {
		return func(context.Context) ([]quota.Usage, error) { return nil, nil }
	}
	return qb.Quotas
}

// logQuotasOn reports the quotas put in force at start.
func logQuotasOn(log *slog.Logger, cfg Config, q *quota.Config) {
	log.Info("quotas on", "quotas_file", cfg.Quotas, "quotas", len(q.Rules), "default", q.Default != nil)
}
