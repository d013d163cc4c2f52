package tiered

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/glob"
	"github.com/counterd/counterd/internal/store/postgres"
	redisstore "github.com/counterd/counterd/internal/store/redis"
)

// load is the Redis tier's read-through Loader. When this node still has
// changes of id that PostgreSQL has not committed, it flushes them first,
// so a reloaded value never misses them (nor counts them twice: Redis
// caches what PostgreSQL holds, and only later deltas are added to both).
func (b *Backend) load(ctx context.Context, id string) (redisstore.Record, bool, error) {
	if b.agg.Pending(id) {
		letGo(ctx) // a keyed request's hold would keep Flush waiting for itself
		if err := b.agg.Flush(ctx); err != nil {
			return redisstore.Record{}, false, unavailable(err)
		}
	}
	rec, ok, err := b.pg.Load(ctx, id)
	if err != nil {
		return redisstore.Record{}, false, unavailable(err)
	}
	if !ok {
		// Deleted there: a tombstone keeps the life going (a create
		// starts the next life, which PostgreSQL applies). It is at
		// least at the flush epoch's floor, so the life a create starts
		// is one PostgreSQL applies after a FLUSHALL
		// (postgres.LifeFloor): for a write (about to create it) and
		// for a counter deleted before; a read of an id never deleted
		// leaves none.
		dead, floor, err := b.pg.Lives(ctx, id)
		if err != nil {
			return redisstore.Record{}, false, unavailable(err)
		}
		if dead > 0 || writing(ctx) {
			dead = max(dead, floor)
		}
		return redisstore.Record{Life: dead}, false, nil
	}
	return fromPG(rec, b.opts.Now())
}

// fromPG converts a PostgreSQL record for the Redis tier. Window counters
// are not restored (their buckets lived in Redis only): found is false
// and the next add starts a fresh window.
func fromPG(rec postgres.Record, now time.Time) (redisstore.Record, bool, error) {
	out := redisstore.Record{Kind: redisstore.Kind(rec.Kind), Value: rec.Value, UpdatedAt: rec.UpdatedAt, Life: rec.Life}
	if rec.Version > 0 {
		out.Version = uint64(rec.Version)
	}
	if !rec.ExpiresAt.IsZero() {
		if !rec.ExpiresAt.After(now) {
			// Expired at this node's clock (PostgreSQL's filter uses its
			// own): missing, not reloaded for another millisecond.
			return redisstore.Record{}, false, nil
		}
		out.TTL = rec.ExpiresAt.Sub(now)
	}
	switch out.Kind {
	case redisstore.KindCounter, redisstore.KindPN:
	case redisstore.KindSharded:
		out.Shards = rec.Shards
	case redisstore.KindHash:
		out.Fields = sortedFields(rec.Fields)
	case redisstore.KindHLL:
		out.HLL = rec.Sketch
	case redisstore.KindFloat:
		out.Float = rec.Float
	case redisstore.KindWindow:
		// Not restored: the next add starts a fresh window, in the
		// life after the row's (a tombstone of it), which PostgreSQL
		// applies in place of the row (a create of life 1 would be
		// below the row's life, or the flush epoch's floor).
		return redisstore.Record{Life: rec.Life}, false, nil
	default:
		return redisstore.Record{}, false, fmt.Errorf("%w: counter %q has unknown kind %q in PostgreSQL", ErrUnavailable, rec.ID, rec.Kind)
	}
	return out, true, nil
}

