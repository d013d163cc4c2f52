package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Kinds understood by Apply (counters.counter_type).
const (
	KindCounter = "counter" // plain counter: counters.value
	KindSharded = "sharded" // sharded counter: counter_shards rows
	KindHash    = "hash"    // hash counter: counter_fields rows
	KindHLL     = "hll"     // HyperLogLog: counter_hll.sketch
	KindFloat   = "float"   // float counter: counters.float_value (value 0)
)

// Delta is one change to one counter.
type Delta struct {
	CounterID string
	// Kind is the counter's kind; "" means KindCounter. Any kind other than
	// sharded/hash/hll is stored like a plain counter (counters.value).
	Kind string
	// Shard is the shard of a sharded counter; -1 (or any negative) for none.
	// A sharded delta with no shard goes to shard 0.
	Shard int
	// Field is the field of a hash counter.
	Field string
	// Delta is added to the value (plain), shard (sharded) or field (hash)
	// and to the time series. Ignored for hll.
	Delta int64
	// Sketch is the full serialized HLL sketch for KindHLL (owner-authoritative:
	// it replaces the stored sketch).
	Sketch []byte
	// Float is the value of a KindFloat counter as decimal text; it
	// replaces the stored value (the hot tier computes it). No time series.
	Float string
	// At is when the change happened (minute bucket of the time series and
	// the roll-ups); zero means now.
	At time.Time
	// Life is the counter's life the change was made in (lives.go); 0:
	// none known, applied to the row whatever its life.
	Life uint64
}

// Batch is a unit of write-behind: all of its deltas are applied in one
// transaction, at most once per ID.
type Batch struct {
	// ID identifies the batch forever (within SyncBatches retention): a
	// batch with an ID that was already applied is skipped. A retried flush
	// must reuse its ID.
	ID     string
	Deltas []Delta
	// Deletes are counters removed (with their shards, fields and
	// sketch) before the deltas apply.
	Deletes []string
	// DeadLives are the lives the Deletes ended (lives.go); a delete
	// missing here removes the row whatever its life.
	DeadLives map[string]uint64
	// Expiries set counters.expires_at after the deltas apply.
	Expiries []Expiry
	// Versions raise counters.version to at least the given version after
	// the deltas apply.
	Versions []Version
	// Idem are the idempotency records of the requests whose deltas the
	// batch holds, committed with them (a key's first record wins).
	Idem []IdemRecord
	// Journal are journaled writes (journal.go): each applies with the
	// batch's deltas unless its id was applied before.
	Journal []JournalWrite
}

// Version is the hot tier's version of a counter.
type Version struct {
	ID      string
	Version uint64
}

// Expiry sets when a counter expires; a zero At removes the expiry.
type Expiry struct {
	ID string
	At time.Time
}

func (b Batch) empty() bool {
	return len(b.Deltas) == 0 && len(b.Deletes) == 0 && len(b.Expiries) == 0 && len(b.Versions) == 0 && len(b.Idem) == 0 && len(b.Journal) == 0
}

// withJournal returns b's deltas, versions and records with those of ws.
func (b *Batch) withJournal(ws []JournalWrite) (ds []Delta, vs []Version, rs []IdemRecord) {
	if len(ws) == 0 {
		return b.Deltas, b.Versions, b.Idem
	}
	ds, vs, rs = slices.Clip(b.Deltas), slices.Clip(b.Versions), slices.Clip(b.Idem)
	for _, w := range ws {
		ds = append(ds, w.Deltas...)
		vs = append(vs, w.Versions...)
		rs = append(rs, w.Idem...)
	}
	return ds, vs, rs
}

// The keys of Apply's per-table sums. Each orders by counter_id first, so
// that every statement locks its rows in id order (see upsertSorted).
type idKind struct{ id, kind string }

