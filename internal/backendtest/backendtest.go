// Package backendtest is the conformance suite of contract.Backend: one set
// of behaviour tests that every backend (the embedded engine, a peer
// cluster, the tiered store on Redis or Redis Cluster) must pass.
//
// How: Run calls the setup once (servers and clusters start once per
// backend), then runs named, table-driven subtests against its Backend:
// every kind and operation, errors (each checked with errors.Is on the
// engine sentinel, and the stored state compared before and after), TTLs,
// versions, idempotency (also after the hot tier lost its data), batches, aggregates, scan, series and uniques,
// and rate limits through the setup's ratelimit.Checker. Each subtest
// works on ids and idempotency keys of its own, so subtests never see each
// other's state; those that count everything (Len) empty the backend
// first (FlushAll).
//
// Where backends legitimately differ, the suite reads the backend's
// contract.Capabilities and asserts the declared behaviour (for example
// BatchAtomic: a failing op leaves no effect; BatchUndoInverse: the adds
// before it are undone, the sets stay). A difference the capabilities do
// not declare is a failure.
//
// The suite runs its subtests one after another (the setup's clock is
// shared); it is not safe to call Run concurrently with one Setup.
package backendtest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/ratelimit"
)

// Setup is one backend under test.
type Setup struct {
	// Backend is what the suite calls.
	Backend contract.Backend
	// Clock is the clock the backend reads (Config.Clock, Options.Now):
	// the suite advances it to move windows, rollup buckets and sketches.
	Clock *Clock
	// ExpiryFollowsClock is true when TTLs expire by Clock. False: by real
	// time (Redis expires keys itself), and the suite waits for a short
	// TTL instead of advancing the clock.
	ExpiryFollowsClock bool
	// Checker decides rate limits on this backend; nil skips the
	// rate-limit subtests (the test log says so).
	Checker ratelimit.Checker
	// CheckerFollowsClock is true when Checker's decisions follow Clock
	// (its windows move when the suite advances Clock).
	CheckerFollowsClock bool
	// Quotas sets and reads the backend's quotas; nil skips the quota
	// subtests (the test log says so).
	Quotas contract.QuotaBackend
	// QuotaExpiryBound is how long after a key expired its room may
	// still be taken (the backend removes expired keys in passes).
	QuotaExpiryBound time.Duration
	// FillDisk, when set, makes the backend's storage full (true) or
	// gives the space back (false), returning once writes are refused, or
	// taken again (disk.go). nil: no local disk state (tiered), the
	// full-disk cases are skipped.
	FillDisk func(t testing.TB, full bool)
	// LoseHotTier, when set, makes the backend lose the data of its hot
	// tier, at least what holds id (tiered: FLUSHALL of its Redis; the
	// embedded engine: a restart, which keeps only its files; a cluster:
	// a restart of id's owner), and returns the backend to call from
	// then on. nil: the lost-hot-tier case is skipped (hottier.go).
	LoseHotTier func(t testing.TB, id string) contract.Backend
	// SkipGroups names groups of cases the setup does not run, each with
	// the reason, logged: nodes that share their data but not their
	// configuration (rollup specs, quotas), or whose listings see another
	// node's writes only after its flush (tiered), cannot pass them
	// through one round-robin backend.
	SkipGroups map[string]string
}

// Clock is an injectable clock: it stands still until advanced. Safe for
// concurrent use.
type Clock struct{ ns atomic.Int64 }

// NewClock returns a clock at t.
func NewClock(t time.Time) *Clock {
	c := &Clock{}
	c.ns.Store(t.UnixNano())
	return c
}

// Now returns the clock's time (UTC).
func (c *Clock) Now() time.Time { return time.Unix(0, c.ns.Load()).UTC() }

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// Start is a good first time for a setup's clock: 30 s into the minute
// before the wall clock's, so rollup buckets are predictable, PostgreSQL's
// monthly partitions exist, and expiry judged by real time (Redis,
// PostgreSQL reads) agrees with TTLs set on this clock until the suite
// moves it ahead.
func Start() time.Time {
	return time.Now().UTC().Truncate(time.Minute).Add(-30 * time.Second)
}

// env is one subtest's view of the setup.
type env struct {
	t    *testing.T
	ctx  context.Context
	s    *Setup
	b    contract.Backend
	caps contract.Capabilities
	p    string // prefix of this subtest's ids and keys
}

var seq atomic.Int64

// group is a set of named subtests.
type group struct {
	name  string
	cases []tcase
	// shared, when set, runs once before the cases, which then share its
	// ids (e.id names the same counters in every case).
	shared func(e *env)
}

// tcase is one named subtest.
type tcase struct {
	name string
	run  func(e *env)
}

