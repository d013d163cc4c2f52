package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// live is the SQL condition of a counter that has not expired.
const live = `(expires_at IS NULL OR expires_at > now())`

// Bucket is one time-series bucket.
type Bucket struct {
	Start time.Time
	Value int64
}

// Series returns the non-empty buckets of id with start in [from, to) at
// granularity "minute" (counter_timeseries) or "hour", "day", "month"
// (counter_aggregates), oldest first.
func (s *Store) Series(ctx context.Context, id, granularity string, from, to time.Time) ([]Bucket, error) {
	var q string
	args := []any{id, from.UTC(), to.UTC()}
	switch granularity {
	case "minute":
		q = `SELECT bucket_timestamp, value FROM counter_timeseries
			WHERE counter_id = $1 AND bucket_timestamp >= $2 AND bucket_timestamp < $3 ORDER BY bucket_timestamp`
	case "hour", "day", "month":
		q = `SELECT period_start, value FROM counter_aggregates
			WHERE counter_id = $1 AND granularity = $4 AND period_start >= $2 AND period_start < $3 ORDER BY period_start`
		args = append(args, granularity)
	default:
		return nil, fmt.Errorf("postgres: series: unknown granularity %q", granularity)
	}
	s.statements.Add(1)
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: series: %w", err)
	}
	var out []Bucket
	var b Bucket
	_, err = pgx.ForEachRow(rows, []any{&b.Start, &b.Value}, func() error {
		out = append(out, Bucket{Start: b.Start.UTC(), Value: b.Value})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: series: %w", err)
	}
	return out, nil
}

// IDs lists live counter ids in id order, limit of them starting at
// offset.
func (s *Store) IDs(ctx context.Context, offset, limit int) ([]string, error) {
	s.statements.Add(1)
	rows, err := s.pool.Query(ctx, `SELECT counter_id FROM counters WHERE `+live+`
		ORDER BY counter_id OFFSET $1 LIMIT $2`, offset, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: ids: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("postgres: ids: %w", err)
	}
	return ids, nil
}

