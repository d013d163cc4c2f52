package backendtest

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/ratelimit"
	"github.com/counterd/counterd/internal/rollup"
)

// RoundRobin returns a Backend that sends each call to the next of bs in
// turn: the suite talks to every node of a cluster, as clients behind a
// load balancer do. Capabilities, Now, Stats and Ready are bs[0]'s. Safe
// for concurrent use when bs are.
func RoundRobin(bs ...contract.Backend) contract.Backend { return &roundRobin{bs: bs} }

type roundRobin struct {
	bs []contract.Backend
	n  atomic.Uint64
}

func (r *roundRobin) next() contract.Backend { return r.bs[(r.n.Add(1)-1)%uint64(len(r.bs))] }

func (r *roundRobin) Apply(ctx context.Context, op contract.Op, wo contract.WriteOptions) (contract.Result, error) {
	return r.next().Apply(ctx, op, wo)
}

func (r *roundRobin) ApplyBatch(ctx context.Context, ops []contract.Op, wo contract.WriteOptions) ([]contract.Result, error) {
	return r.next().ApplyBatch(ctx, ops, wo)
}

func (r *roundRobin) Get(ctx context.Context, id string) (contract.View, error) {
	return r.next().Get(ctx, id)
}

func (r *roundRobin) HGet(ctx context.Context, id, field string) (int64, bool, error) {
	return r.next().HGet(ctx, id, field)
}

func (r *roundRobin) PFCount(ctx context.Context, ids ...string) (uint64, float64, error) {
	return r.next().PFCount(ctx, ids...)
}

func (r *roundRobin) TTL(ctx context.Context, id string) (time.Duration, bool, bool, error) {
	return r.next().TTL(ctx, id)
}

// Scan stays on one backend: cursors are not portable between nodes'
// views in general.
func (r *roundRobin) Scan(ctx context.Context, cursor uint64, match string, count int) ([]string, uint64, error) {
	return r.bs[0].Scan(ctx, cursor, match, count)
}

func (r *roundRobin) Aggregate(ctx context.Context, prefix string) (contract.Aggregate, error) {
	return r.next().Aggregate(ctx, prefix)
}

func (r *roundRobin) Len(ctx context.Context) (int, error) { return r.next().Len(ctx) }

func (r *roundRobin) FlushAll(ctx context.Context, wo contract.WriteOptions) error {
	return r.next().FlushAll(ctx, wo)
}

func (r *roundRobin) Series(ctx context.Context, id string, g rollup.Granularity, from, to time.Time) (*rollup.Series, error) {
	return r.next().Series(ctx, id, g, from, to)
}

func (r *roundRobin) Uniques(ctx context.Context, id string, unit rollup.Granularity, n int) (*rollup.Estimate, error) {
	return r.next().Uniques(ctx, id, unit, n)
}

func (r *roundRobin) SetRollup(ctx context.Context, key string, spec rollup.Spec) error {
	return r.next().SetRollup(ctx, key, spec)
}

func (r *roundRobin) DeleteRollup(ctx context.Context, key string) (bool, error) {
	return r.next().DeleteRollup(ctx, key)
}

func (r *roundRobin) Rollup(ctx context.Context, key string) (rollup.Spec, bool, error) {
	return r.next().Rollup(ctx, key)
}

func (r *roundRobin) Rollups(ctx context.Context) (map[string]rollup.Spec, error) {
	return r.next().Rollups(ctx)
}

func (r *roundRobin) Now() time.Time                      { return r.bs[0].Now() }
func (r *roundRobin) Stats() contract.Stats               { return r.bs[0].Stats() }
func (r *roundRobin) Ready() error                        { return r.bs[0].Ready() }
func (r *roundRobin) Capabilities() contract.Capabilities { return r.bs[0].Capabilities() }

// RoundRobinChecker returns a ratelimit.Checker that sends each check to
// the next of cs in turn (each node's Router in a cluster). Local is
// cs[0]'s. Safe for concurrent use when cs are.
func RoundRobinChecker(cs ...ratelimit.Checker) ratelimit.Checker { return &rrChecker{cs: cs} }

type rrChecker struct {
	cs []ratelimit.Checker
	n  atomic.Uint64
}

func (r *rrChecker) next() ratelimit.Checker { return r.cs[(r.n.Add(1)-1)%uint64(len(r.cs))] }

func (r *rrChecker) CheckMultiContext(ctx context.Context, hits []ratelimit.Hit, out []ratelimit.Status) (ratelimit.Status, error) {
	return r.next().CheckMultiContext(ctx, hits, out)
}

func (r *rrChecker) CheckArgs(args [][]byte) ([4]int64, error) { return r.next().CheckArgs(args) }

func (r *rrChecker) Local() *ratelimit.Limiter { return r.cs[0].Local() }
