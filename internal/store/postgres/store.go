// Package postgres is counterd's PostgreSQL tier: the seeds' schema created
// by versioned (goose) migrations, write-behind batches applied exactly once,
// monthly partition maintenance, retention, snapshots and point-in-time
// reads. See docs/postgres.md.
package postgres

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Defaults for Options fields left zero.
const (
	DefaultMaxConns            = 10
	DefaultConnectTimeout      = 5 * time.Second
	DefaultStatementTimeout    = 30 * time.Second
	DefaultMaxConnLifetime     = time.Hour
	DefaultMaxConnIdleTime     = 5 * time.Minute
	DefaultHealthCheckPeriod   = 30 * time.Second
	DefaultPartitionsAhead     = 3
	DefaultMaintenanceInterval = time.Hour
)

// Options configure Open. Zero values select the documented defaults.
type Options struct {
	// Tracer, when set, also traces every query and batch (the server's
	// tracing.PGTracer); default none.
	Tracer TraceQueryBatch
	// MaxConns is the pool size (default 10). MinConns connections are kept
	// open even when idle (default 0).
	MaxConns int32
	MinConns int32
	// ConnectTimeout bounds establishing one connection (default 5 s).
	ConnectTimeout time.Duration
	// StatementTimeout is set as the server-side statement_timeout of every
	// connection (default 30 s; negative: none).
	StatementTimeout time.Duration
	// MaxConnLifetime (default 1 h), MaxConnIdleTime (default 5 min) and
	// HealthCheckPeriod (default 30 s) tune the pool's recycling of
	// connections; dead connections (e.g. after a server restart) are
	// dropped and replaced on the next use.
	MaxConnLifetime   time.Duration
	MaxConnIdleTime   time.Duration
	HealthCheckPeriod time.Duration

	// PartitionsAhead is how many months beyond the current one have
	// partitions at all times (default 3).
	PartitionsAhead int
	// MaintenanceInterval is the period of the maintenance loop (partitions
	// ahead, and Retention when set). Default 1 h; negative disables the loop.
	MaintenanceInterval time.Duration
	// Retention, when any duration is non-zero, is enforced by the
	// maintenance loop.
	Retention RetentionPolicy

	// AuditNamespaces lists the namespaces (the part of an id before the
	// first ':') whose applied deltas are written to counter_audit_log.
	// Empty (the default): no audit log writes. "*" audits everything.
	AuditNamespaces []string

	// SkipMigrations leaves the schema alone (it must already be current).
	SkipMigrations bool

	// AfterCommit, if set, runs after a batch's transaction commits and
	// before Apply returns; an error is returned from Apply as if the
	// acknowledgement had been lost. A fault-injection hook for tests.
	AfterCommit func(batchID string) error
	// BeforeCommit, if set, runs before a batch's transaction commits; an
	// error rolls it back and is returned from Apply (as a crash before
	// the commit would leave it). A fault-injection hook for tests.
	BeforeCommit func(batchID string) error
}

