package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/counterd/counterd/internal/ratelimit"
)

// PolicyStore keeps the rate-limit policies in the ratelimit_policies
// table (migration 00005), ordered by position: the tiered mode's
// ratelimit.PolicyStore, shared by every node on the database. It is safe
// for concurrent use; the Store's pool serves it and Close of the Store
// ends it.
type PolicyStore struct{ s *Store }

var _ ratelimit.PolicyStore = (*PolicyStore)(nil)

// Policies returns the Store's policy store.
func (s *Store) Policies() *PolicyStore { return &PolicyStore{s} }

const policyColumns = `name, match, namespace, algorithm, rate_limit, period_ns, burst, cost, final`

// LoadPolicies returns the policies in matching order. A row that is not a
// valid policy (edited by hand) fails with ratelimit.ErrInvalidPolicy.
func (p *PolicyStore) LoadPolicies(ctx context.Context) ([]ratelimit.Policy, error) {
	rows, err := p.s.pool.Query(ctx, `SELECT `+policyColumns+` FROM ratelimit_policies ORDER BY position, name`)
	if err != nil {
		return nil, fmt.Errorf("postgres: load policies: %w", err)
	}
	ps, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ratelimit.Policy, error) {
		var pol ratelimit.Policy
		var alg string
		var period int64
		if err := row.Scan(&pol.Name, &pol.Match, &pol.Namespace, &alg, &pol.Limit, &period, &pol.Burst, &pol.Cost, &pol.Final); err != nil {
			return pol, err
		}
		pol.Period = time.Duration(period)
		a, err := ratelimit.ParseAlgorithm(alg)
		if err != nil {
			return pol, fmt.Errorf("%w: stored policy %q: %v", ratelimit.ErrInvalidPolicy, pol.Name, err)
		}
		pol.Algorithm = a
		return pol, nil
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: load policies: %w", err)
	}
	if err := ratelimit.ValidatePolicies(ps); err != nil {
		return nil, fmt.Errorf("postgres: load policies: %w", err)
	}
	return ps, nil
}

const upsertPolicy = `INSERT INTO ratelimit_policies (` + policyColumns + `)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (name) DO UPDATE SET match = EXCLUDED.match, namespace = EXCLUDED.namespace,
    algorithm = EXCLUDED.algorithm, rate_limit = EXCLUDED.rate_limit, period_ns = EXCLUDED.period_ns,
    burst = EXCLUDED.burst, cost = EXCLUDED.cost, final = EXCLUDED.final, updated_at = now()`

func policyArgs(pol *ratelimit.Policy) []any {
	return []any{pol.Name, pol.Match, pol.Namespace, pol.Algorithm.String(), pol.Limit, int64(pol.Period), pol.Burst, pol.Cost, pol.Final}
}

// PutPolicy adds pol at the end, or replaces the policy of that name in
// its place.
func (p *PolicyStore) PutPolicy(ctx context.Context, pol ratelimit.Policy) error {
	if err := ratelimit.ValidatePolicies([]ratelimit.Policy{pol}); err != nil {
		return err
	}
	if _, err := p.s.pool.Exec(ctx, upsertPolicy, policyArgs(&pol)...); err != nil {
		return fmt.Errorf("postgres: put policy %q: %w", pol.Name, err)
	}
	return nil
}

// DeletePolicy removes the named policy.
func (p *PolicyStore) DeletePolicy(ctx context.Context, name string) (bool, error) {
	tag, err := p.s.pool.Exec(ctx, `DELETE FROM ratelimit_policies WHERE name = $1`, name)
	if err != nil {
		return false, fmt.Errorf("postgres: delete policy %q: %w", name, err)
	}
	return tag.RowsAffected() > 0, nil
}

// ReplacePolicies replaces every policy in one transaction; concurrent
// readers see the old list or the new one.
func (p *PolicyStore) ReplacePolicies(ctx context.Context, ps []ratelimit.Policy) error {
	if err := ratelimit.ValidatePolicies(ps); err != nil {
		return err
	}
	err := pgx.BeginFunc(ctx, p.s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM ratelimit_policies`); err != nil {
			return err
		}
		// One statement per row, in order: each takes the next position.
		b := &pgx.Batch{}
		for i := range ps {
			b.Queue(upsertPolicy, policyArgs(&ps[i])...)
		}
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return fmt.Errorf("postgres: replace policies: %w", err)
	}
	return nil
}
