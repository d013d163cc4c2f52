package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Record is a counter as stored in PostgreSQL.
type Record struct {
	ID        string
	Kind      string
	Value     int64 // plain: the value; sharded: sum of shards; hash: sum of fields
	Version   int64
	UpdatedAt time.Time
	Shards    []int64          // sharded: value of each shard (index = shard id)
	Fields    map[string]int64 // hash: the fields
	Sketch    []byte           // hll: the stored sketch
	Float     string           // float: the value's decimal text
	ExpiresAt time.Time        // zero: no expiry
	Life      uint64           // the counter's life (lives.go; Load only)
}

// Load reads one counter (read-through). ok is false if it does not exist.
func (s *Store) Load(ctx context.Context, id string) (rec Record, ok bool, err error) {
	var shardCount int32
	var exp *time.Time
	s.statements.Add(1)
	var fl *string
	var life int64
	err = s.pool.QueryRow(ctx, `SELECT counter_type, value, version, updated_at, shard_count, expires_at, float_value, life FROM counters WHERE counter_id = $1`, id).
		Scan(&rec.Kind, &rec.Value, &rec.Version, &rec.UpdatedAt, &shardCount, &exp, &fl, &life)
	rec.Life = uint64(max(life, 0))
	if fl != nil {
		rec.Float = *fl
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, false, nil
	}
	if exp != nil {
		if !exp.After(time.Now()) {
			return Record{}, false, nil // expired: reads as missing
		}
		rec.ExpiresAt = *exp
	}
	if err != nil {
		return Record{}, false, fmt.Errorf("postgres: load %q: %w", id, err)
	}
	rec.ID = id
	switch rec.Kind {
	case KindSharded:
		s.statements.Add(1)
		rows, err := s.pool.Query(ctx, `SELECT shard_id, value FROM counter_shards WHERE counter_id = $1 ORDER BY shard_id`, id)
		if err != nil {
			return Record{}, false, fmt.Errorf("postgres: load shards %q: %w", id, err)
		}
		rec.Shards = make([]int64, shardCount)
		var sum int64
		var sh int32
		var v int64
		_, err = pgx.ForEachRow(rows, []any{&sh, &v}, func() error {
			for int(sh) >= len(rec.Shards) {
				rec.Shards = append(rec.Shards, 0)
			}
			rec.Shards[sh] = v
			sum += v
			return nil
		})
		if err != nil {
			return Record{}, false, fmt.Errorf("postgres: load shards %q: %w", id, err)
		}
		rec.Value += sum
	case KindHash:
		s.statements.Add(1)
		rows, err := s.pool.Query(ctx, `SELECT field, value FROM counter_fields WHERE counter_id = $1`, id)
		if err != nil {
			return Record{}, false, fmt.Errorf("postgres: load fields %q: %w", id, err)
		}
		rec.Fields = map[string]int64{}
		var f string
		var v int64
		_, err = pgx.ForEachRow(rows, []any{&f, &v}, func() error {
			rec.Fields[f] = v
			rec.Value += v
			return nil
		})
		if err != nil {
			return Record{}, false, fmt.Errorf("postgres: load fields %q: %w", id, err)
		}
	case KindHLL:
		s.statements.Add(1)
		err := s.pool.QueryRow(ctx, `SELECT sketch FROM counter_hll WHERE counter_id = $1`, id).Scan(&rec.Sketch)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return Record{}, false, fmt.Errorf("postgres: load sketch %q: %w", id, err)
		}
	}
	return rec, true, nil
}

// Snapshot copies the value of every counter (sharded: the sum of its
// shards; hash: the sum of its fields) into counter_snapshots under a new
// snapshot id, in one transaction (a consistent cut).
func (s *Store) Snapshot(ctx context.Context) (snapshotID int64, err error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	s.statements.Add(1)
	if err != nil {
		return 0, fmt.Errorf("postgres: snapshot: %w", err)
	}
	defer tx.Rollback(context.Background())
	var taken time.Time
	s.statements.Add(1)
	if err := tx.QueryRow(ctx, `INSERT INTO counter_snapshot_sets (taken_at) VALUES (clock_timestamp()) RETURNING snapshot_id, taken_at`).
		Scan(&snapshotID, &taken); err != nil {
		return 0, fmt.Errorf("postgres: snapshot: %w", err)
	}
	s.statements.Add(1)
	tag, err := tx.Exec(ctx, `INSERT INTO counter_snapshots (snapshot_id, counter_id, value, version, snapshot_timestamp)
		SELECT $1, c.counter_id, c.value + COALESCE(sh.v, 0) + COALESCE(f.v, 0), c.version, $2
		FROM counters c
		LEFT JOIN (SELECT counter_id, sum(value)::bigint AS v FROM counter_shards GROUP BY counter_id) sh USING (counter_id)
		LEFT JOIN (SELECT counter_id, sum(value)::bigint AS v FROM counter_fields GROUP BY counter_id) f USING (counter_id)`,
		snapshotID, taken)
	if err != nil {
		return 0, fmt.Errorf("postgres: snapshot: %w", err)
	}
	s.statements.Add(1)
	if _, err := tx.Exec(ctx, `UPDATE counter_snapshot_sets SET counters = $2 WHERE snapshot_id = $1`, snapshotID, tag.RowsAffected()); err != nil {
		return 0, fmt.Errorf("postgres: snapshot: %w", err)
	}
	s.statements.Add(1)
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("postgres: snapshot: %w", err)
	}
	return snapshotID, nil
}

