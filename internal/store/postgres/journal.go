package postgres

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// JournalRetention is how long a journaled write's id is kept in
// journal_writes (purged by the maintenance loop after that): a journal
// entry replayed later than that would apply again.
const JournalRetention = 7 * 24 * time.Hour

// JournalWrite is one write of the hot tier's journal (tiered mode): its
// deltas, versions and idempotency records apply in the batch's
// transaction only if its ID is not yet in journal_writes, and the ID is
// recorded there in the same transaction, so a write handed over twice
// (by its owner's batch and by a replay of its journal entry) applies
// once.
type JournalWrite struct {
	ID  string
	Ref string // the caller's (where its journal entry is); not stored
	// Gen is not 0 for the coalesced journal's write of one generation
	// (AggregatorOptions.JournalID): its Deltas are the generation's
	// sums.
	Gen uint64
	// Trim are deltas of the generation dropped before its commit (a
	// delete of their counter): not applied, their journal fields are
	// deleted with the others' (the caller's).
	Trim     []Delta
	Deltas   []Delta
	Versions []Version
	Idem     []IdemRecord
}

// claimJournal records the ids of ws in journal_writes (sorted, so
// concurrent batches lock them in one order) and returns the writes whose
// id was not there yet. A batch replaying a write another transaction is
// inserting waits for it to end.
func claimJournal(ctx context.Context, tx pgx.Tx, batch string, now time.Time, ws []JournalWrite) ([]JournalWrite, error) {
	if len(ws) == 0 {
		return nil, nil
	}
	ids := make([]string, 0, len(ws))
	for _, w := range ws {
		ids = append(ids, w.ID)
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	rows, err := tx.Query(ctx, `INSERT INTO journal_writes (write_id, applied_at, batch_id)
		SELECT u.id, $2, $3 FROM unnest($1::text[]) WITH ORDINALITY AS u(id, ord) ORDER BY u.ord
		ON CONFLICT (write_id) DO NOTHING RETURNING write_id`, ids, now, batch)
	if err != nil {
		return nil, fmt.Errorf("postgres: journal writes: %w", err)
	}
	fresh, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("postgres: journal writes: %w", err)
	}
	isNew := make(map[string]bool, len(fresh))
	for _, id := range fresh {
		isNew[id] = true
	}
	out := make([]JournalWrite, 0, len(fresh))
	for _, w := range ws {
		if isNew[w.ID] {
			out = append(out, w)
			delete(isNew, w.ID) // a write listed twice applies once
		}
	}
	return out, nil
}

// JournalApplied reports which of ids are in journal_writes (tests,
// diagnostics).
func (s *Store) JournalApplied(ctx context.Context, ids []string) (map[string]bool, error) {
	s.statements.Add(1)
	rows, err := s.pool.Query(ctx, `SELECT write_id FROM journal_writes WHERE write_id = ANY($1::text[])`, ids)
	if err != nil {
		return nil, err
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	m := make(map[string]bool, len(got))
	for _, id := range got {
		m[id] = true
	}
	return m, nil
}

// PurgeJournal deletes the journaled write ids older than
// JournalRetention.
func (s *Store) PurgeJournal(ctx context.Context, now time.Time) (int64, error) {
	s.statements.Add(1)
	tag, err := s.pool.Exec(ctx, `DELETE FROM journal_writes WHERE applied_at <= $1`, now.Add(-JournalRetention).UTC())
	return tag.RowsAffected(), err
}