// Store is a handle on the PostgreSQL tier. It is safe for concurrent use.
type Store struct {
	pool  *pgxpool.Pool
	opts  Options
	audit map[string]bool
	parts sync.Map // partition name -> struct{}: known to exist

	statements atomic.Uint64
	deltas     atomic.Uint64
	batches    atomic.Uint64
	duplicates atomic.Uint64
	// journaled writes skipped because already applied
	journalDuplicates atomic.Uint64

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// Stats are cumulative counts since Open.
type Stats struct {
	Statements uint64 // SQL statements sent (incl. BEGIN/COMMIT)
	Deltas     uint64 // Delta entries in applied batches
	Batches    uint64 // batches applied
	Duplicates uint64 // batches skipped because already applied
	// JournalDuplicates are journaled writes skipped because already
	// applied (journal.go).
	JournalDuplicates uint64
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	return Stats{
		Statements: s.statements.Load(),
		Deltas:     s.deltas.Load(),
		Batches:    s.batches.Load(),
		Duplicates: s.duplicates.Load(),

		JournalDuplicates: s.journalDuplicates.Load(),
	}
}

// Open connects to dsn, migrates the schema to the latest version, makes
// sure the partitions for this month and opts.PartitionsAhead months exist,
// and starts the maintenance loop (stopped by Close).
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	opts = opts.withDefaults()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse dsn: %w", err)
	}
	cfg.MaxConns = opts.MaxConns
	cfg.MinConns = opts.MinConns
	cfg.MaxConnLifetime = opts.MaxConnLifetime
	cfg.MaxConnIdleTime = opts.MaxConnIdleTime
	cfg.HealthCheckPeriod = opts.HealthCheckPeriod
	cfg.ConnConfig.ConnectTimeout = opts.ConnectTimeout
	cfg.ConnConfig.Tracer = ioTracer{} // admission: waits on PostgreSQL are I/O (iowait.go)
	if opts.Tracer != nil {
		cfg.ConnConfig.Tracer = chainTracer{ioTracer{}, opts.Tracer} // tracechain.go
	}
	if opts.StatementTimeout > 0 {
		cfg.ConnConfig.RuntimeParams["statement_timeout"] = fmt.Sprint(opts.StatementTimeout.Milliseconds())
	}
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "counterd"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	s := &Store{pool: pool, opts: opts, stop: make(chan struct{}), done: make(chan struct{})}
	if len(opts.AuditNamespaces) > 0 {
		s.audit = make(map[string]bool, len(opts.AuditNamespaces))
		for _, ns := range opts.AuditNamespaces {
			s.audit[ns] = true
		}
	}
	if !opts.SkipMigrations {
		if err := s.Migrate(ctx); err != nil {
			pool.Close()
			return nil, err
		}
	}
	if err := s.EnsurePartitions(ctx, time.Now(), opts.PartitionsAhead); err != nil {
		pool.Close()
		return nil, err
	}
	if opts.MaintenanceInterval > 0 {
		go s.maintain()
	} else {
		close(s.done)
	}
	return s, nil
}

func (o Options) withDefaults() Options {
	if o.MaxConns <= 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.StatementTimeout == 0 {
		o.StatementTimeout = DefaultStatementTimeout
	}
	if o.MaxConnLifetime <= 0 {
		o.MaxConnLifetime = DefaultMaxConnLifetime
	}
	if o.MaxConnIdleTime <= 0 {
		o.MaxConnIdleTime = DefaultMaxConnIdleTime
	}
	if o.HealthCheckPeriod <= 0 {
		o.HealthCheckPeriod = DefaultHealthCheckPeriod
	}
	if o.PartitionsAhead <= 0 {
		o.PartitionsAhead = DefaultPartitionsAhead
	}
	if o.MaintenanceInterval == 0 {
		o.MaintenanceInterval = DefaultMaintenanceInterval
	}
	return o
}

// Migrate applies pending migrations (embedded migrations/*.sql, goose's
// format and version table; see migrate), under goose's PostgreSQL advisory
// lock so that several nodes may start at once.
func (s *Store) Migrate(ctx context.Context) error {
	sub, err := fs.Sub(migrationFS, "migrations")
	if err != nil {
		return err
	}
	if err := migrate(ctx, s.pool, sub); err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	return nil
}

// Pool exposes the connection pool (for tests and ad-hoc queries).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Close stops the maintenance loop and closes the pool. It is idempotent.
func (s *Store) Close() {
	s.closeOnce.Do(func() {
		close(s.stop)
		<-s.done
		s.pool.Close()
	})
}

func (s *Store) maintain() {
	defer close(s.done)
	t := time.NewTicker(s.opts.MaintenanceInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		go func() {
			select {
			case <-s.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		_ = s.EnsurePartitions(ctx, time.Now(), s.opts.PartitionsAhead)
		_, _ = s.PurgeIdem(ctx, time.Now())
		_, _ = s.PurgeJournal(ctx, time.Now())
		_, _ = s.PurgeDeaths(ctx, time.Now())
		if s.opts.Retention != (RetentionPolicy{}) {
			_ = s.Retain(ctx, s.opts.Retention)
		}
		cancel()
	}
}

func (s *Store) audited(id string) bool {
	if s.audit == nil {
		return false
	}
	if s.audit["*"] {
		return true
	}
	ns, _, ok := strings.Cut(id, ":")
	if !ok {
		ns = id
	}
	return s.audit[ns]
}
