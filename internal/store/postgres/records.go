package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/counterd/counterd/internal/records"
)

var _ records.Store = (*Store)(nil)

const upsertRecord = `INSERT INTO named_records (space, name, value) VALUES ($1, $2, $3)
ON CONFLICT (space, name) DO UPDATE SET value = EXCLUDED.value, updated_at = now()`

// Records returns space's records in order (table named_records,
// migration 00007; the values are opaque to the store).
func (s *Store) Records(ctx context.Context, space string) ([]records.Record, error) {
	s.statements.Add(1)
	rows, err := s.pool.Query(ctx, `SELECT name, value FROM named_records WHERE space = $1 ORDER BY position, name`, space)
	if err != nil {
		return nil, fmt.Errorf("postgres: records %q: %w", space, err)
	}
	recs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (records.Record, error) {
		var r records.Record
		err := row.Scan(&r.Name, &r.Value)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: records %q: %w", space, err)
	}
	return recs, nil
}

// PutRecords adds or replaces recs in space in one transaction: a new name
// goes to the end of the order (in recs' order), a replaced one keeps its
// place.
func (s *Store) PutRecords(ctx context.Context, space string, recs []records.Record) error {
	s.statements.Add(1)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		for _, r := range recs {
			b.Queue(upsertRecord, space, r.Name, r.Value)
		}
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return fmt.Errorf("postgres: put records %q: %w", space, err)
	}
	return nil
}

// DeleteRecord removes one record and reports whether it existed.
func (s *Store) DeleteRecord(ctx context.Context, space, name string) (bool, error) {
	s.statements.Add(1)
	tag, err := s.pool.Exec(ctx, `DELETE FROM named_records WHERE space = $1 AND name = $2`, space, name)
	if err != nil {
		return false, fmt.Errorf("postgres: delete record %q/%q: %w", space, name, err)
	}
	return tag.RowsAffected() > 0, nil
}

// ReplaceRecords replaces every record of space in one transaction;
// concurrent readers see the old list or the new one.
func (s *Store) ReplaceRecords(ctx context.Context, space string, recs []records.Record) error {
	s.statements.Add(1)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM named_records WHERE space = $1`, space); err != nil {
			return err
		}
		// One statement per row, in order: each takes the next position.
		b := &pgx.Batch{}
		for _, r := range recs {
			b.Queue(upsertRecord, space, r.Name, r.Value)
		}
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return fmt.Errorf("postgres: replace records %q: %w", space, err)
	}
	return nil
}
