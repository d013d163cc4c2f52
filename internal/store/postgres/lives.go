package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Lives order a delete against the deltas around it (migration 00011,
// docs/redis-tier.md "Deletes and lives"). The hot tier numbers each life
// of a counter: 1, then one more every time the counter is created again
// after a delete. A Delta carries the life it was made in and a delete
// the life it ended (Batch.DeadLives); counters.life is the life a row
// holds and counter_deaths.dead_life the highest life deleted. A delta
// applies only when its life is above dead_life and at least the row's
// (a higher life first removes the row: its life was deleted); a delete
// of life L records L and removes the row only when the row's life is at
// most L. So whichever node's batch commits first, PostgreSQL ends as
// Redis did. Life 0 is a change of no known life (written before lives
// existed, or replayed from a journal entry): it applies to the row as
// before.

// DeathRetention is how long counter_deaths keeps a delete's life: a
// delta of a deleted life arrives long before (a flush, a journal
// replay).
const DeathRetention = 7 * 24 * time.Hour

// applyLives decides, in the batch's transaction, which of deltas apply
// (keep) and which counters lose their rows (wipe: the deletes whose life
// is not below the row's, and the rows a delta of a higher life
// replaces), records the deletes' lives in counter_deaths and returns the
// life each counter written ends at (set after the upserts, setLives).
func applyLives(ctx context.Context, tx pgx.Tx, exec execFunc, b *Batch, deltas []Delta, now time.Time) (keep []Delta, wipe []string, lives map[string]int64, err error) {
	var ids []string
	for _, d := range deltas {
		if d.Life > 0 {
			ids = append(ids, d.CounterID)
		}
	}
	for id, l := range b.DeadLives {
		if l > 0 {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return deltas, b.Deletes, nil, nil
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	rowLife := map[string]int64{}
	rows, err := tx.Query(ctx, `SELECT counter_id, life FROM counters WHERE counter_id = ANY($1::text[]) ORDER BY counter_id FOR UPDATE`, ids)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("postgres: lives: %w", err)
	}
	var id string
	var l int64
	if _, err := pgx.ForEachRow(rows, []any{&id, &l}, func() error { rowLife[id] = l; return nil }); err != nil {
		return nil, nil, nil, fmt.Errorf("postgres: lives: %w", err)
	}
	dead := map[string]int64{}
	rows, err = tx.Query(ctx, `SELECT counter_id, dead_life FROM counter_deaths WHERE counter_id = ANY($1::text[])`, ids)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("postgres: deaths: %w", err)
	}
	if _, err := pgx.ForEachRow(rows, []any{&id, &l}, func() error { dead[id] = l; return nil }); err != nil {
		return nil, nil, nil, fmt.Errorf("postgres: deaths: %w", err)
	}

	// Deletes: a delete of an older life than the row's is of a life
	// already replaced; it only records its life.
	var deaths []string
	for _, id := range b.Deletes {
		l := int64(min(b.DeadLives[id], 1<<63-1))
		if l == 0 {
			wipe = append(wipe, id)
			delete(rowLife, id)
			continue
		}
		dead[id] = max(dead[id], l)
		deaths = append(deaths, id)
		if rl, ok := rowLife[id]; !ok || rl <= l {
			wipe = append(wipe, id)
			delete(rowLife, id)
		}
	}
	// Deltas: only the highest life of a counter in the batch counts (a
	// higher life exists only once the lower one was deleted).
	top := map[string]int64{}
	for _, d := range deltas {
		top[d.CounterID] = max(top[d.CounterID], int64(min(d.Life, 1<<63-1)))
	}
	lives = map[string]int64{}
	keep = deltas[:0:0]
	for _, d := range deltas {
		l := int64(min(d.Life, 1<<63-1))
		if l == 0 {
			keep = append(keep, d)
			continue
		}
		rl, row := rowLife[d.CounterID]
		if l <= dead[d.CounterID] || l < top[d.CounterID] || (row && l < rl) {
			continue
		}
		if row && l > rl { // the row's life was deleted: this one replaces it
			wipe = append(wipe, d.CounterID)
			delete(rowLife, d.CounterID)
		}
		lives[d.CounterID] = l
		keep = append(keep, d)
	}
	if len(deaths) > 0 {
		slices.Sort(deaths)
		deaths = slices.Compact(deaths)
		if _, err := exec(`INSERT INTO counter_deaths AS d (counter_id, dead_life, deleted_at)
			SELECT u.id, u.l, $3 FROM unnest($1::text[], $2::bigint[]) AS u(id, l)
			ON CONFLICT (counter_id) DO UPDATE SET dead_life = GREATEST(d.dead_life, EXCLUDED.dead_life), deleted_at = EXCLUDED.deleted_at`,
			deaths, column(deaths, func(id string) int64 { return dead[id] }), now); err != nil {
			return nil, nil, nil, fmt.Errorf("postgres: record deaths: %w", err)
		}
	}
	slices.Sort(wipe)
	return keep, slices.Compact(wipe), lives, nil
}

// setLives sets counters.life of the rows the batch's deltas wrote.
func setLives(exec execFunc, lives map[string]int64) error {
	return upsertSorted(exec, "lives", `UPDATE counters c SET life = u.l FROM unnest($1::text[], $2::bigint[]) AS u(id, l)
		WHERE c.counter_id = u.id AND c.life <> u.l`, lives, strings.Compare, func(ids []string) []any {
		return []any{ids, values(ids, lives)}
	})
}

// DeadLife returns the highest life of id deleted (0: none recorded): a
// counter created again starts the life after it.
func (s *Store) DeadLife(ctx context.Context, id string) (uint64, error) {
	s.statements.Add(1)
	var l int64
	err := s.pool.QueryRow(ctx, `SELECT dead_life FROM counter_deaths WHERE counter_id = $1`, id).Scan(&l)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("postgres: dead life %q: %w", id, err)
	}
	return uint64(l), nil
}

// PurgeDeaths deletes the deletes' lives older than DeathRetention.
func (s *Store) PurgeDeaths(ctx context.Context, now time.Time) (int64, error) {
	s.statements.Add(1)
	tag, err := s.pool.Exec(ctx, `DELETE FROM counter_deaths WHERE deleted_at <= $1`, now.Add(-DeathRetention).UTC())
	return tag.RowsAffected(), err
}