// sortedFields lists the non-zero fields by name. A field at 0 is not
// restored: HDEL is written behind as subtracting the field's value.
func sortedFields(m map[string]int64) []counter.Field {
	out := make([]counter.Field, 0, len(m))
	for k, v := range m {
		if v != 0 {
			out = append(out, counter.Field{Name: k, Value: v})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Get reads one counter from Redis (read-through from PostgreSQL).
func (b *Backend) Get(ctx context.Context, id string) (contract.View, error) {
	v := contract.View{ID: id}
	if err := checkID(id); err != nil {
		return v, err
	}
	rec, found, err := b.rs.Get(ctx, id)
	if err != nil || !found {
		return v, mapErr(err)
	}
	v.Kind, v.Exists, v.Value, v.Version = engineKind(rec.Kind), true, rec.Value, rec.Version
	v.UpdatedAt = rec.UpdatedAt.UTC()
	if rec.TTL > 0 {
		v.ExpiresAt = b.opts.Now().Add(rec.TTL).UTC()
	}
	switch v.Kind {
	case contract.KindSharded:
		v.Shards = rec.Shards
	case contract.KindPN:
		v.Replicas = []counter.PNSlot{pnSlot(b.opts.NodeID, rec.Value)}
	case contract.KindHLL:
		v.StdError, v.Precision = hllStdError, hllPrec
	case contract.KindHash:
		v.Value, v.Fields = 0, rec.Fields
	case contract.KindWindow:
		v.Window, v.Buckets = rec.Window, rec.Buckets
	case contract.KindFloat:
		v.Value, v.Float = 0, rec.Float
	}
	return v, nil
}

// pnSlot shows a tiered pn counter as one replica: Redis keeps one value,
// not per-replica increments and decrements.
func pnSlot(node string, v int64) counter.PNSlot {
	if node == "" {
		node = "tiered"
	}
	if v >= 0 {
		return counter.PNSlot{Replica: node, P: uint64(v)}
	}
	return counter.PNSlot{Replica: node, N: uint64(-(v + 1)) + 1}
}

func checkID(id string) error {
	if err := contract.ValidateID(id); err != nil {
		return err
	}
	if id[0] == '}' {
		return fmt.Errorf("%w: ids starting with '}' are not supported in tiered mode", contract.ErrInvalidID)
	}
	return nil
}

// HGet reads one field of a hash counter.
func (b *Backend) HGet(ctx context.Context, id, field string) (int64, bool, error) {
	v, err := b.Get(ctx, id)
	if err != nil || !v.Exists {
		return 0, false, err
	}
	if v.Kind != contract.KindHash {
		return 0, false, fmt.Errorf("%w: %q is of kind %s", contract.ErrWrongKind, id, v.Kind)
	}
	i := sort.Search(len(v.Fields), func(i int) bool { return v.Fields[i].Name >= field })
	if i < len(v.Fields) && v.Fields[i].Name == field {
		return v.Fields[i].Value, true, nil
	}
	return 0, false, nil
}

// PFCount estimates the distinct items in the union of hll counters (a
// missing one counts as empty). Every id is read through first.
func (b *Backend) PFCount(ctx context.Context, ids ...string) (uint64, float64, error) {
	if len(ids) == 0 || len(ids) > contract.MaxItems {
		return 0, 0, fmt.Errorf("%w: 1..%d ids", contract.ErrInvalidArgument, contract.MaxItems)
	}
	for _, id := range ids {
		v, err := b.Get(ctx, id)
		if err != nil {
			return 0, 0, err
		}
		if v.Exists && v.Kind != contract.KindHLL {
			return 0, 0, fmt.Errorf("%w: %q is of kind %s", contract.ErrWrongKind, id, v.Kind)
		}
	}
	n, err := b.rs.PFCount(ctx, ids...)
	if err != nil {
		return 0, 0, mapErr(err)
	}
	return uint64(n), hllStdError, nil
}

// TTL reports a counter's own time to live.
func (b *Backend) TTL(ctx context.Context, id string) (time.Duration, bool, bool, error) {
	if checkID(id) != nil {
		return 0, false, false, nil // a missing counter (contract.Backend)
	}
	rec, found, err := b.rs.Get(ctx, id)
	if err != nil || !found {
		return 0, false, false, mapErr(err)
	}
	return rec.TTL, rec.TTL > 0, true, nil
}

// Scan lists ids from PostgreSQL after a flush (so this node's writes are
// included); the cursor is an offset in id order. count ids are examined
// per call, and those matching the glob returned.
func (b *Backend) Scan(ctx context.Context, cursor uint64, match string, count int) ([]string, uint64, error) {
	if count <= 0 {
		count = 10
	}
	if cursor > 1<<40 {
		return nil, 0, fmt.Errorf("%w: cursor", contract.ErrInvalidArgument)
	}
	if err := b.Flush(ctx); err != nil {
		return nil, 0, err
	}
	ids, err := b.pg.IDs(ctx, int(cursor), count)
	if err != nil {
		return nil, 0, unavailable(err)
	}
	next := cursor + uint64(len(ids))
	if len(ids) < count {
		next = 0
	}
	out := ids[:0]
	for _, id := range ids {
		if match == "" || match == "*" || glob.Match(match, id) {
			out = append(out, id)
		}
	}
	return out, next, nil
}

// additiveKinds are summed in PostgreSQL by Aggregate. Window counters are
// summed from Redis: their in-window sum lives there only (PostgreSQL keeps
// their total).
var additiveKinds = []string{"counter", "sharded", "pn"}

// Aggregate sums the additive counters whose id starts with prefix: counter,
// sharded and pn counters from PostgreSQL after a flush, and each window
// counter's in-window sum from Redis.
func (b *Backend) Aggregate(ctx context.Context, prefix string) (contract.Aggregate, error) {
	if len(prefix) > contract.MaxIDLen {
		return contract.Aggregate{}, fmt.Errorf("%w: prefix longer than %d bytes", contract.ErrInvalidID, contract.MaxIDLen)
	}
	if err := b.Flush(ctx); err != nil {
		return contract.Aggregate{}, err
	}
	sum, n, overflow, err := b.pg.Sum(ctx, prefix, additiveKinds)
	if err != nil {
		return contract.Aggregate{}, unavailable(err)
	}
	windows, err := b.pg.PrefixIDs(ctx, prefix, "window")
	if err != nil {
		return contract.Aggregate{}, unavailable(err)
	}
	for _, id := range windows {
		v, err := b.Get(ctx, id)
		if err != nil {
			return contract.Aggregate{}, err
		}
		if !v.Exists || v.Kind != contract.KindWindow {
			continue // expired or replaced since the listing
		}
		next := sum + v.Value
		if (v.Value > 0 && next < sum) || (v.Value < 0 && next > sum) {
			overflow = true
			break
		}
		sum = next
		n++
	}
	if overflow {
		return contract.Aggregate{}, fmt.Errorf("%w: sum of %q*", contract.ErrOverflow, prefix)
	}
	return contract.Aggregate{Prefix: prefix, Value: sum, Count: n}, nil
}

// Len is the number of live counters in PostgreSQL after a flush.
func (b *Backend) Len(ctx context.Context) (int, error) {
	if err := b.Flush(ctx); err != nil {
		return 0, err
	}
	n, err := b.pg.Count(ctx)
	return n, unavailable(err)
}

// FlushAll deletes every counter: pending deltas are flushed, PostgreSQL's
// counters, time series, aggregates and unique-count sketches truncated
// (and this node's pending sketches dropped) in a transaction that starts
// a new flush epoch (postgres.LifeFloor: the changes of lives made before
// it that other nodes hand over later are dropped), then the counter keys
// removed from Redis. Snapshots, the audit log and idempotency records
// stay. Writes racing with it may survive.
func (b *Backend) FlushAll(ctx context.Context, _ contract.WriteOptions) error {
	if err := b.Flush(ctx); err != nil {
		return err
	}
	// Holding flushMu keeps a sketch flush that took the pending sketches
	// before the drop from writing them after the truncate.
	b.uq.flushMu.Lock()
	b.uq.drop("")
	err := b.pg.Truncate(ctx)
	b.uq.flushMu.Unlock()
	if err != nil {
		return unavailable(err)
	}
	if _, err = b.rs.FlushCounters(ctx); err != nil {
		return mapErr(err)
	}
	// The quota counts go too: the next creation recounts (quotas.go).
	return mapErr(b.rs.Client().Del(ctx, quotaKeys, quotaExpiring).Err())
}
