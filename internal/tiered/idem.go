package tiered

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/ctxwait"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/idem"
	"github.com/counterd/counterd/internal/store/postgres"
	redisstore "github.com/counterd/counterd/internal/store/redis"
)

// Idempotency records live in Redis under idemPrefix+key, outside the
// counter:{...} key space (FLUSHALL of counters keeps them); package idem
// runs the claim, replay and record, and this file is its store. A record
// is first written "pending" with SET NX and a lease (its owner process
// and deadline inside), so concurrent retries of one key apply once;
// after the ops apply it is replaced by the results with the retention as
// TTL. A claim whose apply failed is deleted; if that delete fails (Redis
// unreachable), it is retried in the background until the lease ends, as
// is the delete of a claim whose SET NX failed (it may have been set)
// and the write of a done record that failed (replacing the claim), so
// the claim blocks retries elsewhere only while Redis does not answer; a
// retry reaching this process recognises the claim as abandoned (its
// owner is this process, which no longer runs it) and takes it over at
// once, one elsewhere at its deadline. A claim that took over an
// abandoned one asks the durable tier before it applies: the abandoned
// request may have applied and failed only to record it in Redis. A
// retry waits for another request's claim at most SyncTimeout, then
// answers unavailable (retryable).
//
// Records survive a loss of Redis data (FLUSHALL, a master restarted
// empty): the done record is also handed to the write-behind with the
// request's deltas, under one Aggregator.Hold, so PostgreSQL commits it
// in the same transaction as the effect it protects (table
// idempotency_records, with the retention as expiry). A won claim is
// checked there (after this node's write-behind, not yet committed)
// while Redis may lack records: each Redis Cluster slot has a marker key
// (markKey, in the slot of the keys it vouches for, read by the claim's
// own script) holding the time until which PostgreSQL must be asked; a
// claim that finds no marker sets it to when the last record there
// expires (at least idemGrace from now), see lookupDurable.
// A record found there replaces the claim in Redis and is replayed.
const (
	idemPrefix = "counterd:idem:"
	markPrefix = "counterd:idem-mark:"
	idemLease  = 30 * time.Second
	idemPoll   = 20 * time.Millisecond
	// idemGrace is how long a slot's new marker makes won claims ask
	// PostgreSQL at least (records on their way there at a loss).
	idemGrace = time.Minute
)

var errIdemBusy = errors.New("another request with this idempotency key is being applied")

// claimScript claims KEYS[1] with ARGV[1] (SET NX, lease ARGV[2] ms): it
// returns {1, the marker KEYS[2] or ""} when it claimed, {0, the record
// held} when the key has one.
var claimScript = redisstore.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, redis.call('GET', KEYS[2]) or ''}
end
return {0, redis.call('GET', KEYS[1])}
`)

// restoreScript replaces the claim ARGV[1] of KEYS[1] by the record
// ARGV[2] (TTL ARGV[3] ms), if the key still holds the claim.
var restoreScript = redisstore.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
`)

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
func (b *Backend) idempotent(ctx context.Context, key string, ops []contract.Op, apply func(context.Context) ([]contract.Result, error)) ([]contract.Result, error) {
	if err := engine.ValidateIdempotencyKey(key); err != nil {
		return nil, err
	}
	s := &redisIdem{b: b, key: key, k: idemPrefix + key, start: time.Now(), apply: apply}
	defer s.stop()
	q := idem.Request{Key: key, FP: engine.Fingerprint(ops), Now: b.Now().UnixNano(), Lease: idemLease,
		Owner: idem.ProcessID(), Clock: func() int64 { return b.Now().UnixNano() }}
	return idem.Do(ctx, s, q, &b.claims)
}

// redisIdem is one keyed request's idem.Store over Redis.
type redisIdem struct {
	b     *Backend
	key   string // the client's
	k     string // Redis's
	start time.Time
	apply func(context.Context) ([]contract.Result, error)
	claim *engine.IdemRecord // ours, once Claim ran
	raw   []byte             // its stored form
	held  *engine.IdemRecord // the last record another request held
	hraw  []byte             // its stored form, as read
	// takeover is set once an abandoned claim was released: the next
	// won claim always asks the durable tier.
	takeover bool
}

