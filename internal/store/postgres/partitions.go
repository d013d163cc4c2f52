package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// partitionedTables are the tables partitioned by month.
var partitionedTables = []string{"counter_timeseries", "counter_audit_log"}

// partitionName is table_pYYYYMM for the month starting at m.
func partitionName(table string, m time.Time) string {
	return fmt.Sprintf("%s_p%04d%02d", table, m.Year(), int(m.Month()))
}

// parsePartition returns the month start encoded in a partition's name.
func parsePartition(table, name string) (time.Time, bool) {
	suffix, ok := strings.CutPrefix(name, table+"_p")
	if !ok || len(suffix) != 6 {
		return time.Time{}, false
	}
	t, err := time.Parse("200601", suffix)
	if err != nil {
		return time.Time{}, false
	}
	return t.UTC(), true
}

// EnsurePartitions creates the monthly partitions of every partitioned
// table for the month containing now and monthsAhead following months. It
// is idempotent and safe to run concurrently from several nodes.
func (s *Store) EnsurePartitions(ctx context.Context, now time.Time, monthsAhead int) error {
	m := monthStart(now)
	for i := 0; i <= monthsAhead; i++ {
		for _, table := range partitionedTables {
			if err := s.ensurePartition(ctx, table, m.AddDate(0, i, 0)); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *Store) ensurePartition(ctx context.Context, table string, m time.Time) error {
	name := partitionName(table, m)
	if _, ok := s.parts.Load(name); ok {
		return nil
	}
	sql := fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')`,
		pgx.Identifier{name}.Sanitize(), pgx.Identifier{table}.Sanitize(),
		m.Format("2006-01-02 15:04:05Z07:00"), m.AddDate(0, 1, 0).Format("2006-01-02 15:04:05Z07:00"))
	s.statements.Add(1)
	if _, err := s.pool.Exec(ctx, sql); err != nil {
		// Two nodes creating the same partition at once: the loser gets a
		// duplicate (catalog) error although the partition now exists.
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || (pgErr.Code != "42P07" && pgErr.Code != "23505") {
			return fmt.Errorf("postgres: create partition %s: %w", name, err)
		}
	}
	s.parts.Store(name, struct{}{})
	return nil
}

// partitions lists the partitions of table with the month each covers.
func (s *Store) partitions(ctx context.Context, table string) (map[string]time.Time, error) {
	s.statements.Add(1)
	rows, err := s.pool.Query(ctx, `SELECT c.relname FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = $1::regclass`, table)
	if err != nil {
		return nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	out := make(map[string]time.Time, len(names))
	for _, n := range names {
		if m, ok := parsePartition(table, n); ok {
			out[n] = m
		}
	}
	return out, nil
}
