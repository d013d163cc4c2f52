package tiered_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/counterd/counterd/internal/engine"
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
	op := engine.Op{Type: engine.OpAdd, ID: "claims:a", Delta: 3}
	fp := engine.Fingerprint([]engine.Op{op})
	claimed := func(key, claim string) {
		rec := engine.IdemRecord{FP: fp, Created: time.Now().UnixNano(), Pending: true, Claim: claim}
		if err := rdb.Set(ctx, "counterd:idem:"+key, rec.Encode(), time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	defer tiered.FixClaim("mine")()

	claimed("k1", "mine") // as if our SET NX had been applied, then resent
	start := time.Now()
	res, err := e.b.Apply(ctx, op, engine.WriteOptions{IdempotencyKey: "k1"})
	if err != nil || res.Value != 3 || res.Replayed {
		t.Fatalf("apply after a resent claim = %+v, %v; want value 3, not replayed", res, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("apply waited %v for its own claim", d)
	}
	again, err := e.b.Apply(ctx, op, engine.WriteOptions{IdempotencyKey: "k1"})
	if err != nil || !again.Replayed || again.Value != 3 {
		t.Fatalf("retry = %+v, %v; want the recorded result", again, err)
	}

	claimed("k2", "someone-else")
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := e.b.Apply(short, op, engine.WriteOptions{IdempotencyKey: "k2"}); err == nil || !errors.Is(err, engine.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("apply under another's claim = %v, want to wait until the deadline", err)
	}
	if v := view(t, e.b, "claims:a"); v.Value != 3 {
		t.Fatalf("value = %d, want 3 (applied once)", v.Value)
	}
}
