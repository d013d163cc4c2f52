package tiered

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/idem"
	redisstore "github.com/counterd/counterd/internal/store/redis"
)

// Idempotency records live in Redis under idemPrefix+key, outside the
// counter:{...} key space (FLUSHALL of counters keeps them); package idem
// runs the claim, replay and record, and this file is its store. A record
// is first written "pending" with SET NX and a lease (its owner process
// and deadline inside), so concurrent retries of one key apply once;
// after the ops apply it is replaced by the results with the retention as
// TTL. A claim whose apply failed is deleted; if that delete fails (Redis
// unreachable), it is retried in the background until the lease ends, and
// a retry reaching this process recognises the claim as abandoned (its
// owner is this process, which no longer runs it) and takes it over. A
// retry waits for another request's claim at most SyncTimeout, then
// answers unavailable (retryable).
const (
	idemPrefix = "counterd:idem:"
	idemLease  = 30 * time.Second
	idemPoll   = 20 * time.Millisecond
)

var errIdemBusy = errors.New("another request with this idempotency key is being applied")

// releaseScript deletes KEYS[1] if it still holds ARGV[1] (the claim).
var releaseClaimScript = redisstore.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// activeClaims is the set of claims this process is running (idem.Active).
type activeClaims struct{ m sync.Map }

func (a *activeClaims) Running(claim string) bool { _, ok := a.m.Load(claim); return ok }

// idempotent runs apply at most once per key within the retention: a
// retry returns the stored results (Replayed set).
func (b *Backend) idempotent(ctx context.Context, key string, ops []contract.Op, apply func() ([]contract.Result, error)) ([]contract.Result, error) {
	if err := engine.ValidateIdempotencyKey(key); err != nil {
		return nil, err
	}
	s := &redisIdem{b: b, k: idemPrefix + key, start: time.Now(), apply: apply}
	defer s.stop()
	q := idem.Request{Key: key, FP: engine.Fingerprint(ops), Now: b.Now().UnixNano(), Lease: idemLease,
		Owner: idem.ProcessID(), Clock: func() int64 { return b.Now().UnixNano() }}
	return idem.Do(ctx, s, q, &b.claims)
}

// redisIdem is one keyed request's idem.Store over Redis.
type redisIdem struct {
	b     *Backend
	k     string
	start time.Time
	apply func() ([]contract.Result, error)
	claim *engine.IdemRecord // ours, once Claim ran
	raw   []byte             // its stored form
	held  *engine.IdemRecord // the last record another request held
	hraw  []byte             // its stored form, as read
}

func (s *redisIdem) stop() {
	if s.claim != nil {
		s.b.claims.m.Delete(s.claim.Claim)
	}
}

// Claim claims the key with SET NX, or returns the record it holds.
func (s *redisIdem) Claim(ctx context.Context, c *engine.IdemRecord) (*engine.IdemRecord, error) {
	if s.claim == nil {
		s.claim, s.raw = c, c.Encode()
		s.b.claims.m.Store(c.Claim, struct{}{})
	}
	rdb := s.b.rs.Client()
	for {
		ok, err := rdb.SetNX(ctx, s.k, s.raw, idemLease).Result()
		if err != nil {
			return nil, unavailable(err)
		}
		if ok {
			return nil, nil
		}
		data, err := rdb.Get(ctx, s.k).Bytes()
		if errors.Is(err, redis.Nil) {
			continue // gone meanwhile: claim again
		}
		if err != nil {
			return nil, unavailable(err)
		}
		r, err := engine.DecodeIdemRecord(data)
		if err != nil {
			return nil, fmt.Errorf("tiered: %w", err)
		}
		s.held, s.hraw = &r, data
		return &r, nil
	}
}

// Wait polls, for at most SyncTimeout since the request began.
func (s *redisIdem) Wait(ctx context.Context, held *engine.IdemRecord) error {
	if time.Since(s.start) > s.b.opts.SyncTimeout {
		return unavailable(errIdemBusy)
	}
	if err := sleep(ctx, idemPoll); err != nil {
		return unavailable(err)
	}
	return nil
}

// Commit applies, then replaces the claim with the results.
func (s *redisIdem) Commit(ctx context.Context, c *engine.IdemRecord) ([]contract.Result, error) {
	res, err := s.apply()
	if err != nil {
		return nil, err
	}
	d := c.Done(res)
	d.Key, d.Created = "", s.b.Now().UnixNano() // the key is Redis's
	if err := s.b.rs.Client().Set(context.WithoutCancel(ctx), s.k, d.Encode(), s.b.opts.IdempotencyRetention).Err(); err != nil {
		// Applied but not recorded: a retry within the lease waits, after
		// it applies again. Report it rather than hide it.
		s.b.opts.Logger.Error("tiered: idempotency record not stored", "key", s.k[len(idemPrefix):], "err", err)
	}
	return res, nil
}

// Release deletes claim c if the key still holds it. Our own claim's
// delete that fails is retried in the background until its lease ends.
func (s *redisIdem) Release(ctx context.Context, c *engine.IdemRecord) error {
	raw := s.hraw
	if c == s.claim {
		raw = s.raw
	} else if c != s.held {
		return nil
	}
	err := s.b.releaseClaim(ctx, s.k, raw)
	if err != nil && c == s.claim {
		s.b.opts.Logger.Warn("tiered: freeing an idempotency key failed; retrying", "key", s.k[len(idemPrefix):], "err", err)
		s.b.claimReleases.Add(1)
		go s.b.releaseLater(s.k, raw, s.start.Add(idemLease))
	}
	return err
}

func (b *Backend) releaseClaim(ctx context.Context, k string, raw []byte) error {
	_, err := b.rs.Eval(ctx, "idem_release", releaseClaimScript, []string{k}, raw)
	return unavailable(err)
}

// releaseLater retries a claim's release until it succeeds, until, or the
// backend closes.
func (b *Backend) releaseLater(k string, raw []byte, until time.Time) {
	defer b.claimReleases.Done()
	for time.Now().Before(until) {
		select {
		case <-b.stop:
			return
		case <-time.After(200 * time.Millisecond):
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := b.releaseClaim(ctx, k, raw)
		cancel()
		if err == nil {
			return
		}
	}
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