func (k idKind) counterID() string { return k.id }
func (k idKind) compare(o idKind) int {
	return cmp.Or(strings.Compare(k.id, o.id), strings.Compare(k.kind, o.kind))
}

type shardKey struct {
	id    string
	shard int32
}

func (k shardKey) counterID() string { return k.id }
func (k shardKey) compare(o shardKey) int {
	return cmp.Or(strings.Compare(k.id, o.id), cmp.Compare(k.shard, o.shard))
}

type fieldKey struct{ id, field string }

func (k fieldKey) counterID() string { return k.id }
func (k fieldKey) compare(o fieldKey) int {
	return cmp.Or(strings.Compare(k.id, o.id), strings.Compare(k.field, o.field))
}

type bucketKey struct {
	id string
	t  time.Time
}

func (k bucketKey) counterID() string { return k.id }
func (k bucketKey) compare(o bucketKey) int {
	return cmp.Or(strings.Compare(k.id, o.id), k.t.Compare(o.t))
}

type aggKey struct {
	id, gran string
	t        time.Time
}

func (k aggKey) counterID() string { return k.id }
func (k aggKey) compare(o aggKey) int {
	return cmp.Or(strings.Compare(k.id, o.id), strings.Compare(k.gran, o.gran), k.t.Compare(o.t))
}

