package postgres

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// Region changes (migration 00009, docs/postgres.md "Region changes"):
// the durable tier's record of which counters changed, in commit order,
// from which a tiered region exports its state to its peer regions.
//
// Every transaction that changes counters ends with noteRegionChanges: it
// takes the next sequence number from the one row of region_change_seq
// (an UPDATE: the row stays locked until the transaction ends) and stamps
// the changed ids with it in region_changes. Transactions that change
// counters therefore commit in the order of their sequence numbers (the
// next one waits for the row until the previous one has committed and is
// visible), so a reader that pages through region_changes by (seq,
// counter_id) never skips a row committed after it read past its
// position: a later commit always has a higher sequence. The price is
// that the last statement of concurrent write-behind batches (one per node
// per flush interval) runs one at a time.

// regionChangeSeqSQL takes the next sequence number (and locks its row
// until commit).
const regionChangeSeqSQL = `UPDATE region_change_seq SET seq = seq + 1 WHERE one RETURNING seq`

// noteRegionChanges stamps ids with the transaction's sequence number;
// deleted maps an id deleted in the transaction to the version it had,
// which is added to its base. ids may repeat; none: nothing is done.
func noteRegionChanges(ctx context.Context, tx pgx.Tx, ids []string, deleted map[string]int64) error {
	if len(ids) == 0 && len(deleted) == 0 {
		return nil
	}
	all := slices.Concat(ids, nil)
	for id := range deleted {
		all = append(all, id)
	}
	slices.Sort(all)
	all = slices.Compact(all)
	bases := make([]int64, len(all))
	for i, id := range all {
		bases[i] = deleted[id]
	}
	var seq int64
	if err := tx.QueryRow(ctx, regionChangeSeqSQL).Scan(&seq); err != nil {
		return fmt.Errorf("postgres: region change sequence: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO region_changes AS r (counter_id, seq, base)
		SELECT u.id, $2, u.b FROM unnest($1::text[], $3::bigint[]) WITH ORDINALITY AS u(id, b, ord) ORDER BY u.ord
		ON CONFLICT (counter_id) DO UPDATE SET seq = EXCLUDED.seq, base = r.base + EXCLUDED.base`, all, seq, bases); err != nil {
		return fmt.Errorf("postgres: region changes: %w", err)
	}
	return nil
}

// noteAllRegionChanges stamps every counter matching where (a condition
// on counters c) with the transaction's sequence number, adding its
// version to its base when deleting (it is about to be deleted).
func noteAllRegionChanges(ctx context.Context, tx pgx.Tx, where string, deleting bool, args ...any) error {
	var seq int64
	if err := tx.QueryRow(ctx, regionChangeSeqSQL).Scan(&seq); err != nil {
		return fmt.Errorf("postgres: region change sequence: %w", err)
	}
	base := "0"
	if deleting {
		base = "c.version"
	}
	n := len(args) + 1
	if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO region_changes AS r (counter_id, seq, base)
		SELECT c.counter_id, $%d, %s FROM counters c WHERE %s ORDER BY c.counter_id
		ON CONFLICT (counter_id) DO UPDATE SET seq = EXCLUDED.seq, base = r.base + EXCLUDED.base`, n, base, where), append(args, seq)...); err != nil {
		return fmt.Errorf("postgres: region changes: %w", err)
	}
	return nil
}

// RegionCursor is a position in region_changes: every change at or
// before (Seq, ID) in (seq, counter_id) order.
type RegionCursor struct {
	Seq int64
	ID  string
}

// RegionRow is one counter as the region export reads it: its record
// (Live false: it is deleted, or expired) and its base.
type RegionRow struct {
	Record
	Live bool
	Base int64 // versions of the counter's earlier lives
	Seq  int64 // its last change's sequence number (RegionExportAll: 0)
}

const regionRowSQL = `SELECT r.counter_id, r.seq, r.base, c.counter_type, c.value, c.version, c.updated_at, c.expires_at, c.float_value,
		(SELECT COALESCE(sum(s.value), 0)::bigint FROM counter_shards s WHERE s.counter_id = r.counter_id), h.sketch
	FROM %s`

// RegionChanges returns the counters changed after cursor, in (seq,
// counter_id) order, at most limit, read in one snapshot, and whether more
// follow. A row that is deleted comes back with Live false.
func (s *Store) RegionChanges(ctx context.Context, after RegionCursor, limit int) (rows []RegionRow, more bool, err error) {
	err = s.regionRead(ctx, func(tx pgx.Tx) error {
		s.statements.Add(1)
		q := fmt.Sprintf(regionRowSQL, `region_changes r LEFT JOIN counters c USING (counter_id) LEFT JOIN counter_hll h USING (counter_id)
			WHERE (r.seq, r.counter_id) > ($1, $2) ORDER BY r.seq, r.counter_id LIMIT $3`)
		rows, err = s.scanRegionRows(ctx, tx, q, after.Seq, after.ID, limit+1)
		return err
	})
	if len(rows) > limit {
		rows, more = rows[:limit], true
	}
	return rows, more, err
}

