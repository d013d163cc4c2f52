package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// RetentionPolicy says how long each kind of history is kept; a zero
// duration keeps it forever.
type RetentionPolicy struct {
	Timeseries  time.Duration // counter_timeseries minute buckets
	Aggregates  time.Duration // counter_aggregates (by period_start)
	Snapshots   time.Duration // counter_snapshots / counter_snapshot_sets
	Audit       time.Duration // counter_audit_log
	SyncBatches time.Duration // counter_sync_batches: exactly-once window for retried flushes
	// Now is the reference time (zero: time.Now()).
	Now time.Time
}

// Retain deletes history older than the policy allows. Partitions that are
// entirely older than the cutoff are dropped (cheap, no vacuum debt); rows
// older than the cutoff in the partition that straddles it are deleted.
func (s *Store) Retain(ctx context.Context, p RetentionPolicy) error {
	now := p.Now
	if now.IsZero() {
		now = time.Now()
	}
	if p.Timeseries > 0 {
		if err := s.retainPartitioned(ctx, "counter_timeseries", "bucket_timestamp", now.Add(-p.Timeseries)); err != nil {
			return err
		}
	}
	if p.Audit > 0 {
		if err := s.retainPartitioned(ctx, "counter_audit_log", `"timestamp"`, now.Add(-p.Audit)); err != nil {
			return err
		}
	}
	if p.Aggregates > 0 {
		s.statements.Add(1)
		if _, err := s.pool.Exec(ctx, `DELETE FROM counter_aggregates WHERE period_start < $1`, now.Add(-p.Aggregates)); err != nil {
			return fmt.Errorf("postgres: retain aggregates: %w", err)
		}
	}
	if p.Snapshots > 0 {
		s.statements.Add(1)
		if _, err := s.pool.Exec(ctx, `DELETE FROM counter_snapshot_sets WHERE taken_at < $1`, now.Add(-p.Snapshots)); err != nil {
			return fmt.Errorf("postgres: retain snapshots: %w", err)
		}
	}
	if p.SyncBatches > 0 {
		s.statements.Add(1)
		if _, err := s.pool.Exec(ctx, `DELETE FROM counter_sync_batches WHERE applied_at < $1`, now.Add(-p.SyncBatches)); err != nil {
			return fmt.Errorf("postgres: retain sync batches: %w", err)
		}
	}
	return nil
}

func (s *Store) retainPartitioned(ctx context.Context, table, column string, cutoff time.Time) error {
	parts, err := s.partitions(ctx, table)
	if err != nil {
		return fmt.Errorf("postgres: retain %s: %w", table, err)
	}
	for name, m := range parts {
		if !m.AddDate(0, 1, 0).After(cutoff) { // whole month before cutoff
			s.statements.Add(1)
			if _, err := s.pool.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{name}.Sanitize()); err != nil {
				return fmt.Errorf("postgres: drop %s: %w", name, err)
			}
			s.parts.Delete(name)
		}
	}
	s.statements.Add(1)
	if _, err := s.pool.Exec(ctx, fmt.Sprintf("DELETE FROM %s WHERE %s < $1", pgx.Identifier{table}.Sanitize(), column), cutoff); err != nil {
		return fmt.Errorf("postgres: retain %s: %w", table, err)
	}
	return nil
}