// Apply applies b in one transaction, exactly once: the batch id is recorded
// in counter_sync_batches in the same transaction, and a batch whose id is
// already there is skipped (applied=false, nothing changed). On error
// nothing was applied unless the commit itself succeeded and only its
// acknowledgement was lost; retrying with the same ID is always safe.
func (s *Store) Apply(ctx context.Context, b Batch) (applied bool, err error) {
	if b.ID == "" {
		return false, errors.New("postgres: batch without ID")
	}
	now := time.Now().UTC()
	// The journaled writes' deltas are summed in too; the few a replay
	// already applied are taken out in the transaction (claimJournal).
	deltas, versions, idem := b.withJournal(b.Journal)
	sum, err := sumDeltas(deltas, now)
	if err != nil {
		return false, err
	}
	// Partitions must exist before the transaction (DDL outside it keeps
	// the batch transaction short and its locks small).
	for m := range sum.months {
		if err := s.ensurePartition(ctx, "counter_timeseries", m); err != nil {
			return false, err
		}
	}
	auditIDs, auditDeltas := s.auditOf(sum)
	if s.audit != nil {
		if len(auditIDs) > 0 {
			if err := s.ensurePartition(ctx, "counter_audit_log", monthStart(now)); err != nil {
				return false, err
			}
		}
	}

	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{})
	s.statements.Add(1)
	if err != nil {
		return false, fmt.Errorf("postgres: begin: %w", err)
	}
	defer func() {
		if err != nil || !applied {
			_ = tx.Rollback(context.Background())
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23514" {
			// "no partition of relation found for row": a partition this
			// process believed in was dropped (retention elsewhere). Forget
			// the cache so the retry recreates it.
			s.parts.Clear()
		}
	}()
	var exec execFunc = func(sql string, args ...any) (int64, error) {
		s.statements.Add(1)
		tag, err := tx.Exec(ctx, sql, args...)
		return tag.RowsAffected(), err
	}

	n, err := exec(`INSERT INTO counter_sync_batches (batch_id, applied_at, deltas) VALUES ($1, $2, $3)
		ON CONFLICT (batch_id) DO NOTHING`, b.ID, now, len(b.Deltas))
	if err != nil {
		return false, fmt.Errorf("postgres: record batch: %w", err)
	}
	if n == 0 {
		s.duplicates.Add(1)
		s.statements.Add(1) // rollback
		return false, nil
	}
	if len(b.Journal) > 0 {
		s.statements.Add(1)
		fresh, err := claimJournal(ctx, tx, b.ID, now, b.Journal)
		if err != nil {
			return false, err
		}
		if len(fresh) < len(b.Journal) { // some applied before: not again
			s.journalDuplicates.Add(uint64(len(b.Journal) - len(fresh)))
			deltas, versions, idem = b.withJournal(fresh)
			if sum, err = sumDeltas(deltas, now); err != nil {
				return false, err
			}
			auditIDs, auditDeltas = s.auditOf(sum)
		}
	}

	// Each statement locks its rows in counter_id order (sorted inputs,
	// fixed statement order), so concurrent batches that only write cannot
	// deadlock. Deletes are one pass and writes another: two batches each
	// deleting what the other writes can deadlock, and the aborted one is
	// re-applied under its id at the next flush (docs/postgres.md).
	wipe := b.Deletes
	var lives map[string]int64
	if len(b.DeadLives) > 0 || hasLives(deltas) {
		s.statements.Add(2) // applyLives' SELECTs
		var keep []Delta
		if keep, wipe, lives, err = applyLives(ctx, tx, exec, &b, deltas, now); err != nil {
			return false, err
		}
		if len(keep) < len(deltas) { // deltas of deleted lives: not applied
			deltas = keep
			if sum, err = sumDeltas(deltas, now); err != nil {
				return false, err
			}
			auditIDs, auditDeltas = s.auditOf(sum)
		}
	}
	if len(wipe) > 0 {
		s.statements.Add(1) // applyDeletes' DELETE … RETURNING
	}
	deleted, err := applyDeletes(ctx, tx, exec, wipe)
	if err != nil {
		return false, err
	}
	if err = sum.upsert(exec, now); err != nil {
		return false, err
	}
	if err = setLives(exec, lives); err != nil {
		return false, err
	}
	if err = applyExpiries(exec, b.Expiries); err != nil {
		return false, err
	}
	if err = applyVersions(exec, versions); err != nil {
		return false, err
	}
	if err = applyIdem(exec, b.ID, idem); err != nil {
		return false, err
	}
	if len(auditIDs) > 0 {
		if _, err = exec(`INSERT INTO counter_audit_log (counter_id, operation, delta, old_value, new_value, batch_id, "timestamp")
			SELECT u.id, CASE WHEN u.delta < 0 THEN 'decrement' ELSE 'increment' END, u.delta, c.value - u.delta, c.value, $3, $4
			FROM unnest($1::text[], $2::bigint[]) AS u(id, delta) JOIN counters c ON c.counter_id = u.id`,
			auditIDs, auditDeltas, b.ID, now); err != nil {
			return false, fmt.Errorf("postgres: audit: %w", err)
		}
	}
	// Last: the region change sequence's row stays locked until commit.
	if ids := b.changedIDs(deltas, versions); len(ids) > 0 {
		s.statements.Add(2)
		if err = noteRegionChanges(ctx, tx, ids, deleted); err != nil {
			return false, err
		}
	}
	if hook := s.opts.BeforeCommit; hook != nil {
		if err = hook(b.ID); err != nil {
			return false, err
		}
	}
	s.statements.Add(1)
	if err = tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("postgres: commit: %w", err)
	}
	applied = true
	s.batches.Add(1)
	s.deltas.Add(uint64(len(deltas)))
	if hook := s.opts.AfterCommit; hook != nil {
		if herr := hook(b.ID); herr != nil {
			return false, herr
		}
	}
	return true, nil
}

// hasLives reports whether a delta of ds carries a life.
func hasLives(ds []Delta) bool {
	for _, d := range ds {
		if d.Life > 0 {
			return true
		}
	}
	return false
}

// auditOf lists the plain counters' summed deltas that go to the audit
// log.
func (s *Store) auditOf(sum *sums) (ids []string, deltas []int64) {
	ids, deltas = []string{}, []int64{}
	if s.audit == nil {
		return ids, deltas
	}
	for k, v := range sum.plain {
		if s.audited(k.id) {
			ids = append(ids, k.id)
			deltas = append(deltas, v)
		}
	}
	return ids, deltas
}

