package server

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/counterd/counterd/internal/auth"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/ratelimit"
	"github.com/counterd/counterd/internal/rollup"
)

// guardedBackend checks every id an HTTP request touches against the
// principal authMiddleware put in the request context: reads need read,
// mutations write, deletes admin; aggregates and scans need the
// permission on their whole prefix. A context without a principal is
// refused, so a call that skipped the middleware fails closed. Safe for
// concurrent use.
type guardedBackend struct{ contract.Backend }

func principalOf(ctx context.Context) (*auth.Principal, error) {
	if p := auth.FromContext(ctx); p != nil {
		return p, nil
	}
	return nil, auth.ErrUnauthenticated
}

func forbidden(p *auth.Principal, perm auth.Perm, what string) error {
	return fmt.Errorf("%w: user %q has no %s permission on %s", auth.ErrForbidden, p.User, perm, what)
}

// check requires perm on every id.
func check(ctx context.Context, perm auth.Perm, ids ...string) error {
	p, err := principalOf(ctx)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if !p.Can(perm, id) {
			return forbidden(p, perm, fmt.Sprintf("%q", id))
		}
	}
	return nil
}

// opPerm is the permission an op needs on its id: deleting a counter is
// admin, every other change write.
func opPerm(op contract.Op) auth.Perm {
	if op.Type == contract.OpDelete {
		return auth.Admin
	}
	return auth.Write
}

func checkOp(ctx context.Context, op contract.Op) error {
	if err := check(ctx, opPerm(op), op.ID); err != nil {
		return err
	}
	return check(ctx, auth.Read, op.Sources...) // PFMERGE reads its sources
}

func (g guardedBackend) Apply(ctx context.Context, op contract.Op, wo contract.WriteOptions) (contract.Result, error) {
	if err := checkOp(ctx, op); err != nil {
		return contract.Result{}, err
	}
	return g.Backend.Apply(ctx, op, wo)
}

func (g guardedBackend) ApplyBatch(ctx context.Context, ops []contract.Op, wo contract.WriteOptions) ([]contract.Result, error) {
	for i, op := range ops {
		if err := checkOp(ctx, op); err != nil {
			return nil, fmt.Errorf("op %d: %w", i, err)
		}
	}
	return g.Backend.ApplyBatch(ctx, ops, wo)
}

func (g guardedBackend) Get(ctx context.Context, id string) (contract.View, error) {
	if err := check(ctx, auth.Read, id); err != nil {
		return contract.View{}, err
	}
	return g.Backend.Get(ctx, id)
}

func (g guardedBackend) HGet(ctx context.Context, id, field string) (int64, bool, error) {
	if err := check(ctx, auth.Read, id); err != nil {
		return 0, false, err
	}
	return g.Backend.HGet(ctx, id, field)
}

func (g guardedBackend) PFCount(ctx context.Context, ids ...string) (uint64, float64, error) {
	if err := check(ctx, auth.Read, ids...); err != nil {
		return 0, 0, err
	}
	return g.Backend.PFCount(ctx, ids...)
}

func (g guardedBackend) TTL(ctx context.Context, id string) (time.Duration, bool, bool, error) {
	if err := check(ctx, auth.Read, id); err != nil {
		return 0, false, false, err
	}
	return g.Backend.TTL(ctx, id)
}

func (g guardedBackend) Scan(ctx context.Context, cursor uint64, match string, count int) ([]string, uint64, error) {
	p, err := principalOf(ctx)
	if err != nil {
		return nil, 0, err
	}
	if match == "" {
		match = "*"
	}
	if !p.CanPattern(auth.Read, match) {
		return nil, 0, forbidden(p, auth.Read, fmt.Sprintf("every id matching %q", match))
	}
	return g.Backend.Scan(ctx, cursor, match, count)
}

func (g guardedBackend) Aggregate(ctx context.Context, prefix string) (contract.Aggregate, error) {
	p, err := principalOf(ctx)
	if err != nil {
		return contract.Aggregate{}, err
	}
	if !p.CanPrefix(auth.Read, prefix) {
		return contract.Aggregate{}, forbidden(p, auth.Read, fmt.Sprintf("every id starting with %q", prefix))
	}
	return g.Backend.Aggregate(ctx, prefix)
}

