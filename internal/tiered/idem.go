package tiered

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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

// idemRecord is the JSON stored under an idempotency key.
type idemRecord struct {
	FP      string          `json:"fp"`            // fingerprint of the ops
	Done    bool            `json:"done"`          // false: still being applied
	Results []engine.Result `json:"res,omitempty"` // when done
}

// fingerprint identifies a request: the same key with a different request
// is refused (engine.ErrIdempotencyReuse).
func fingerprint(ops []engine.Op) string {
	b, _ := json.Marshal(ops) // Op holds only JSON-encodable fields
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// parseIdem decodes a stored record; a malformed one is an error and never
// a replay.
func parseIdem(data []byte) (idemRecord, error) {
	var r idemRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return idemRecord{}, fmt.Errorf("tiered: bad idempotency record: %w", err)
	}
	if len(r.FP) != 2*sha256.Size || (r.Done && r.Results == nil) {
		return idemRecord{}, errors.New("tiered: bad idempotency record: missing fields")
	}
	return r, nil
}

// idempotent runs apply at most once per key within the retention: a
// retry returns the stored results (Replayed set).
func (b *Backend) idempotent(ctx context.Context, key string, ops []engine.Op, apply func() ([]engine.Result, error)) ([]engine.Result, error) {
	if err := engine.ValidateIdempotencyKey(key); err != nil {
		return nil, err
	}
	rdb := b.rs.Client()
	k := idemPrefix + key
	fp := fingerprint(ops)
	pending, _ := json.Marshal(idemRecord{FP: fp})
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
	done, _ := json.Marshal(idemRecord{FP: fp, Done: true, Results: res})
	if err := rdb.Set(context.WithoutCancel(ctx), k, done, b.opts.IdempotencyRetention).Err(); err != nil {
		// Applied but not recorded: a retry within the lease waits, after
		// it applies again. Report it rather than hide it.
		b.opts.Logger.Error("tiered: idempotency record not stored", "key", key, "err", err)
	}
	return res, nil
}

// replay reads the record under k. wait is true while another request
// with the key is being applied (or the record vanished: try SET NX again).
func (b *Backend) replay(ctx context.Context, k, fp string) (res []engine.Result, wait bool, err error) {
	data, err := b.rs.Client().Get(ctx, k).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, unavailable(err)
	}
	r, err := parseIdem(data)
	if err != nil {
		return nil, false, err
	}
	if r.FP != fp {
		return nil, false, fmt.Errorf("%w: %q", engine.ErrIdempotencyReuse, k[len(idemPrefix):])
	}
	if !r.Done {
		return nil, true, nil
	}
	for i := range r.Results {
		r.Results[i].Replayed = true
	}
	return r.Results, false, nil
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