// sums are a batch's deltas summed per row of each table they change.
type sums struct {
	plain      map[idKind]int64
	sharded    map[shardKey]int64
	shardedIDs map[string]int32 // id -> shard_count (max shard+1)
	fields     map[fieldKey]int64
	hashIDs    map[string]bool
	sketches   map[string][]byte
	floats     map[string]string
	buckets    map[bucketKey]int64
	aggs       map[aggKey]int64
	months     map[time.Time]bool // of the time series partitions written
}

// sumDeltas sums ds; a delta without a time happened at now.
func sumDeltas(ds []Delta, now time.Time) (*sums, error) {
	sum := &sums{
		plain:      map[idKind]int64{},
		sharded:    map[shardKey]int64{},
		shardedIDs: map[string]int32{},
		fields:     map[fieldKey]int64{},
		hashIDs:    map[string]bool{},
		sketches:   map[string][]byte{},
		floats:     map[string]string{},
		buckets:    map[bucketKey]int64{},
		aggs:       map[aggKey]int64{},
		months:     map[time.Time]bool{},
	}
	for _, d := range ds {
		if d.CounterID == "" {
			return nil, errors.New("postgres: delta without counter id")
		}
		kind := d.Kind
		if kind == "" {
			kind = KindCounter
		}
		switch kind {
		case KindSharded:
			sh := int32(d.Shard)
			if d.Shard < 0 {
				sh = 0
			}
			sum.sharded[shardKey{d.CounterID, sh}] += d.Delta
			if sum.shardedIDs[d.CounterID] < sh+1 {
				sum.shardedIDs[d.CounterID] = sh + 1
			}
		case KindHash:
			sum.fields[fieldKey{d.CounterID, d.Field}] += d.Delta
			sum.hashIDs[d.CounterID] = true
		case KindHLL:
			sum.sketches[d.CounterID] = d.Sketch
			continue // no time series for sketches
		case KindFloat:
			sum.floats[d.CounterID] = d.Float
			continue // nor for floats
		default:
			sum.plain[idKind{d.CounterID, kind}] += d.Delta
		}
		at := d.At
		if at.IsZero() {
			at = now
		}
		at = at.UTC()
		m := at.Truncate(time.Minute)
		sum.buckets[bucketKey{d.CounterID, m}] += d.Delta
		h := at.Truncate(time.Hour)
		day := time.Date(at.Year(), at.Month(), at.Day(), 0, 0, 0, 0, time.UTC)
		mon := monthStart(at)
		sum.aggs[aggKey{d.CounterID, "hour", h}] += d.Delta
		sum.aggs[aggKey{d.CounterID, "day", day}] += d.Delta
		sum.aggs[aggKey{d.CounterID, "month", mon}] += d.Delta
		sum.months[mon] = true
	}
	return sum, nil
}

// parentsSQL creates the counters rows $1 of kind $3 at $2, or raises their
// version: the parents of hash fields and hll sketches.
const parentsSQL = `INSERT INTO counters AS c (counter_id, counter_type, created_at, updated_at, last_sync_at)
	SELECT u.id, $3, $2, $2, $2 FROM unnest($1::text[]) WITH ORDINALITY AS u(id, ord) ORDER BY u.ord
	ON CONFLICT (counter_id) DO UPDATE SET version = c.version + 1, updated_at = EXCLUDED.updated_at, last_sync_at = EXCLUDED.last_sync_at`