// RegionExportAll calls fn with every live counter (with its base), in
// counter_id order, read in one snapshot.
func (s *Store) RegionExportAll(ctx context.Context, fn func(RegionRow) error) error {
	const page = 2000
	return s.regionRead(ctx, func(tx pgx.Tx) error {
		after := ""
		for {
			s.statements.Add(1)
			q := fmt.Sprintf(regionRowSQL, `counters c LEFT JOIN region_changes r0 USING (counter_id) LEFT JOIN counter_hll h USING (counter_id),
				LATERAL (SELECT c.counter_id, 0::bigint AS seq, COALESCE(r0.base, 0)::bigint AS base) r
				WHERE c.counter_id > $1 ORDER BY c.counter_id LIMIT $2`)
			rows, err := s.scanRegionRows(ctx, tx, q, after, page)
			if err != nil {
				return err
			}
			for _, r := range rows {
				if !r.Live {
					continue
				}
				if err := fn(r); err != nil {
					return err
				}
			}
			if len(rows) < page {
				return nil
			}
			after = rows[len(rows)-1].ID
		}
	})
}

// RegionExport reads one counter as RegionExportAll does; ok is false
// when it is not live.
func (s *Store) RegionExport(ctx context.Context, id string) (row RegionRow, ok bool, err error) {
	err = s.regionRead(ctx, func(tx pgx.Tx) error {
		s.statements.Add(1)
		q := fmt.Sprintf(regionRowSQL, `counters c LEFT JOIN region_changes r0 USING (counter_id) LEFT JOIN counter_hll h USING (counter_id),
			LATERAL (SELECT c.counter_id, 0::bigint AS seq, COALESCE(r0.base, 0)::bigint AS base) r
			WHERE c.counter_id = $1`)
		rows, err := s.scanRegionRows(ctx, tx, q, id)
		if err == nil && len(rows) == 1 && rows[0].Live {
			row, ok = rows[0], true
		}
		return err
	})
	return row, ok, err
}

// regionRead runs fn in a read-only repeatable-read transaction (one
// snapshot for the rows and their hash fields).
func (s *Store) regionRead(ctx context.Context, fn func(pgx.Tx) error) error {
	s.statements.Add(1)
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("postgres: region export: %w", err)
	}
	defer tx.Rollback(context.Background())
	if err := fn(tx); err != nil {
		return fmt.Errorf("postgres: region export: %w", err)
	}
	return nil
}

// scanRegionRows runs q (regionRowSQL) and loads the fields of the live
// hash counters among the rows.
func (s *Store) scanRegionRows(ctx context.Context, tx pgx.Tx, q string, args ...any) ([]RegionRow, error) {
	rs, err := tx.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var out []RegionRow
	var hashes []string
	for rs.Next() {
		var r RegionRow
		var kind, fl *string
		var value, version *int64
		var updated, exp *time.Time
		var shards int64
		if err := rs.Scan(&r.ID, &r.Seq, &r.Base, &kind, &value, &version, &updated, &exp, &fl, &shards, &r.Sketch); err != nil {
			rs.Close()
			return nil, err
		}
		if kind != nil && (exp == nil || exp.After(now)) {
			r.Live = true
			r.Kind, r.Value, r.Version, r.UpdatedAt = *kind, *value, *version, *updated
			if exp != nil {
				r.ExpiresAt = *exp
			}
			if fl != nil {
				r.Float = *fl
			}
			if r.Kind == KindSharded {
				r.Value += shards
			}
			if r.Kind == KindHash {
				hashes = append(hashes, r.ID)
			}
		}
		out = append(out, r)
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return nil, err
	}
	if len(hashes) == 0 {
		return out, nil
	}
	s.statements.Add(1)
	fr, err := tx.Query(ctx, `SELECT counter_id, field, value FROM counter_fields WHERE counter_id = ANY($1::text[])`, hashes)
	if err != nil {
		return nil, err
	}
	fields := map[string]map[string]int64{}
	var id, f string
	var v int64
	if _, err := pgx.ForEachRow(fr, []any{&id, &f, &v}, func() error {
		if fields[id] == nil {
			fields[id] = map[string]int64{}
		}
		fields[id][f] = v
		return nil
	}); err != nil {
		return nil, err
	}
	for i := range out {
		if out[i].Live && out[i].Kind == KindHash {
			out[i].Fields = fields[out[i].ID]
			if out[i].Fields == nil {
				out[i].Fields = map[string]int64{}
			}
		}
	}
	return out, nil
}