func (s *redisIdem) stop() {
	if s.claim != nil {
		s.b.claims.m.Delete(s.claim.Claim)
	}
}

// Claim claims the key (SET NX), or returns the record it holds. A won
// claim is checked against the durable tier while Redis may lack records
// (lookupDurable); a record found there is the key's.
func (s *redisIdem) Claim(ctx context.Context, c *engine.IdemRecord) (*engine.IdemRecord, error) {
	if s.claim == nil {
		s.claim, s.raw = c, c.Encode()
		s.b.claims.m.Store(c.Claim, struct{}{})
	}
	reply, err := s.b.rs.Eval(ctx, "idem_claim", claimScript, []string{s.k, markKey(s.k)}, s.raw, idemLease.Milliseconds())
	if err != nil {
		if mayHaveRun(err) {
			// The claim may have been set: free it once Redis answers,
			// so it does not hold retries elsewhere until its lease ends.
			s.b.claimReleases.Add(1)
			go s.b.releaseLater(s.k, s.raw, s.start.Add(idemLease))
		}
		return nil, unavailable(err)
	}
	won, data, err := claimReply(reply)
	if err != nil {
		return nil, unavailable(err)
	}
	if !won {
		r, err := engine.DecodeIdemRecord(data)
		if err != nil {
			return nil, fmt.Errorf("tiered: %w", err)
		}
		s.held, s.hraw = &r, data
		return &r, nil
	}
	data, found, err := s.b.lookupDurable(ctx, s.key, s.k, string(data), s.takeover)
	if err != nil {
		// The key stays claimed until the release (or this process
		// takes the abandoned claim over).
		_ = s.Release(context.WithoutCancel(ctx), s.claim)
		return nil, err
	}
	if !found {
		return nil, nil
	}
	r, err := engine.DecodeIdemRecord(data)
	if err != nil {
		_ = s.Release(context.WithoutCancel(ctx), s.claim)
		return nil, fmt.Errorf("tiered: %w", err)
	}
	ttl := time.Duration(r.Created + int64(s.b.opts.IdempotencyRetention) - s.b.Now().UnixNano())
	if ttl <= 0 {
		return nil, nil // expired meanwhile: the key is free, and claimed
	}
	if _, err := s.b.rs.Eval(ctx, "idem_restore", restoreScript, []string{s.k}, s.raw, data, max(ttl.Milliseconds(), 1)); err != nil {
		_ = s.Release(context.WithoutCancel(ctx), s.claim)
	}
	return &r, nil
}

// mayHaveRun reports whether a command that failed with err may have run
// in Redis: its reply was lost (a timeout, a connection broken after it
// was sent), not refused before it ran (no connection, an error reply).
func mayHaveRun(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, context.DeadlineExceeded)
}

// claimReply reads claimScript's reply.
func claimReply(reply any) (won bool, data []byte, err error) {
	a, ok := reply.([]any)
	if ok && len(a) == 2 {
		n, ok1 := a[0].(int64)
		v, ok2 := a[1].(string)
		if ok1 && ok2 {
			return n == 1, []byte(v), nil
		}
	}
	return false, nil, fmt.Errorf("tiered: unexpected claim reply %T", reply)
}