// upsert writes the sums, one statement per table, rows in counter_id
// order (see upsertSorted).
func (sum *sums) upsert(exec execFunc, now time.Time) error {
	if err := upsertSorted(exec, "counters", `INSERT INTO counters AS c (counter_id, counter_type, value, version, created_at, updated_at, last_sync_at)
			SELECT u.id, u.kind, u.delta, 1, $4, $4, $4 FROM unnest($1::text[], $2::text[], $3::bigint[]) WITH ORDINALITY AS u(id, kind, delta, ord)
			ORDER BY u.ord
			ON CONFLICT (counter_id) DO UPDATE SET value = c.value + EXCLUDED.value, version = c.version + 1,
				counter_type = EXCLUDED.counter_type, float_value = NULL,
				updated_at = EXCLUDED.updated_at, last_sync_at = EXCLUDED.last_sync_at`,
		sum.plain, idKind.compare, func(ks []idKind) []any {
			return []any{column(ks, idKind.counterID), column(ks, func(k idKind) string { return k.kind }), values(ks, sum.plain), now}
		}); err != nil {
		return err
	}
	// A float's value replaces the stored one; a counter that became a
	// float (as in Redis) keeps value 0 from then on.
	if err := upsertSorted(exec, "floats", `INSERT INTO counters AS c (counter_id, counter_type, value, float_value, version, created_at, updated_at, last_sync_at)
			SELECT u.id, 'float', 0, u.f, 1, $3, $3, $3 FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(id, f, ord)
			ORDER BY u.ord
			ON CONFLICT (counter_id) DO UPDATE SET counter_type = 'float', value = 0, float_value = EXCLUDED.float_value,
				version = c.version + 1, updated_at = EXCLUDED.updated_at, last_sync_at = EXCLUDED.last_sync_at`,
		sum.floats, strings.Compare, func(ids []string) []any {
			return []any{ids, values(ids, sum.floats), now}
		}); err != nil {
		return err
	}
	shardCounts := func(ids []string) []any { return []any{ids, values(ids, sum.shardedIDs)} }
	// The parent row is only written when it is created or its shard count
	// grows (ON CONFLICT DO NOTHING and an UPDATE matching no row take no
	// row lock), so concurrent flushes of a hot counter only contend on
	// their shard rows (plus the FK's shared KEY SHARE lock).
	if err := upsertSorted(exec, "sharded parents", `INSERT INTO counters (counter_id, counter_type, shard_count, created_at, updated_at, last_sync_at)
			SELECT u.id, 'sharded', u.n, $3, $3, $3 FROM unnest($1::text[], $2::int[]) WITH ORDINALITY AS u(id, n, ord)
			ORDER BY u.ord
			ON CONFLICT (counter_id) DO NOTHING`, sum.shardedIDs, strings.Compare, func(ids []string) []any {
		return append(shardCounts(ids), now)
	}); err != nil {
		return err
	}
	if err := upsertSorted(exec, "shard counts", `UPDATE counters c SET shard_count = u.n FROM unnest($1::text[], $2::int[]) AS u(id, n)
			WHERE c.counter_id = u.id AND c.shard_count < u.n`, sum.shardedIDs, strings.Compare, shardCounts); err != nil {
		return err
	}
	if err := upsertSorted(exec, "shards", `INSERT INTO counter_shards AS s (counter_id, shard_id, value, updated_at)
			SELECT u.id, u.shard, u.delta, $4 FROM unnest($1::text[], $2::int[], $3::bigint[]) WITH ORDINALITY AS u(id, shard, delta, ord)
			ORDER BY u.ord
			ON CONFLICT (counter_id, shard_id) DO UPDATE SET value = s.value + EXCLUDED.value, updated_at = EXCLUDED.updated_at`,
		sum.sharded, shardKey.compare, func(ks []shardKey) []any {
			return []any{column(ks, shardKey.counterID), column(ks, func(k shardKey) int32 { return k.shard }), values(ks, sum.sharded), now}
		}); err != nil {
		return err
	}
	if err := upsertSorted(exec, "hash parents", parentsSQL, sum.hashIDs, strings.Compare, func(ids []string) []any {
		return []any{ids, now, KindHash}
	}); err != nil {
		return err
	}
	if err := upsertSorted(exec, "hash fields", `INSERT INTO counter_fields AS f (counter_id, field, value, updated_at)
			SELECT u.id, u.field, u.delta, $4 FROM unnest($1::text[], $2::text[], $3::bigint[]) WITH ORDINALITY AS u(id, field, delta, ord)
			ORDER BY u.ord
			ON CONFLICT (counter_id, field) DO UPDATE SET value = f.value + EXCLUDED.value, updated_at = EXCLUDED.updated_at`,
		sum.fields, fieldKey.compare, func(ks []fieldKey) []any {
			return []any{column(ks, fieldKey.counterID), column(ks, func(k fieldKey) string { return k.field }), values(ks, sum.fields), now}
		}); err != nil {
		return err
	}
	if err := upsertSorted(exec, "hll parents", parentsSQL, sum.sketches, strings.Compare, func(ids []string) []any {
		return []any{ids, now, KindHLL}
	}); err != nil {
		return err
	}
	if err := upsertSorted(exec, "hll sketches", `INSERT INTO counter_hll AS h (counter_id, sketch, updated_at)
			SELECT u.id, u.sketch, $3 FROM unnest($1::text[], $2::bytea[]) WITH ORDINALITY AS u(id, sketch, ord) ORDER BY u.ord
			ON CONFLICT (counter_id) DO UPDATE SET sketch = EXCLUDED.sketch, updated_at = EXCLUDED.updated_at`,
		sum.sketches, strings.Compare, func(ids []string) []any { return []any{ids, values(ids, sum.sketches), now} }); err != nil {
		return err
	}
	if err := upsertSorted(exec, "time series", `INSERT INTO counter_timeseries AS t (counter_id, bucket_timestamp, value)
			SELECT u.id, u.t, u.delta FROM unnest($1::text[], $2::timestamptz[], $3::bigint[]) WITH ORDINALITY AS u(id, t, delta, ord)
			ORDER BY u.ord
			ON CONFLICT (counter_id, bucket_timestamp) DO UPDATE SET value = t.value + EXCLUDED.value`,
		sum.buckets, bucketKey.compare, func(ks []bucketKey) []any {
			return []any{column(ks, bucketKey.counterID), column(ks, func(k bucketKey) time.Time { return k.t }), values(ks, sum.buckets)}
		}); err != nil {
		return err
	}
	return upsertSorted(exec, "aggregates", `INSERT INTO counter_aggregates AS a (counter_id, granularity, period_start, value)
			SELECT u.id, u.g, u.t, u.delta FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::bigint[]) WITH ORDINALITY AS u(id, g, t, delta, ord)
			ORDER BY u.ord
			ON CONFLICT (counter_id, granularity, period_start) DO UPDATE SET value = a.value + EXCLUDED.value`,
		sum.aggs, aggKey.compare, func(ks []aggKey) []any {
			return []any{column(ks, aggKey.counterID), column(ks, func(k aggKey) string { return k.gran }),
				column(ks, func(k aggKey) time.Time { return k.t }), values(ks, sum.aggs)}
		})
}

