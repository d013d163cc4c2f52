package postgres

import (
	"cmp"
	"context"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"
)

// SketchID names one unique-count sketch in counter_uniques (tiered mode's
// Uniques): counter, precision, unit ('h' or 'd'), level (0: one unit, k:
// the aligned block of 2^k units) and index.
type SketchID struct {
	ID        string
	Precision uint8
	Unit      byte
	Level     int
	Index     int64
}

func compareSketchIDs(a, b SketchID) int {
	return cmp.Or(cmp.Compare(a.ID, b.ID), cmp.Compare(a.Precision, b.Precision), cmp.Compare(a.Unit, b.Unit),
		cmp.Compare(a.Level, b.Level), cmp.Compare(a.Index, b.Index))
}

// sketchArgs returns ids as the five arrays the unnest queries take.
func sketchArgs(ids []SketchID) []any {
	cs, ps, us, ls, xs := make([]string, len(ids)), make([]int16, len(ids)), make([]string, len(ids)), make([]int16, len(ids)), make([]int64, len(ids))
	for i, k := range ids {
		cs[i], ps[i], us[i], ls[i], xs[i] = k.ID, int16(k.Precision), string(k.Unit), int16(k.Level), k.Index
	}
	return []any{cs, ps, us, ls, xs}
}

const sketchKeysQuery = `SELECT u.counter_id, u.precision, u.unit, u.level, u.idx, u.sketch FROM counter_uniques u
	JOIN unnest($1::text[], $2::int2[], $3::text[], $4::int2[], $5::int8[]) AS k(c, p, un, l, x)
	ON u.counter_id = k.c AND u.precision = k.p AND u.unit = k.un AND u.level = k.l AND u.idx = k.x`

type querier interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}

// querySketches runs sql (sketchKeysQuery, maybe with a suffix) on ids.
func querySketches(ctx context.Context, db querier, sql string, ids []SketchID) (map[SketchID][]byte, error) {
	rows, err := db.Query(ctx, sql, sketchArgs(ids)...)
	if err != nil {
		return nil, err
	}
	out := make(map[SketchID][]byte, len(ids))
	var k SketchID
	var p, l int16
	var unit string
	var b []byte
	_, err = pgx.ForEachRow(rows, []any{&k.ID, &p, &unit, &l, &k.Index, &b}, func() error {
		k.Precision, k.Level = uint8(p), int(l)
		if unit != "" {
			k.Unit = unit[0]
		}
		out[k] = append([]byte(nil), b...)
		return nil
	})
	return out, err
}

// Sketches returns the stored sketches of ids (absent ones are missing
// from the map).
func (s *Store) Sketches(ctx context.Context, ids []SketchID) (map[SketchID][]byte, error) {
	if len(ids) == 0 {
		return map[SketchID][]byte{}, nil
	}
	s.statements.Add(1)
	out, err := querySketches(ctx, s.pool, sketchKeysQuery, ids)
	if err != nil {
		return nil, fmt.Errorf("postgres: sketches: %w", err)
	}
	return out, nil
}

// MergeSketches merges add[k] into the stored sketch k for every k, in one
// transaction: merge(old, add) returns the new encoding (old is nil when
// none is stored). Rows are locked in key order, so concurrent merges of
// several nodes neither deadlock nor lose registers.
func (s *Store) MergeSketches(ctx context.Context, add map[SketchID][]byte, merge func(old, add []byte) ([]byte, error)) error {
	if len(add) == 0 {
		return nil
	}
	ids := make([]SketchID, 0, len(add))
	for k := range add {
		ids = append(ids, k)
	}
	sort.Slice(ids, func(i, j int) bool { return compareSketchIDs(ids[i], ids[j]) < 0 })
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		s.statements.Add(2) // BEGIN, COMMIT
		// Lock what exists, update it, and insert what does not; a row
		// another node inserted meanwhile fails the transaction, which the
		// caller retries.
		s.statements.Add(1)
		old, err := querySketches(ctx, tx, sketchKeysQuery+` ORDER BY 1, 2, 3, 4, 5 FOR UPDATE OF u`, ids)
		if err != nil {
			return err
		}
		batch := &pgx.Batch{}
		for _, k := range ids {
			enc, err := merge(old[k], add[k])
			if err != nil {
				return fmt.Errorf("sketch %v: %w", k, err)
			}
			q := `UPDATE counter_uniques SET sketch = $6, updated_at = now()
				WHERE counter_id = $1 AND precision = $2 AND unit = $3 AND level = $4 AND idx = $5`
			if _, ok := old[k]; !ok {
				q = `INSERT INTO counter_uniques (counter_id, precision, unit, level, idx, sketch)
					VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`
			}
			batch.Queue(q, k.ID, int16(k.Precision), string(k.Unit), int16(k.Level), k.Index, enc)
		}
		s.statements.Add(uint64(len(ids)))
		br := tx.SendBatch(ctx, batch)
		for _, k := range ids {
			tag, err := br.Exec()
			if err == nil && tag.RowsAffected() != 1 {
				err = fmt.Errorf("sketch %v written concurrently; retry", k)
			}
			if err != nil {
				_ = br.Close()
				return err
			}
		}
		return br.Close()
	})
	if err != nil {
		return fmt.Errorf("postgres: merge sketches: %w", err)
	}
	return nil
}

// DeleteSketches removes every sketch of id.
func (s *Store) DeleteSketches(ctx context.Context, id string) error {
	s.statements.Add(1)
	if _, err := s.pool.Exec(ctx, `DELETE FROM counter_uniques WHERE counter_id = $1`, id); err != nil {
		return fmt.Errorf("postgres: delete sketches: %w", err)
	}
	return nil
}
