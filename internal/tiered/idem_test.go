package tiered_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/idem"
	"github.com/counterd/counterd/internal/tiered"
)

// TestIdempotentClaimResent: when the client library resends the SET NX
// that claimed a key (its first reply was lost), the request recognises
// its own pending claim and applies at once instead of waiting out the
// lease; a claim of another request still makes it wait.
func TestIdempotentClaimResent(t *testing.T) {
	e := newEnv(t, nil)
	rdb := redis.NewClient(&redis.Options{Addr: e.rd.Addr})
	defer rdb.Close()
	ctx := context.Background()
	op := contract.Op{Type: contract.OpAdd, ID: "claims:a", Delta: 3}
	fp := engine.Fingerprint([]contract.Op{op})
	claimed := func(key, claim string) {
		rec := engine.IdemRecord{FP: fp, Created: time.Now().UnixNano(), Pending: true, Claim: claim}
		if err := rdb.Set(ctx, "counterd:idem:"+key, rec.Encode(), time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	defer tiered.FixClaim("mine")()

	claimed("k1", "mine") // as if our SET NX had been applied, then resent
	start := time.Now()
	res, err := e.b.Apply(ctx, op, contract.WriteOptions{IdempotencyKey: "k1"})
	if err != nil || res.Value != 3 || res.Replayed {
		t.Fatalf("apply after a resent claim = %+v, %v; want value 3, not replayed", res, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("apply waited %v for its own claim", d)
	}
	again, err := e.b.Apply(ctx, op, contract.WriteOptions{IdempotencyKey: "k1"})
	if err != nil || !again.Replayed || again.Value != 3 {
		t.Fatalf("retry = %+v, %v; want the recorded result", again, err)
	}

	claimed("k2", "someone-else")
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := e.b.Apply(short, op, contract.WriteOptions{IdempotencyKey: "k2"}); err == nil || !errors.Is(err, contract.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("apply under another's claim = %v, want to wait until the deadline", err)
	}
	if v := view(t, e.b, "claims:a"); v.Value != 3 {
		t.Fatalf("value = %d, want 3 (applied once)", v.Value)
	}
}

// TestIdempotentAbandonedClaim (issue 27): a pending claim whose apply
// failed and whose delete failed too (Redis in CLUSTERDOWN) is left in
// Redis with its 30 s lease. A retry reaching the process that owns it
// takes it over at once (that process no longer runs the claim); a retry
// elsewhere takes it over once its deadline passed; and a live claim of
// another process makes a retry wait at most SyncTimeout, then answer
// unavailable, never the lease.
func TestIdempotentAbandonedClaim(t *testing.T) {
	e := newEnv(t, func(o *tiered.Options) { o.SyncTimeout = 300 * time.Millisecond })
	rdb := redis.NewClient(&redis.Options{Addr: e.rd.Addr})
	defer rdb.Close()
	ctx := context.Background()
	op := contract.Op{Type: contract.OpAdd, ID: "abandoned:a", Delta: 2}
	fp := engine.Fingerprint([]contract.Op{op})
	left := func(key, owner string, deadline time.Time) {
		rec := engine.IdemRecord{FP: fp, Created: time.Now().UnixNano(), Pending: true, Claim: "left-" + key, Owner: owner, Deadline: deadline.UnixNano()}
		if err := rdb.Set(ctx, "counterd:idem:"+key, rec.Encode(), 30*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
	}
	apply := func(key string) (contract.Result, time.Duration, error) {
		start := time.Now()
		res, err := e.b.Apply(ctx, op, contract.WriteOptions{IdempotencyKey: key})
		return res, time.Since(start), err
	}

	left("mine", idem.ProcessID(), time.Now().Add(30*time.Second))
	res, d, err := apply("mine")
	if err != nil || res.Value != 2 || res.Replayed || d > time.Second {
		t.Fatalf("retry over this process's abandoned claim = %+v, %v after %v; want applied at once", res, err, d)
	}
	if again, _, err := apply("mine"); err != nil || !again.Replayed || again.Value != 2 {
		t.Fatalf("second retry = %+v, %v; want the recorded result", again, err)
	}

	left("expired", "another-process.", time.Now().Add(-time.Second))
	if res, d, err := apply("expired"); err != nil || res.Value != 4 || res.Replayed || d > time.Second {
		t.Fatalf("retry over another process's claim past its deadline = %+v, %v after %v; want applied at once", res, err, d)
	}

	left("live", "another-process.", time.Now().Add(30*time.Second))
	_, d, err = apply("live")
	if !errors.Is(err, contract.ErrUnavailable) || d > 3*time.Second {
		t.Fatalf("retry under another process's live claim = %v after %v; want unavailable after SyncTimeout", err, d)
	}
	if v := view(t, e.b, "abandoned:a"); v.Value != 4 {
		t.Fatalf("value = %d, want 4 (each key applied once)", v.Value)
	}
}

// TestIdempotentFailedApplyFreesKey: an apply that fails frees its key
// (the claim is deleted only while it is still this request's), so a
// corrected retry applies.
func TestIdempotentFailedApplyFreesKey(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	if _, err := e.b.Apply(ctx, contract.Op{Type: contract.OpHAdd, ID: "free:h", Fields: []counter.FieldDelta{{Name: "f", Delta: 1}}}, contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	bad := contract.Op{Type: contract.OpAdd, ID: "free:h", Delta: 1} // a plain add to a hash: wrong kind
	if _, err := e.b.Apply(ctx, bad, contract.WriteOptions{IdempotencyKey: "free"}); !errors.Is(err, contract.ErrWrongKind) {
		t.Fatalf("apply to the wrong kind = %v, want ErrWrongKind", err)
	}
	start := time.Now()
	good := contract.Op{Type: contract.OpAdd, ID: "free:c", Delta: 1}
	if res, err := e.b.Apply(ctx, good, contract.WriteOptions{IdempotencyKey: "free"}); err != nil || res.Replayed || res.Value != 1 || time.Since(start) > time.Second {
		t.Fatalf("retry after a failed apply = %+v, %v after %v; want applied at once", res, err, time.Since(start))
	}
}

// testIdempotencySurvivesRedisLoss (issue 27): records are written behind
// to PostgreSQL with their deltas, so a keyed retry after Redis lost its
// data (FLUSHALL; on a single Redis also a restart, which comes back
// empty) is answered from the record, on the node that applied it and on
// another, and never applied twice: a sync write's once acknowledged, an
// async write's while it still waits in its node's write-behind. A record
// past the retention is gone from PostgreSQL too, and once the slot
// markers say Redis holds one retention of records, won claims no longer
// ask PostgreSQL.
func testIdempotencySurvivesRedisLoss(t *testing.T, s setup) {
	clk := backendtestClock()
	e := s.env(t, func(o *tiered.Options) { o.Now = clk.now })
	other := e.open(t, func(o *tiered.Options) { o.Now = clk.now; o.NodeID = "t2" })
	ctx := context.Background()
	sync := contract.WriteOptions{IdempotencyKey: "{loss}1", Durability: contract.Sync}
	first, err := e.b.Apply(ctx, add("loss:c", contract.KindNone, 5), sync)
	if err != nil || first.Value != 5 {
		t.Fatalf("first apply = %+v, %v", first, err)
	}
	retry := func(b *tiered.Backend, op contract.Op, key string, want contract.Result) {
		t.Helper()
		var r contract.Result
		var err error
		deadline := time.Now().Add(20 * time.Second)
		for { // a restarted Redis takes a moment to answer
			r, err = b.Apply(ctx, op, contract.WriteOptions{IdempotencyKey: key})
			if !isUnavailable(err) || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil || !r.Replayed || r.Value != want.Value || r.Version != want.Version {
			t.Fatalf("retry of %q = %+v, %v; want the recorded %+v, replayed", key, r, err, want)
		}
	}

	e.flushRedis(t)
	// A claim in the slot sets its marker; an hour later (past the
	// grace) a retry is still looked up, as PostgreSQL holds records of
	// before the loss that have not expired.
	if _, err := e.b.Apply(ctx, add("loss:x", contract.KindNone, 1), contract.WriteOptions{IdempotencyKey: "{loss}0"}); err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Hour)
	retry(other, add("loss:c", contract.KindNone, 5), "{loss}1", first)
	retry(e.b, add("loss:c", contract.KindNone, 5), "{loss}1", first)
	if v := view(t, e.b, "loss:c"); v.Value != 5 {
		t.Fatalf("value after retries = %d, want 5 (applied once)", v.Value)
	}

	// An async write whose batch has not been flushed: its node answers
	// the retry from its write-behind.
	slow := e.open(t, func(o *tiered.Options) { o.Now = clk.now; o.NodeID = "t3"; o.FlushInterval = time.Hour })
	a, err := slow.Apply(ctx, add("loss:a", contract.KindNone, 7), contract.WriteOptions{IdempotencyKey: "{loss}2"})
	if err != nil {
		t.Fatal(err)
	}
	e.flushRedis(t)
	retry(slow, add("loss:a", contract.KindNone, 7), "{loss}2", a)
	if v := view(t, slow, "loss:a"); v.Value != 7 {
		t.Fatalf("async value after the retry = %d, want 7", v.Value)
	}

	if e.rd != nil && !e.rd.External() {
		e.rd.Restart(t) // a master restarted empty
		retry(e.b, add("loss:c", contract.KindNone, 5), "{loss}1", first)
		retry(other, add("loss:a", contract.KindNone, 7), "{loss}2", a)
		if v := view(t, other, "loss:c"); v.Value != 5 {
			t.Fatalf("value after a restart = %d, want 5", v.Value)
		}
	}

	// Past the retention the record is gone everywhere: the request
	// applies again (as it would without the loss).
	clk.advance(25 * time.Hour)
	e.flushRedis(t)
	again, err := e.b.Apply(ctx, add("loss:c", contract.KindNone, 5), sync)
	if err != nil || again.Replayed || again.Value != 10 {
		t.Fatalf("apply past the retention = %+v, %v; want applied again (10)", again, err)
	}
	// The marker set by that claim (PostgreSQL's records had expired:
	// the grace from then) says Redis holds every unexpired record once
	// it passed: no more lookups for keys of its slot (the hash tag puts
	// them in one).
	clk.advance(2 * time.Minute)
	before := tiered.IdemLookups(e.b)
	if _, err := e.b.Apply(ctx, add("loss:c", contract.KindNone, 1), contract.WriteOptions{IdempotencyKey: "{loss}3"}); err != nil {
		t.Fatal(err)
	}
	if n := tiered.IdemLookups(e.b) - before; n != 0 {
		t.Fatalf("%d durable lookups for a claim in a slot whose marker passed", n)
	}

	// An async write still in its node's write-behind (flushed every
	// second), retried on another node right after a loss: not in
	// PostgreSQL yet, so that node looks once more after the settle time
	// (here 5 s), when the first node has committed it.
	src := e.open(t, func(o *tiered.Options) { o.Now = clk.now; o.NodeID = "t4"; o.FlushInterval = time.Second })
	dst := e.open(t, func(o *tiered.Options) {
		o.Now = clk.now
		o.NodeID, o.FlushInterval, o.SyncTimeout = "t5", 2*time.Second, 10*time.Second
	})
	w, err := src.Apply(ctx, add("loss:w", contract.KindNone, 3), contract.WriteOptions{IdempotencyKey: "{loss2}1"})
	if err != nil {
		t.Fatal(err)
	}
	e.flushRedis(t)
	retry(dst, add("loss:w", contract.KindNone, 3), "{loss2}1", w)
	if err := src.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if v := view(t, dst, "loss:w"); v.Value != 3 {
		t.Fatalf("value after a retry on another node = %d, want 3", v.Value)
	}
}

// testClock is a settable clock for the backends' Now.
type testClock struct{ ns atomic.Int64 }

func backendtestClock() *testClock {
	c := &testClock{}
	c.ns.Store(time.Now().UnixNano())
	return c
}

func (c *testClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *testClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// TestIdempotentTakeoverAsksDurableTier: a request that applied but could
// not replace its claim by the record in Redis leaves a pending claim;
// the retry that takes it over (past its deadline) asks the durable tier
// even where the slot's marker says Redis is complete, finds the record
// the write-behind committed with the effect, and replays it.
func TestIdempotentTakeoverAsksDurableTier(t *testing.T) {
	clk := backendtestClock()
	e := newEnv(t, func(o *tiered.Options) { o.Now = clk.now })
	rdb := redis.NewClient(&redis.Options{Addr: e.rd.Addr})
	defer rdb.Close()
	ctx := context.Background()
	op := add("takeover:c", contract.KindNone, 4)
	sync := func(key string) contract.WriteOptions {
		return contract.WriteOptions{IdempotencyKey: key, Durability: contract.Sync}
	}
	if _, err := e.b.Apply(ctx, add("takeover:x", contract.KindNone, 1), sync("{f}a")); err != nil { // sets the slot's marker
		t.Fatal(err)
	}
	clk.advance(time.Hour)
	first, err := e.b.Apply(ctx, op, sync("{f}b"))
	if err != nil {
		t.Fatal(err)
	}
	clk.advance(23*time.Hour + time.Minute) // the marker passed; the record has an hour left
	left := engine.IdemRecord{FP: engine.Fingerprint([]contract.Op{op}), Created: clk.now().UnixNano(), Pending: true,
		Claim: "left", Owner: "another-process.", Deadline: clk.now().Add(-time.Second).UnixNano()}
	if err := rdb.Set(ctx, "counterd:idem:{f}b", left.Encode(), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	before := tiered.IdemLookups(e.b)
	r, err := e.b.Apply(ctx, op, sync("{f}b"))
	if err != nil || !r.Replayed || r.Value != first.Value || r.Version != first.Version {
		t.Fatalf("retry over an abandoned claim = %+v, %v; want the recorded %+v, replayed", r, err, first)
	}
	if tiered.IdemLookups(e.b) == before {
		t.Fatal("the takeover did not ask the durable tier")
	}
	if v := view(t, e.b, "takeover:c"); v.Value != 4 {
		t.Fatalf("value = %d, want 4 (applied once)", v.Value)
	}
}