type execFunc func(sql string, args ...any) (int64, error)

// applyDeletes removes counters with everything hanging off them
// (counter_shards cascades) and returns the versions the deleted counters
// had (for their region export base).
func applyDeletes(ctx context.Context, tx pgx.Tx, exec execFunc, ids []string) (map[string]int64, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	ids = append([]string(nil), ids...)
	sort.Strings(ids)
	rows, err := tx.Query(ctx, `DELETE FROM counters WHERE counter_id = ANY($1::text[]) RETURNING counter_id, version`, ids)
	if err != nil {
		return nil, fmt.Errorf("postgres: apply deletes: %w", err)
	}
	deleted := map[string]int64{}
	var id string
	var ver int64
	if _, err := pgx.ForEachRow(rows, []any{&id, &ver}, func() error { deleted[id] = ver; return nil }); err != nil {
		return nil, fmt.Errorf("postgres: apply deletes: %w", err)
	}
	for _, q := range []string{
		`DELETE FROM counter_fields WHERE counter_id = ANY($1::text[])`,
		`DELETE FROM counter_hll WHERE counter_id = ANY($1::text[])`,
	} {
		if _, err := exec(q, ids); err != nil {
			return nil, fmt.Errorf("postgres: apply deletes: %w", err)
		}
	}
	return deleted, nil
}

