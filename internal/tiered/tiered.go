// Package tiered is counterd's tiered backend: an contract.Backend that keeps
// hot counters in Redis (internal/store/redis, the source of truth for
// current values) and writes every change behind to PostgreSQL
// (internal/store/postgres, the durable record), which Redis reads through
// on a miss.
//
// A mutation runs as one Lua script in Redis, which returns the new value
// and version, and its delta is handed to the PostgreSQL aggregator, which
// commits one exactly-once batch per flush interval. Async writes are
// acknowledged then; sync writes wait for the batch holding their delta to
// commit. See docs/redis-tier.md and docs/postgres.md.
package tiered

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/quota"
	"github.com/counterd/counterd/internal/store/postgres"
	redisstore "github.com/counterd/counterd/internal/store/redis"
)

// ErrUnavailable wraps every error caused by Redis or PostgreSQL not
// answering (or answering too slowly). It wraps contract.ErrUnavailable, so
// the front ends answer 503 / TRYAGAIN.
var ErrUnavailable = fmt.Errorf("tiered: storage unavailable: %w", contract.ErrUnavailable)

// Options configure Open. Zero values select the defaults.
type Options struct {
	RedisURL    string // redis://host:port/db; Redis Cluster: redis://host:port?addr=host:port&addr=..., or ?cluster=true
	PostgresDSN string // postgres://user@host:port/db

	// FlushInterval is the write-behind period (default 1 s).
	FlushInterval time.Duration
	// Durability is the default for writes that do not ask (default async).
	Durability contract.Durability
	// SyncTimeout bounds how long a sync write waits for its batch to
	// commit before it fails with ErrUnavailable (default 5 s).
	SyncTimeout time.Duration
	// NodeID prefixes write-behind batch ids.
	NodeID string
	// IdempotencyRetention is how long an idempotency key is remembered
	// (default 24 h).
	IdempotencyRetention time.Duration
	// MaxBatch bounds the ops of one ApplyBatch (default 1000).
	MaxBatch int
	// CacheTTL is how long a counter loaded from PostgreSQL stays in Redis
	// (default 60 s).
	CacheTTL time.Duration
	// SnapshotInterval, when positive, takes a PostgreSQL snapshot
	// (point-in-time read and restore) at that period.
	SnapshotInterval time.Duration
	// Retention is enforced by PostgreSQL's maintenance loop (hourly).
	Retention postgres.RetentionPolicy
	// AuditNamespaces lists the namespaces whose deltas go to the audit
	// log ("*": all). Default: none.
	AuditNamespaces []string

	// QuotaSweepInterval is how often expired keys give their quota room
	// back (default 1 s); QuotaRecountInterval how often every quota's
	// count is set to what Redis and PostgreSQL hold (default 10 min; < 0:
	// only at SetQuotas). See quotas.go and docs/security.md, "Quotas".
	QuotaSweepInterval   time.Duration
	QuotaRecountInterval time.Duration

	// JournalLease is how long this process's write-behind journal lease
	// lasts in Redis without renewal (default 15 s; renewed every third of
	// it): another process replays the journal entries of an instance
	// whose lease is gone. JournalRecoverInterval is how often a process
	// looks for them (default 10 s; also at Open). See journal.go and
	// docs/redis-tier.md, "Crash window".
	JournalLease           time.Duration
	JournalRecoverInterval time.Duration

	// LockWait bounds how long a write waits for a counter locked by a
	// Lua script of any node (locks.go) when its request has no earlier
	// deadline; then it fails with ErrLocked (default
	// redisstore.DefaultLockWait; counterd sets twice --lua-time-limit).
	LockWait time.Duration

	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time

	// Redis and Postgres tune the stores; the fields above win.
	Redis    redisstore.Options
	Postgres postgres.Options
}