// ValueAt is a point-in-time read: the value id had in the latest snapshot
// taken at or before t. ok is false if no snapshot was taken by t; a
// counter absent from that snapshot reads as 0 (a missing counter is 0).
func (s *Store) ValueAt(ctx context.Context, id string, t time.Time) (value int64, ok bool, err error) {
	var sid int64
	s.statements.Add(1)
	err = s.pool.QueryRow(ctx, `SELECT snapshot_id FROM counter_snapshot_sets WHERE taken_at <= $1
		ORDER BY taken_at DESC, snapshot_id DESC LIMIT 1`, t).Scan(&sid)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("postgres: value at: %w", err)
	}
	s.statements.Add(1)
	err = s.pool.QueryRow(ctx, `SELECT value FROM counter_snapshots WHERE snapshot_id = $1 AND counter_id = $2`, sid, id).Scan(&value)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, true, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("postgres: value at: %w", err)
	}
	return value, true, nil
}

// RestoreSnapshot sets counters back to their values in snapshot id
// (point-in-time restore), in one transaction: plain counters get the
// snapshot value (version + 1); a sharded counter's shards are replaced by
// one shard 0 holding the snapshot total; plain and sharded counters
// created after the snapshot are deleted. Hash and hll counters are left
// alone (a snapshot holds only totals). It returns the number of counters
// restored. Restoring does not touch time series, aggregates or the audit
// log.
func (s *Store) RestoreSnapshot(ctx context.Context, id int64) (restored int64, err error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{})
	s.statements.Add(1)
	if err != nil {
		return 0, fmt.Errorf("postgres: restore: %w", err)
	}
	defer tx.Rollback(context.Background())
	var n int64
	s.statements.Add(1)
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM counter_snapshot_sets WHERE snapshot_id = $1`, id).Scan(&n); err != nil {
		return 0, fmt.Errorf("postgres: restore: %w", err)
	}
	if n == 0 {
		return 0, fmt.Errorf("postgres: restore: no snapshot %d", id)
	}
	// The region export: the counters deleted below, then those restored.
	// Their rows are locked first, in id order, then the sequence's row, as
	// a write-behind batch takes them (no deadlock).
	s.statements.Add(5)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM counters WHERE counter_type NOT IN ('hash', 'hll') ORDER BY counter_id FOR UPDATE`); err != nil {
		return 0, fmt.Errorf("postgres: restore: %w", err)
	}
	if err := noteAllRegionChanges(ctx, tx, `c.counter_type NOT IN ('hash', 'hll')
			AND NOT EXISTS (SELECT 1 FROM counter_snapshots s WHERE s.snapshot_id = $1 AND s.counter_id = c.counter_id)`, true, id); err != nil {
		return 0, err
	}
	if err := noteAllRegionChanges(ctx, tx, `c.counter_type NOT IN ('hash', 'hll')
			AND EXISTS (SELECT 1 FROM counter_snapshots s WHERE s.snapshot_id = $1 AND s.counter_id = c.counter_id)`, false, id); err != nil {
		return 0, err
	}
	stmts := []string{
		// counters created after the snapshot
		`DELETE FROM counters c WHERE c.counter_type NOT IN ('hash', 'hll')
			AND NOT EXISTS (SELECT 1 FROM counter_snapshots s WHERE s.snapshot_id = $1 AND s.counter_id = c.counter_id)`,
		`UPDATE counters c SET value = s.value, version = c.version + 1, updated_at = now()
			FROM counter_snapshots s WHERE s.snapshot_id = $1 AND s.counter_id = c.counter_id AND c.counter_type NOT IN ('sharded', 'hash', 'hll')`,
		`DELETE FROM counter_shards sh USING counter_snapshots s WHERE s.snapshot_id = $1 AND s.counter_id = sh.counter_id`,
		`INSERT INTO counter_shards (counter_id, shard_id, value)
			SELECT s.counter_id, 0, s.value FROM counter_snapshots s JOIN counters c USING (counter_id)
			WHERE s.snapshot_id = $1 AND c.counter_type = 'sharded'`,
	}
	for i, q := range stmts {
		s.statements.Add(1)
		tag, err := tx.Exec(ctx, q, id)
		if err != nil {
			return 0, fmt.Errorf("postgres: restore: %w", err)
		}
		if i == 1 || i == 3 {
			restored += tag.RowsAffected()
		}
	}
	s.statements.Add(1)
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("postgres: restore: %w", err)
	}
	return restored, nil
}