// changedIDs lists the counters the batch changes (with repeats).
func (b *Batch) changedIDs(deltas []Delta, versions []Version) []string {
	ids := slices.Clone(b.Deletes)
	for _, d := range deltas {
		ids = append(ids, d.CounterID)
	}
	for _, e := range b.Expiries {
		ids = append(ids, e.ID)
	}
	for _, v := range versions {
		ids = append(ids, v.ID)
	}
	return ids
}

// applyExpiries sets counters.expires_at (NULL for a zero time).
func applyExpiries(exec execFunc, ex []Expiry) error {
	return applyPerID(exec, "expiries", `UPDATE counters c SET expires_at = u.t
		FROM unnest($1::text[], $2::timestamptz[]) AS u(id, t) WHERE c.counter_id = u.id`,
		ex, func(e Expiry) string { return e.ID }, func(e Expiry) *time.Time {
			if e.At.IsZero() {
				return nil
			}
			at := e.At.UTC()
			return &at
		})
}

// applyVersions raises counters.version to the hot tier's versions.
func applyVersions(exec execFunc, vs []Version) error {
	return applyPerID(exec, "versions", `UPDATE counters c SET version = u.v
		FROM unnest($1::text[], $2::bigint[]) AS u(id, v) WHERE c.counter_id = u.id AND c.version < u.v`,
		vs, func(v Version) string { return v.ID }, func(v Version) int64 { return int64(min(v.Version, 1<<63-1)) })
}

// applyPerID runs sql with $1 the ids and $2 the values of es, sorted by
// id (rows are locked in id order, like every other statement).
func applyPerID[E, V any](exec execFunc, what, sql string, es []E, id func(E) string, val func(E) V) error {
	if len(es) == 0 {
		return nil
	}
	es = append([]E(nil), es...)
	sort.Slice(es, func(i, j int) bool { return id(es[i]) < id(es[j]) })
	ids, vals := make([]string, len(es)), make([]V, len(es))
	for i, e := range es {
		ids[i], vals[i] = id(e), val(e)
	}
	if _, err := exec(sql, ids, vals); err != nil {
		return fmt.Errorf("postgres: apply %s: %w", what, err)
	}
	return nil
}

// upsertSorted runs sql once for every entry of m, in the order of compare:
// rows are always locked in counter_id order (every compare orders by id
// first; statements run in a fixed order) so concurrent batches cannot
// deadlock. args turns the sorted keys into the statement's arguments: one
// array per column (column, values), then any scalars. An empty m runs
// nothing.
func upsertSorted[K comparable, V any](exec execFunc, what, sql string, m map[K]V, compare func(a, b K) int, args func(keys []K) []any) error {
	if len(m) == 0 {
		return nil
	}
	keys := slices.Collect(maps.Keys(m))
	sort.Slice(keys, func(i, j int) bool { return compare(keys[i], keys[j]) < 0 })
	if _, err := exec(sql, args(keys)...); err != nil {
		return fmt.Errorf("postgres: apply %s: %w", what, err)
	}
	return nil
}

// column is the array of f of every key.
func column[K, T any](keys []K, f func(K) T) []T {
	out := make([]T, len(keys))
	for i, k := range keys {
		out[i] = f(k)
	}
	return out
}

// values is the array of m's values of keys.
func values[K comparable, V any](keys []K, m map[K]V) []V {
	return column(keys, func(k K) V { return m[k] })
}

func monthStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}
