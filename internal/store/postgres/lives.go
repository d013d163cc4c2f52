package postgres

import (
	"context"
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
// Redis did. Life 0 is a change of no known life (written, or journaled,
// before lives existed): it applies to the row as before.

// The flush epoch (migration 00012) orders a FLUSHALL against the
// changes made before it that reach PostgreSQL after it (another node's
// write-behind, a journal replay): Truncate raises counter_flush_epoch's
// epoch, and every life of the epoch E is above LifeFloor(E). A counter
// created after the FLUSHALL starts its life past the floor (the tiered
// mode's loader hands Redis a tombstone of Lives' floor before a create),
// and applyLives counts every life up to the floor as deleted, so a
// change of a life made before the FLUSHALL is dropped whichever node
// hands it over, whenever. Within one epoch a counter has fewer than
// 2^32 lives; lives stay below 2^53 (Lua's exact integers) for 2^21
// FLUSHALLs.
const lifeEpochShift = 32

// LifeFloor is the highest life deleted by the FLUSHALL that started the
// flush epoch epoch (0 for epoch 0: none).
func LifeFloor(epoch uint64) uint64 { return epoch << lifeEpochShift }

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
	// The deaths, and the flush epoch's floor: read after the rows are
	// locked (the SELECT above holds a lock on counters that Truncate's
	// conflicts with), so either a FLUSHALL committed before this read
	// and its floor is seen, or it waits for this batch to commit and
	// then truncates what the batch wrote.
	dead := map[string]int64{}
	rows, err = tx.Query(ctx, `SELECT d.counter_id, d.dead_life, e.epoch FROM counter_flush_epoch e
		LEFT JOIN counter_deaths d ON d.counter_id = ANY($1::text[])`, ids)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("postgres: deaths: %w", err)
	}
	var did *string
	var dl *int64
	var epoch int64
	if _, err := pgx.ForEachRow(rows, []any{&did, &dl, &epoch}, func() error {
		if did != nil && dl != nil {
			dead[*did] = *dl
		}
		return nil
	}); err != nil {
		return nil, nil, nil, fmt.Errorf("postgres: deaths: %w", err)
	}
	if floor := int64(min(LifeFloor(uint64(max(epoch, 0))), 1<<63-1)); floor > 0 {
		for _, id := range ids {
			dead[id] = max(dead[id], floor)
		}
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

// Lives returns the highest life of id deleted (0: none recorded) and the
// life floor of the current flush epoch (LifeFloor; 0 before any
// FLUSHALL), in one query: a counter created now starts its life past
// both.
func (s *Store) Lives(ctx context.Context, id string) (dead, floor uint64, err error) {
	s.statements.Add(1)
	var l, e int64
	err = s.pool.QueryRow(ctx, `SELECT COALESCE((SELECT dead_life FROM counter_deaths WHERE counter_id = $1), 0),
		(SELECT epoch FROM counter_flush_epoch)`, id).Scan(&l, &e)
	if err != nil {
		return 0, 0, fmt.Errorf("postgres: dead life %q: %w", id, err)
	}
	return uint64(max(l, 0)), LifeFloor(uint64(max(e, 0))), nil
}

// PurgeDeaths deletes the deletes' lives older than DeathRetention.
func (s *Store) PurgeDeaths(ctx context.Context, now time.Time) (int64, error) {
	s.statements.Add(1)
	tag, err := s.pool.Exec(ctx, `DELETE FROM counter_deaths WHERE deleted_at <= $1`, now.Add(-DeathRetention).UTC())
	return tag.RowsAffected(), err
}
