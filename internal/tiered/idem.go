package tiered

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/counterd/counterd/internal/engine"
)

// Idempotency records live in Redis under idemPrefix+key, outside the
// counter:{...} key space (FLUSHALL of counters keeps them). A record is
// first written "pending" with SET NX and a short lease, so concurrent
// retries of one key apply once; after the ops apply it is replaced by
// the results with the retention as TTL.
const (
	idemPrefix = "counterd:idem:"
	idemLease  = 30 * time.Second
	idemPoll   = 20 * time.Millisecond
)

// idempotent runs apply at most once per key within the retention: a
// retry returns the stored results (Replayed set).
func (b *Backend) idempotent(ctx context.Context, key string, ops []engine.Op, apply func() ([]engine.Result, error)) ([]engine.Result, error) {
	if err := engine.ValidateIdempotencyKey(key); err != nil {
		return nil, err
	}
	rdb := b.rs.Client()
	k := idemPrefix + key
	fp := engine.Fingerprint(ops)
	claim := newClaim()
	pending := (&engine.IdemRecord{FP: fp, Created: b.Now().UnixNano(), Pending: true, Claim: claim}).Encode()
	for {
		ok, err := rdb.SetNX(ctx, k, pending, idemLease).Result()
		if err != nil {
			return nil, unavailable(err)
		}
		if ok {
			break
		}
		res, wait, mine, err := b.replay(ctx, k, fp, claim)
		if mine {
			break // our SET NX was resent after it had applied
		}
		if !wait {
			return res, err
		}
		if err := sleep(ctx, idemPoll); err != nil {
			return nil, unavailable(err)
		}
	}
	res, err := apply()
	if err != nil {
		rdb.Del(context.WithoutCancel(ctx), k) // nothing applied (or undone): the key is free again
		return nil, err
	}
	done := (&engine.IdemRecord{FP: fp, Created: b.Now().UnixNano(), Results: res}).Encode()
	if err := rdb.Set(context.WithoutCancel(ctx), k, done, b.opts.IdempotencyRetention).Err(); err != nil {
		// Applied but not recorded: a retry within the lease waits, after
		// it applies again. Report it rather than hide it.
		b.opts.Logger.Error("tiered: idempotency record not stored", "key", key, "err", err)
	}
	return res, nil
}

// replay reads the record under k. wait is true while another request
// with the key is being applied (or the record vanished: try SET NX
// again); mine is true when the pending record is this request's claim.
func (b *Backend) replay(ctx context.Context, k string, fp uint64, claim string) (res []engine.Result, wait, mine bool, err error) {
	data, err := b.rs.Client().Get(ctx, k).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, true, false, nil
	}
	if err != nil {
		return nil, false, false, unavailable(err)
	}
	r, err := engine.DecodeIdemRecord(data)
	if err != nil {
		return nil, false, false, fmt.Errorf("tiered: %w", err)
	}
	if r.Pending && r.FP == fp {
		return nil, true, r.Claim == claim, nil
	}
	res, err = r.Replay(k[len(idemPrefix):], fp)
	return res, false, false, err
}

// newClaim returns a random token naming one request's claim on a key
// (a variable so tests can fix it).
var newClaim = func() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
