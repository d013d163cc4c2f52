package tiered

import (
	"context"
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
	pending := (&engine.IdemRecord{FP: fp, Created: b.Now().UnixNano(), Pending: true}).Encode()
	for {
		ok, err := rdb.SetNX(ctx, k, pending, idemLease).Result()
		if err != nil {
			return nil, unavailable(err)
		}
		if ok {
			break
		}
		res, wait, err := b.replay(ctx, k, fp)
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
// with the key is being applied (or the record vanished: try SET NX again).
func (b *Backend) replay(ctx context.Context, k string, fp uint64) (res []engine.Result, wait bool, err error) {
	data, err := b.rs.Client().Get(ctx, k).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, unavailable(err)
	}
	r, err := engine.DecodeIdemRecord(data)
	if err != nil {
		return nil, false, fmt.Errorf("tiered: %w", err)
	}
	if r.Pending && r.FP == fp {
		return nil, true, nil
	}
	res, err = r.Replay(k[len(idemPrefix):], fp)
	return res, false, err
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