// lookupDurable returns key's record from the durable tier: this node's
// write-behind (records handed over, not yet committed: always asked, it
// is memory), then PostgreSQL when Redis may lack the record: the key's
// slot marker mark (as the claim read it, "" for none) is missing or
// names a time not yet reached, or force (the claim took over an
// abandoned one). A missing marker of a slot marked before (Redis lost
// its data) is set to when the last record PostgreSQL holds expires, or
// idemGrace from now if that is later: records still on their way to
// PostgreSQL then (another node's write-behind) are looked up if they
// commit within idemGrace; one of a slot never marked passes at once.
func (b *Backend) lookupDurable(ctx context.Context, key, k, mark string, force bool) ([]byte, bool, error) {
	if data, ok := b.agg.Idem(key); ok {
		return data, true, nil
	}
	ask, set, err := b.askDurable(ctx, k, mark, force)
	if err != nil || !ask {
		return nil, false, err
	}
	now := b.Now()
	b.idemLookups.Add(1)
	data, ok, err := b.pg.IdemRecord(ctx, key, now)
	if err != nil || ok {
		return data, ok, unavailable(err)
	}
	// Not there. Just after a loss (set: the marker was set because
	// Redis lost data), another node's write-behind may still hold the
	// record (committing it within a flush interval): look once more
	// when the settle time since the marker was set has passed.
	wait := time.Duration(set + int64(b.idemSettle()) - time.Now().UnixNano())
	if set == 0 || wait <= 0 {
		return nil, false, nil
	}
	if err := ctxwait.Sleep(ctx, wait); err != nil {
		return nil, false, unavailable(err)
	}
	b.idemSettles.Add(1)
	if data, ok := b.agg.Idem(key); ok {
		return data, true, nil
	}
	data, ok, err = b.pg.IdemRecord(ctx, key, b.Now())
	return data, ok, unavailable(err)
}

// askDurable reports whether PostgreSQL must be asked for the records
// of the slot of the Redis key k, given the slot's marker mark as read
// ("" for none; see lookupDurable), and when the marker was set after a
// loss (set, unix ns; 0: not after a loss, or unknown). A missing marker
// is set.
func (b *Backend) askDurable(ctx context.Context, k, mark string, force bool) (ask bool, set int64, err error) {
	now := b.Now()
	if mark == "" {
		// A slot marked before lost its marker with Redis' data. One never
		// marked is new (a fresh deployment, or an upgrade from a counterd
		// without markers): PostgreSQL holds no record of it (the claim
		// behind any record there marked its slot), so the marker passes
		// at once.
		lost, err := b.pg.MarkSlot(ctx, keySlot(k))
		if err != nil {
			return false, 0, unavailable(err)
		}
		until := now.UnixNano()
		if lost {
			last, err := b.pg.LastIdemExpiry(ctx) // once per slot after a loss
			if err != nil {
				return false, 0, unavailable(err)
			}
			until = now.Add(idemGrace).UnixNano()
			if !last.IsZero() {
				until = max(until, last.UnixNano())
			}
			set = time.Now().UnixNano() // the settle time is wall-clock time
		}
		if err := b.rs.Client().SetNX(ctx, markKey(k), strconv.FormatInt(until, 10)+":"+strconv.FormatInt(set, 10), 0).Err(); err != nil {
			return false, 0, unavailable(err)
		}
		b.idemMarks.Add(1)
		return lost, set, nil
	}
	u, c, _ := strings.Cut(mark, ":")
	until, err := strconv.ParseInt(u, 10, 64)
	if !force && err == nil && now.UnixNano() >= until {
		return false, 0, nil // Redis holds every record of the slot that has not expired
	}
	set, _ = strconv.ParseInt(c, 10, 64)
	return true, set, nil
}

// idemSettle is how long after a slot's marker was set a claim that finds
// no record looks once more: two flush intervals and a second (what the
// other nodes' write-behind takes to commit what it held at the loss,
// with the same --flush-interval), at most half the sync write bound.
func (b *Backend) idemSettle() time.Duration {
	return min(2*b.opts.FlushInterval+time.Second, b.opts.SyncTimeout/2)
}

// Wait polls, for at most SyncTimeout since the request began.
func (s *redisIdem) Wait(ctx context.Context, held *engine.IdemRecord) error {
	if time.Since(s.start) > s.b.opts.SyncTimeout {
		return unavailable(errIdemBusy)
	}
	if err := ctxwait.Sleep(ctx, idemPoll); err != nil {
		return unavailable(err)
	}
	return nil
}

