package contract

import (
	"context"

	"github.com/counterd/counterd/internal/quota"
)

// ErrQuotaExceeded: a write would pass a quota (internal/quota); nothing
// changed. The error is a *quota.ExceededError naming the quota and its
// limit.
var ErrQuotaExceeded = quota.ErrExceeded

// QuotaBackend is a Backend that enforces quotas (internal/quota).
type QuotaBackend interface {
	// SetQuotas replaces the quotas (nil: none); key counts stay exact.
	SetQuotas(c *quota.Config) error
	// Quotas lists every quota's usage (quota.Set.Usage), nil without.
	Quotas(ctx context.Context) ([]quota.Usage, error)
}