func (g guardedBackend) Len(ctx context.Context) (int, error) {
	p, err := principalOf(ctx)
	if err != nil {
		return 0, err
	}
	if !p.CanAny(auth.Read) {
		return 0, forbidden(p, auth.Read, "any namespace")
	}
	return g.Backend.Len(ctx)
}

func (g guardedBackend) FlushAll(ctx context.Context, wo contract.WriteOptions) error {
	p, err := principalOf(ctx)
	if err != nil {
		return err
	}
	if !p.Allows(needAdminAll) {
		return forbidden(p, auth.Admin, "every namespace")
	}
	return g.Backend.FlushAll(ctx, wo)
}

func (g guardedBackend) Series(ctx context.Context, id string, gr rollup.Granularity, from, to time.Time) (*rollup.Series, error) {
	if err := check(ctx, auth.Read, id); err != nil {
		return nil, err
	}
	return g.Backend.Series(ctx, id, gr, from, to)
}

func (g guardedBackend) Uniques(ctx context.Context, id string, unit rollup.Granularity, n int) (*rollup.Estimate, error) {
	if err := check(ctx, auth.Read, id); err != nil {
		return nil, err
	}
	return g.Backend.Uniques(ctx, id, unit, n)
}

// canRollup: a rollup key with a ':' is one id (an id's namespace is the
// part before its first ':', so no other id takes its spec), which perm
// must cover; a key without one is a namespace, whose spec applies to
// every id key+":"... (and to the bare id key, which the engine counts in
// namespace key too), so perm must cover the namespace: a grant of
// "key:*" (or wider) suffices.
func canRollup(p *auth.Principal, perm auth.Perm, key string) bool {
	if strings.IndexByte(key, ':') >= 0 {
		return p.Can(perm, key)
	}
	return p.CanPrefix(perm, key+":")
}

func checkRollup(ctx context.Context, perm auth.Perm, key string) error {
	p, err := principalOf(ctx)
	if err != nil {
		return err
	}
	if !canRollup(p, perm, key) {
		return forbidden(p, perm, fmt.Sprintf("rollup key %q", key))
	}
	return nil
}

func (g guardedBackend) SetRollup(ctx context.Context, key string, spec rollup.Spec) error {
	if err := checkRollup(ctx, auth.Admin, key); err != nil {
		return err
	}
	return g.Backend.SetRollup(ctx, key, spec)
}

func (g guardedBackend) DeleteRollup(ctx context.Context, key string) (bool, error) {
	if err := checkRollup(ctx, auth.Admin, key); err != nil {
		return false, err
	}
	return g.Backend.DeleteRollup(ctx, key)
}

func (g guardedBackend) Rollup(ctx context.Context, key string) (rollup.Spec, bool, error) {
	if err := checkRollup(ctx, auth.Read, key); err != nil {
		return rollup.Spec{}, false, err
	}
	return g.Backend.Rollup(ctx, key)
}

// Rollups lists only the specs the principal may read.
func (g guardedBackend) Rollups(ctx context.Context) (map[string]rollup.Spec, error) {
	p, err := principalOf(ctx)
	if err != nil {
		return nil, err
	}
	all, err := g.Backend.Rollups(ctx)
	if err != nil {
		return nil, err
	}
	mine := make(map[string]rollup.Spec, len(all))
	for k, s := range all {
		if canRollup(p, auth.Read, k) {
			mine[k] = s
		}
	}
	return mine, nil
}

// authorizeHits requires write on every rate-limit key checked through
// HTTP or Envoy (RESP RL.CHECK is checked by the RESP front end).
func authorizeHits(ctx context.Context, hits []ratelimit.Hit) error {
	for _, h := range hits {
		if err := check(ctx, auth.Write, h.Key); err != nil {
			return err
		}
	}
	return nil
}