func (o *Options) defaults() {
	if o.FlushInterval <= 0 {
		o.FlushInterval = postgres.DefaultFlushInterval
	}
	if o.Durability == contract.DurabilityDefault {
		o.Durability = contract.Async
	}
	if o.SyncTimeout <= 0 {
		o.SyncTimeout = 5 * time.Second
	}
	if o.IdempotencyRetention <= 0 {
		o.IdempotencyRetention = 24 * time.Hour
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 1000
	}
	if o.QuotaSweepInterval <= 0 {
		o.QuotaSweepInterval = time.Second
	}
	if o.QuotaRecountInterval == 0 {
		o.QuotaRecountInterval = 10 * time.Minute
	}
	if o.JournalLease <= 0 {
		o.JournalLease = DefaultJournalLease
	}
	if o.JournalRecoverInterval <= 0 {
		o.JournalRecoverInterval = DefaultJournalRecoverInterval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Backend serves contract.Backend from Redis and PostgreSQL. It is safe for
// concurrent use; call Close.
type Backend struct {
	opts   Options
	limits contract.Limits // what Apply and ApplyBatch accept, from opts
	rs     *redisstore.Store
	pg     *postgres.Store
	agg    *postgres.Aggregator

	ops     atomic.Uint64
	flushes atomic.Uint64
	failed  atomic.Uint64         // failed write-behind and sketch flushes
	lastErr atomic.Pointer[error] // last failed flush, nil after a good one

	uq     uniques       // per-unit unique-count sketches (uniques.go)
	uqDone chan struct{} // closed when uniquesLoop returns

	quotas      atomic.Pointer[quota.Config] // nil: none (quotas.go)
	quotaMu     sync.Mutex                   // one recount at a time
	sweepDone   chan struct{}                // closed when sweepLoop returns
	recountDone chan struct{}                // closed when recountLoop returns

	claims        activeClaims   // idempotency claims running here (idem.go)
	claimReleases sync.WaitGroup // background releases of failed claims (idem.go)
	idemMarks     atomic.Uint64  // slot markers set (idem.go)
	idemLookups   atomic.Uint64  // won claims checked in PostgreSQL (idem.go)
	idemSettles   atomic.Uint64  // of them, looked again after the settle time

	// The write-behind journal (journal.go).
	inst           string        // this process's instance id
	wseq           atomic.Uint64 // write ids' sequence
	journalDone    chan struct{} // closed when journalLoop returns
	journalReplays atomic.Uint64 // journaled writes replayed here
	journalMoves   atomic.Uint64 // coalesced writes moved to a later generation
	jhead          atomic.Pointer[jhead]
	noTrim         atomic.Bool // tests: leave committed entries

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

var _ contract.Backend = (*Backend)(nil)

// Open runs the PostgreSQL migrations, opens both stores and starts the
// write-behind aggregator (and the snapshot loop if asked).
func Open(ctx context.Context, opts Options) (*Backend, error) {
	opts.defaults()
	po := opts.Postgres
	po.Retention = opts.Retention
	po.AuditNamespaces = opts.AuditNamespaces
	pg, err := postgres.Open(ctx, opts.PostgresDSN, po)
	if err != nil {
		return nil, fmt.Errorf("tiered: %w: %w", ErrUnavailable, err)
	}
	b := &Backend{opts: opts, limits: limitsFor(opts.MaxBatch), pg: pg, stop: make(chan struct{}), done: make(chan struct{}), uqDone: make(chan struct{}),
		sweepDone: make(chan struct{}), recountDone: make(chan struct{}), journalDone: make(chan struct{}), inst: newInstance(opts.NodeID)}
	ro := opts.Redis
	ro.Loader = b.load
	ro.BeforeCreate = b.beforeCreate
	ro.Now = opts.Now
	if opts.CacheTTL > 0 {
		ro.CacheTTL = opts.CacheTTL
	}
	if opts.LockWait > 0 {
		ro.LockWait = opts.LockWait
	}
	// Writes wait for Redis' reply (see redisstore.Store.write): give a
	// loaded machine time before an increment's outcome becomes unknown.
	if ro.ReadTimeout == 0 {
		ro.ReadTimeout, ro.WriteTimeout = 2*time.Second, 2*time.Second
	}
	if ro.Pipeline == 0 {
		// Concurrent increments share Redis round trips.
		ro.Pipeline, ro.PipelineConns = 128, 2
	}
	if b.rs, err = redisstore.Open(ctx, opts.RedisURL, ro); err != nil {
		pg.Close()
		return nil, fmt.Errorf("tiered: %w", mapErr(err))
	}
	b.agg = pg.NewAggregator(postgres.AggregatorOptions{
		FlushInterval: opts.FlushInterval,
		NodeID:        opts.NodeID,
		OnError:       b.flushFailed,
		OnFlush:       b.flushed,
		OnCommit:      b.trimJournal,
		JournalID:     func(gen uint64) string { return jgenID(b.inst, gen) },
	})
	if err := b.renewLease(ctx); err != nil {
		b.opts.Logger.Warn("tiered: write-behind journal lease", "err", err)
	}
	go b.journalLoop()
	go b.snapshots()
	go b.uniquesLoop()
	go b.sweepLoop()
	go b.recountLoop()
	return b, nil
}

func (b *Backend) flushFailed(err error) {
	b.lastErr.Store(&err)
	b.failed.Add(1)
	b.opts.Logger.Warn("tiered: write-behind flush failed; will retry the same batch", "err", err)
}

func (b *Backend) flushed() {
	b.flushes.Add(1)
	b.lastErr.Store(nil)
}

// snapshots takes a snapshot every SnapshotInterval until Close.
func (b *Backend) snapshots() {
	b.periodically(b.done, b.opts.SnapshotInterval, time.Minute, "tiered: scheduled snapshot failed", func(ctx context.Context) error {
		_, err := b.Snapshot(ctx)
		return err
	})
}

// periodically calls fn, bounded by timeout, every period (none if period
// is not positive) until Close, logging its errors with msg; it closes
// done when it returns.
func (b *Backend) periodically(done chan struct{}, period, timeout time.Duration, msg string, fn func(context.Context) error) {
	defer close(done)
	if period <= 0 {
		return
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		if err := fn(ctx); err != nil {
			b.opts.Logger.Warn(msg, "err", err)
		}
		cancel()
	}
}

// Close flushes every pending delta to PostgreSQL (bounded by 30 s), then
// closes both stores. It is idempotent.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		close(b.stop)
		b.claimReleases.Wait()
		<-b.done
		<-b.uqDone
		<-b.sweepDone
		<-b.recountDone
		<-b.journalDone
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := errors.Join(b.flushUniques(ctx), b.agg.Close(ctx))
		if err == nil {
			err = b.endLease(ctx)
		}
		b.pg.Close()
		b.closeErr = errors.Join(err, b.rs.Close())
	})
	return b.closeErr
}