// Commit applies, then replaces the claim with the results. The record
// is handed to the write-behind under the hold the apply ran in, so it
// commits in PostgreSQL in the same transaction as the request's deltas.
func (s *redisIdem) Commit(ctx context.Context, c *engine.IdemRecord) ([]contract.Result, error) {
	h := &hold{release: s.b.agg.Hold()}
	defer h.letGo()
	res, err := s.apply(context.WithValue(ctx, holdKey{}, h))
	if err != nil {
		return nil, err
	}
	now := s.b.Now()
	d := c.Done(res)
	d.Key, d.Created = "", now.UnixNano() // the key is Redis's
	raw := d.Encode()
	s.b.agg.AddIdem(postgres.IdemRecord{Key: s.key, Record: raw, Created: now, Expires: now.Add(s.b.opts.IdempotencyRetention)})
	h.letGo()
	if err := s.b.rs.Client().Set(context.WithoutCancel(ctx), s.k, raw, s.b.opts.IdempotencyRetention).Err(); err != nil {
		// Applied but not recorded in Redis: the claim stays. It is
		// replaced by the record in the background; meanwhile a retry
		// that takes the claim over (here at once, elsewhere at its
		// deadline) finds the record in the durable tier.
		s.b.opts.Logger.Warn("tiered: idempotency record not stored in Redis; retrying", "key", s.key, "err", err)
		s.b.claimReleases.Add(1)
		go s.b.recordLater(s.k, s.raw, raw, now.Add(s.b.opts.IdempotencyRetention), s.start.Add(idemLease))
	}
	return res, nil
}

// hold is a keyed request's Aggregator.Hold, let go once.
type hold struct {
	once    sync.Once
	release func()
}

func (h *hold) letGo() { h.once.Do(h.release) }

type holdKey struct{}

// letGo lets go of the hold of the keyed request ctx is in, if any: what
// flushes the write-behind during an apply (a read-through of a counter
// with unflushed changes, a float turned counter) would wait for it. The
// request's record and later deltas may then commit one batch after its
// earlier deltas.
func letGo(ctx context.Context) {
	if h, ok := ctx.Value(holdKey{}).(*hold); ok {
		h.letGo()
	}
}

// markKey is the marker of the Redis Cluster slot of the key k: a key
// whose hash tag hashes to that slot.
func markKey(k string) string {
	return markPrefix + "{" + slotTag(keySlot(k)) + "}"
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
	if c == s.held {
		// An abandoned claim: its request may have applied and failed
		// only to record it in Redis, so the claim that follows asks
		// the durable tier whatever the slot's marker says.
		s.takeover = true
	}
	err := s.b.releaseClaim(ctx, s.k, raw)
	if err != nil && c == s.claim {
		s.b.opts.Logger.Warn("tiered: freeing an idempotency key failed; retrying", "key", s.key, "err", err)
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
	b.settleLater(k, until, func(ctx context.Context) error { return b.releaseClaim(ctx, k, raw) })
}

// recordLater retries replacing the claim raw of k by the done record rec
// (expiring at expires) until it succeeds, until, or the backend closes:
// until then retries see a pending claim (this process takes it over at
// once, others at its deadline) and find the record in the durable tier.
func (b *Backend) recordLater(k string, raw, rec []byte, expires, until time.Time) {
	b.settleLater(k, until, func(ctx context.Context) error {
		ttl := expires.Sub(b.Now())
		if ttl <= 0 {
			return nil
		}
		_, err := b.rs.Eval(ctx, "idem_restore", restoreScript, []string{k}, raw, rec, max(ttl.Milliseconds(), 1))
		return err
	})
}

// settleLater calls fix every 200 ms until it succeeds, until, or the
// backend closes. The caller has done b.claimReleases.Add(1).
func (b *Backend) settleLater(k string, until time.Time, fix func(context.Context) error) {
	defer b.claimReleases.Done()
	for time.Now().Before(until) {
		select {
		case <-b.stop:
			return
		case <-time.After(200 * time.Millisecond):
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := fix(ctx)
		cancel()
		if err == nil {
			return
		}
	}
	b.opts.Logger.Warn("tiered: an idempotency claim stays until its lease ends", "key", k[len(idemPrefix):])
}