// Run runs the suite against the backend setup returns. setup is called
// once; it registers its own cleanups with t.Cleanup.
func Run(t *testing.T, setup func(t *testing.T) Setup) {
	s := setup(t)
	if s.Backend == nil || s.Clock == nil {
		t.Fatal("backendtest: Setup needs Backend and Clock")
	}
	caps := s.Backend.Capabilities()
	t.Logf("capabilities: %+v", caps)
	groups := []group{
		{name: "kinds", cases: kindCases()},
		{name: "floats", cases: floatCases()},
		{name: "ops", cases: opCases()},
		errorGroup(),
		{name: "limits", cases: limitCases()},
		{name: "versions", cases: versionCases()},
		{name: "idempotency", cases: idemCases()},
		{name: "batches", cases: batchCases()},
		{name: "marks", cases: markCases()},
		{name: "keylocks", cases: keyLockCases()},
		{name: "aggregates", cases: aggregateCases()},
		{name: "rollups", cases: rollupCases()},
		{name: "eventtime", cases: eventTimeCases()},
		{name: "ratelimit", cases: rateLimitCases()},
		{name: "quotas", cases: quotaCases()},
		{name: "disk", cases: diskCases()},
		{name: "hottier", cases: hotTierCases()}, // last: it may leave another backend
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			if why, ok := s.SkipGroups[g.name]; ok {
				t.Skipf("not run on this setup: %s", why)
			}
			newEnv := func(t *testing.T, ctx context.Context, p string) *env {
				if p == "" {
					p = fmt.Sprintf("bt%d.", seq.Add(1))
				}
				return &env{t: t, ctx: ctx, s: &s, b: s.Backend, caps: caps, p: p}
			}
			var prefix string
			if g.shared != nil {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				e := newEnv(t, ctx, "")
				g.shared(e)
				cancel()
				prefix = e.p
			}
			for _, c := range g.cases {
				t.Run(c.name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					c.run(newEnv(t, ctx, prefix))
				})
			}
		})
	}
}

// id returns this subtest's id for name.
func (e *env) id(name string) string { return e.p + name }

// reset empties the backend (FlushAll).
func (e *env) reset() {
	e.t.Helper()
	if err := e.b.FlushAll(e.ctx, contract.WriteOptions{}); err != nil {
		e.t.Fatalf("reset: %v", err)
	}
}

// apply applies op and fails the test on an error.
func (e *env) apply(op contract.Op) contract.Result {
	e.t.Helper()
	r, err := e.b.Apply(e.ctx, op, contract.WriteOptions{})
	if err != nil {
		e.t.Fatalf("apply %s %q: %v", op.Type, op.ID, err)
	}
	return r
}

// applyKey applies op under an idempotency key.
func (e *env) applyKey(op contract.Op, key string) (contract.Result, error) {
	return e.b.Apply(e.ctx, op, contract.WriteOptions{IdempotencyKey: key})
}

// get reads id and fails the test on an error.
func (e *env) get(id string) contract.View {
	e.t.Helper()
	v, err := e.b.Get(e.ctx, id)
	if err != nil {
		e.t.Fatalf("get %q: %v", id, err)
	}
	return v
}

// wantErr fails unless err wraps sentinel.
func (e *env) wantErr(what string, err, sentinel error) {
	e.t.Helper()
	if !errors.Is(err, sentinel) {
		e.t.Errorf("%s: error %v, want %v", what, err, sentinel)
	}
}

// eventually retries check until it returns nil. Writes every backend
// shows at once are checked once; when the backend declares lagging
// CRDT adds (lag true for a check that reads them), check is retried for
// up to 50 propagation intervals (at least 5 s).
func (e *env) eventually(lag bool, check func() error) {
	e.t.Helper()
	err := check()
	if err == nil {
		return
	}
	if lag && e.caps.LaggingCRDTAdds {
		within := max(5*time.Second, 50*time.Duration(e.caps.CRDTPropagationMS)*time.Millisecond)
		deadline := time.Now().Add(within)
		for err != nil && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
			err = check()
		}
	}
	if err != nil {
		e.t.Error(err)
	}
}

// wantValue checks id's kind and value (waiting for lagging CRDT adds).
func (e *env) wantValue(id string, k contract.Kind, want int64) {
	e.t.Helper()
	lag := k == contract.KindPN || k == contract.KindSharded
	e.eventually(lag, func() error {
		v, err := e.b.Get(e.ctx, id)
		if err != nil {
			return fmt.Errorf("get %q: %w", id, err)
		}
		if !v.Exists || v.Kind != k || v.Value != want {
			return fmt.Errorf("get %q = exists %v, %s %d; want %s %d", id, v.Exists, v.Kind, v.Value, k, want)
		}
		return nil
	})
}

// wantMissing checks that id does not exist.
func (e *env) wantMissing(id string) {
	e.t.Helper()
	if v := e.get(id); v.Exists || v.Kind != contract.KindNone || v.Value != 0 || v.Version != 0 || v.ID != id {
		e.t.Errorf("get %q = %+v, want no counter", id, v)
	}
}

// snapshot is what an error must not change: a counter's observable state.
type snapshot struct {
	exists  bool
	kind    contract.Kind
	value   int64
	version uint64
	fields  string
	ttl     bool
	float   string
}

func (e *env) snap(id string) snapshot {
	e.t.Helper()
	v := e.get(id)
	_, has, _, err := e.b.TTL(e.ctx, id)
	if err != nil {
		e.t.Fatalf("ttl %q: %v", id, err)
	}
	return snapshot{v.Exists, v.Kind, v.Value, v.Version, fmt.Sprint(v.Fields), has, v.Float}
}

// unchanged fails if id's state differs from before.
func (e *env) unchanged(id string, before snapshot) {
	e.t.Helper()
	if after := e.snap(id); after != before {
		e.t.Errorf("%q changed by a failed call: %+v, was %+v", id, after, before)
	}
}