// Flush writes every delta added so far to PostgreSQL.
func (b *Backend) Flush(ctx context.Context) error { return unavailable(b.agg.Flush(ctx)) }

// Snapshot flushes, then takes a PostgreSQL snapshot of every counter and
// returns its id (for ValueAt and RestoreSnapshot).
func (b *Backend) Snapshot(ctx context.Context) (int64, error) {
	if err := b.Flush(ctx); err != nil {
		return 0, err
	}
	id, err := b.pg.Snapshot(ctx)
	return id, unavailable(err)
}

// ValueAt is a point-in-time read: id's value in the latest snapshot taken
// at or before t; ok is false when there is none.
func (b *Backend) ValueAt(ctx context.Context, id string, t time.Time) (int64, bool, error) {
	if err := contract.ValidateID(id); err != nil {
		return 0, false, err
	}
	v, ok, err := b.pg.ValueAt(ctx, id, t)
	return v, ok, unavailable(err)
}

// Retain runs the retention jobs once (they also run hourly when
// Options.Retention is set).
func (b *Backend) Retain(ctx context.Context, p postgres.RetentionPolicy) error {
	return unavailable(b.pg.Retain(ctx, p))
}

// Postgres and Redis expose the stores (tests, diagnostics).
func (b *Backend) Postgres() *postgres.Store        { return b.pg }
func (b *Backend) Redis() *redisstore.Store         { return b.rs }
func (b *Backend) Aggregator() *postgres.Aggregator { return b.agg }

// Now is the backend's clock.
func (b *Backend) Now() time.Time { return b.opts.Now() }

// Stats reports mutations and flushes since Open.
func (b *Backend) Stats() contract.Stats {
	return contract.Stats{Ops: b.ops.Load(), Flushes: b.flushes.Load(), FlushFailures: b.failed.Load()}
}

