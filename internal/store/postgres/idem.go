package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// IdemRecord is an idempotency record written behind with the batch that
// holds its request's deltas (table idempotency_records, migration
// 00008). Record is opaque to the store (internal/idem's binary form).
type IdemRecord struct {
	Key     string
	Record  []byte
	Created time.Time
	Expires time.Time // not read, and purged, from then on
}

// applyIdem inserts the batch's records, sorted by key (rows locked in
// key order, so concurrent batches cannot deadlock). A key that already
// holds an unexpired record keeps it: the first record of a key wins.
func applyIdem(exec execFunc, batch string, recs []IdemRecord) error {
	if len(recs) == 0 {
		return nil
	}
	byKey := make(map[string]IdemRecord, len(recs))
	for _, r := range recs {
		if _, dup := byKey[r.Key]; !dup { // the first of a batch wins, as across batches
			byKey[r.Key] = r
		}
	}
	return upsertSorted(exec, "idempotency records", `INSERT INTO idempotency_records AS r (idem_key, record, created_at, expires_at, batch_id)
			SELECT u.k, u.rec, u.c, u.e, $5 FROM unnest($1::text[], $2::bytea[], $3::timestamptz[], $4::timestamptz[]) WITH ORDINALITY AS u(k, rec, c, e, ord)
			ORDER BY u.ord
			ON CONFLICT (idem_key) DO UPDATE SET record = EXCLUDED.record, created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at, batch_id = EXCLUDED.batch_id
			WHERE r.expires_at <= EXCLUDED.created_at`,
		byKey, strings.Compare, func(keys []string) []any {
			return []any{keys, column(keys, func(k string) []byte { return byKey[k].Record }),
				column(keys, func(k string) time.Time { return byKey[k].Created.UTC() }),
				column(keys, func(k string) time.Time { return byKey[k].Expires.UTC() }), batch}
		})
}

// IdemRecord returns key's record unless it expired by now; found is false
// when there is none.
func (s *Store) IdemRecord(ctx context.Context, key string, now time.Time) (rec []byte, found bool, err error) {
	s.statements.Add(1)
	err = s.pool.QueryRow(ctx, `SELECT record FROM idempotency_records WHERE idem_key = $1 AND expires_at > $2`, key, now.UTC()).Scan(&rec)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("postgres: idempotency record: %w", err)
	}
	return rec, true, nil
}

// PurgeIdem deletes the idempotency records expired by now (the
// maintenance loop does it every MaintenanceInterval).
func (s *Store) PurgeIdem(ctx context.Context, now time.Time) (int64, error) {
	s.statements.Add(1)
	tag, err := s.pool.Exec(ctx, `DELETE FROM idempotency_records WHERE expires_at <= $1`, now.UTC())
	if err != nil {
		return 0, fmt.Errorf("postgres: purge idempotency records: %w", err)
	}
	return tag.RowsAffected(), nil
}

// LastIdemExpiry is when the last idempotency record expires (zero: there
// is none).
func (s *Store) LastIdemExpiry(ctx context.Context) (time.Time, error) {
	s.statements.Add(1)
	var last *time.Time
	if err := s.pool.QueryRow(ctx, `SELECT max(expires_at) FROM idempotency_records`).Scan(&last); err != nil {
		return time.Time{}, fmt.Errorf("postgres: last idempotency record: %w", err)
	}
	if last == nil {
		return time.Time{}, nil
	}
	return *last, nil
}

// MarkSlot records that the hot tier's idempotency marker of slot was set
// and reports whether it had been before (table idempotency_slots).
func (s *Store) MarkSlot(ctx context.Context, slot int) (before bool, err error) {
	s.statements.Add(1)
	tag, err := s.pool.Exec(ctx, `INSERT INTO idempotency_slots (slot) VALUES ($1) ON CONFLICT DO NOTHING`, slot)
	if err != nil {
		return false, fmt.Errorf("postgres: mark slot: %w", err)
	}
	return tag.RowsAffected() == 0, nil
}

// IdemKeys returns which of keys hold a record that has not expired by
// now (the tiered store's dedupe marks: one record per counter and event
// id, written behind with the counter's delta).
func (s *Store) IdemKeys(ctx context.Context, keys []string, now time.Time) (map[string]bool, error) {
	s.statements.Add(1)
	rows, err := s.pool.Query(ctx, `SELECT idem_key FROM idempotency_records WHERE idem_key = ANY($1::text[]) AND expires_at > $2`, keys, now.UTC())
	if err != nil {
		return nil, fmt.Errorf("postgres: idempotency records: %w", err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("postgres: idempotency records: %w", err)
	}
	m := make(map[string]bool, len(found))
	for _, k := range found {
		m[k] = true
	}
	return m, nil
}