// Count is the number of live counters.
func (s *Store) Count(ctx context.Context) (int, error) {
	var n int
	s.statements.Add(1)
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM counters WHERE `+live).Scan(&n); err != nil {
		return 0, fmt.Errorf("postgres: count: %w", err)
	}
	return n, nil
}

// Sum adds up the live counters of the given kinds whose id starts with
// prefix (sharded: the sum of their shards). overflow is set when the sum
// does not fit in an int64.
func (s *Store) Sum(ctx context.Context, prefix string, kinds []string) (sum int64, count int, overflow bool, err error) {
	var total *string
	s.statements.Add(1)
	err = s.pool.QueryRow(ctx, `SELECT (sum(c.value + COALESCE(sh.v, 0)))::text, count(*) FROM counters c
		LEFT JOIN (SELECT counter_id, sum(value) AS v FROM counter_shards GROUP BY counter_id) sh USING (counter_id)
		WHERE starts_with(c.counter_id, $1) AND c.counter_type = ANY($2::text[]) AND `+live, prefix, kinds).Scan(&total, &count)
	if err != nil {
		return 0, 0, false, fmt.Errorf("postgres: sum: %w", err)
	}
	if total == nil {
		return 0, count, false, nil
	}
	if _, err := fmt.Sscan(*total, &sum); err != nil {
		return 0, count, true, nil
	}
	return sum, count, false, nil
}

// PrefixIDs lists the live counters of kind whose id starts with prefix.
func (s *Store) PrefixIDs(ctx context.Context, prefix, kind string) ([]string, error) {
	s.statements.Add(1)
	rows, err := s.pool.Query(ctx, `SELECT counter_id FROM counters
		WHERE starts_with(counter_id, $1) AND counter_type = $2 AND `+live+` ORDER BY counter_id`, prefix, kind)
	if err != nil {
		return nil, fmt.Errorf("postgres: prefix ids: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("postgres: prefix ids: %w", err)
	}
	return ids, nil
}

// Truncate deletes every counter with its shards, fields, sketch, time
// series and aggregates (FLUSHALL), and starts a new flush epoch (lives.go):
// changes of the lives made before, handed over later by any node, are
// dropped. Snapshots, the audit log and applied batch ids are kept.
func (s *Store) Truncate(ctx context.Context) error {
	// Every counter is recorded as deleted for the region export first.
	s.statements.Add(5)
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres: truncate: %w", err)
	}
	defer tx.Rollback(context.Background())
	// The tables first, the sequence's row second, as a batch takes its
	// rows and then the sequence (no deadlock).
	if _, err := tx.Exec(ctx, `LOCK TABLE counters, counter_shards, counter_fields, counter_hll IN ACCESS EXCLUSIVE MODE`); err != nil {
		return fmt.Errorf("postgres: truncate: %w", err)
	}
	if err := noteAllRegionChanges(ctx, tx, "true", true); err != nil {
		return err
	}
	// A new flush epoch: every life made before is deleted (lives.go),
	// so changes of them that other nodes hand over later are dropped.
	if _, err := tx.Exec(ctx, `UPDATE counter_flush_epoch SET epoch = epoch + 1, flushed_at = now()`); err != nil {
		return fmt.Errorf("postgres: truncate: flush epoch: %w", err)
	}
	if _, err := tx.Exec(ctx, `TRUNCATE counters, counter_shards, counter_fields, counter_hll, counter_timeseries, counter_aggregates, counter_uniques`); err != nil {
		return fmt.Errorf("postgres: truncate: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres: truncate: %w", err)
	}
	return nil
}

// PutRollup stores spec (any JSON-encodable value) under key.
func (s *Store) PutRollup(ctx context.Context, key string, spec any) error {
	b, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("postgres: rollup: %w", err)
	}
	s.statements.Add(1)
	_, err = s.pool.Exec(ctx, `INSERT INTO counter_rollups (rollup_key, spec) VALUES ($1, $2)
		ON CONFLICT (rollup_key) DO UPDATE SET spec = EXCLUDED.spec, updated_at = now()`, key, b)
	if err != nil {
		return fmt.Errorf("postgres: rollup: %w", err)
	}
	return nil
}

// DeleteRollup removes key's spec and reports whether it existed.
func (s *Store) DeleteRollup(ctx context.Context, key string) (bool, error) {
	s.statements.Add(1)
	tag, err := s.pool.Exec(ctx, `DELETE FROM counter_rollups WHERE rollup_key = $1`, key)
	if err != nil {
		return false, fmt.Errorf("postgres: rollup: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// Rollups returns every stored spec as JSON by key.
func (s *Store) Rollups(ctx context.Context) (map[string][]byte, error) {
	s.statements.Add(1)
	rows, err := s.pool.Query(ctx, `SELECT rollup_key, spec FROM counter_rollups`)
	if err != nil {
		return nil, fmt.Errorf("postgres: rollups: %w", err)
	}
	out := map[string][]byte{}
	var k string
	var b []byte
	_, err = pgx.ForEachRow(rows, []any{&k, &b}, func() error {
		out[k] = append([]byte(nil), b...)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: rollups: %w", err)
	}
	return out, nil
}

// Rollup returns key's spec as JSON; ok is false when there is none.
func (s *Store) Rollup(ctx context.Context, key string) (spec []byte, ok bool, err error) {
	s.statements.Add(1)
	err = s.pool.QueryRow(ctx, `SELECT spec FROM counter_rollups WHERE rollup_key = $1`, key).Scan(&spec)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("postgres: rollup: %w", err)
	}
	return spec, true, nil
}

// Ping checks PostgreSQL answers (for /readyz).
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("postgres: ping: %w", err)
	}
	return nil
}