// Ready is nil while Redis and PostgreSQL both answer within a second and
// the last write-behind flush succeeded.
func (b *Backend) Ready() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := b.rs.Ready(ctx); err != nil {
		return fmt.Errorf("redis: %w", mapErr(err))
	}
	if err := b.pg.Ping(ctx); err != nil {
		return unavailable(err)
	}
	if p := b.lastErr.Load(); p != nil {
		return fmt.Errorf("%w: write-behind: %v", ErrUnavailable, *p)
	}
	return nil
}

// mapErr turns store errors into engine sentinels with messages fit for
// clients; anything else from Redis or PostgreSQL is ErrUnavailable.
func mapErr(err error) error { return mapOpErr("", err) }

// mapOpErr is mapErr for an error of an op on id ("" for none), which the
// message names.
func mapOpErr(id string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, redisstore.ErrTooLate) { // both sentinels, as the engine's
		detail := "event time too late"
		var re *redisstore.ReplyError
		if errors.As(err, &re) && re.Detail != "" {
			detail = re.Detail
		}
		return fmt.Errorf("%w: %w: %q: %s", contract.ErrInvalidArgument, engine.ErrTooLate, id, detail)
	}
	for _, m := range errMap {
		if errors.Is(err, m.from) {
			if m.to == ErrUnavailable {
				return unavailable(err)
			}
			detail := "rejected by the store"
			var re *redisstore.ReplyError
			if errors.As(err, &re) && re.Detail != "" {
				detail = re.Detail
			}
			if id != "" {
				detail = strconv.Quote(id) + ": " + detail
			}
			return &storeError{sentinel: m.to, msg: m.to.Error() + ": " + detail, cause: err}
		}
	}
	for _, s := range []error{contract.ErrInvalidID, contract.ErrInvalidArgument, contract.ErrWrongKind, contract.ErrOverflow, contract.ErrNotFloat, contract.ErrFloatRange, contract.ErrNotInteger,
		contract.ErrVersionConflict, contract.ErrIdempotencyReuse, contract.ErrNotFound, contract.ErrQuotaExceeded, contract.ErrUnavailable} {
		if errors.Is(err, s) {
			return err
		}
	}
	return unavailable(err)
}

var errMap = []struct{ from, to error }{
	{redisstore.ErrWrongKind, contract.ErrWrongKind},
	{redisstore.ErrOverflow, contract.ErrOverflow},
	{redisstore.ErrVersionConflict, contract.ErrVersionConflict},
	{redisstore.ErrInvalidArgument, contract.ErrInvalidArgument},
	{redisstore.ErrNotFloat, contract.ErrNotFloat},
	{redisstore.ErrFloatRange, contract.ErrFloatRange},
	{redisstore.ErrNotInteger, contract.ErrNotInteger},
	{redisstore.ErrLocked, ErrLocked},
	{redisstore.ErrLockLost, ErrLockLost},
	{redisstore.ErrUnavailable, ErrUnavailable},
	{redisstore.ErrClosed, ErrUnavailable},
	{context.DeadlineExceeded, ErrUnavailable},
}

// unavailableMsg is what clients read of a Redis or PostgreSQL failure;
// the cause (addresses, driver errors) goes to the server log only.
const unavailableMsg = "engine: unavailable: the tiered store did not answer; the request may be retried"

// unavailable wraps a PostgreSQL (or other infrastructure) error.
func unavailable(err error) error {
	if err == nil || errors.Is(err, contract.ErrUnavailable) {
		return err
	}
	return &storeError{sentinel: ErrUnavailable, msg: unavailableMsg, cause: err}
}

// storeError is a Redis or PostgreSQL error as front ends see it: the
// engine sentinel and a message without the stores' internals (script
// replies, addresses, SQL). errors.Is reaches the sentinel and the cause;
// logs (slog) get the cause too.
type storeError struct {
	sentinel error
	msg      string
	cause    error
}

func (e *storeError) Error() string   { return e.msg }
func (e *storeError) Unwrap() []error { return []error{e.sentinel, e.cause} }

// LogValue puts the cause in the server's logs.
func (e *storeError) LogValue() slog.Value {
	return slog.StringValue(e.msg + " (cause: " + e.cause.Error() + ")")
}
