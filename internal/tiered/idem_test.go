package tiered_test

import (
	"context"
	"errors"
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
