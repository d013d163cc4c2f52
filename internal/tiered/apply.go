package tiered

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/store/postgres"
	redisstore "github.com/counterd/counterd/internal/store/redis"
)

const (
	hllPrec     = 14 // Redis' HyperLogLog precision
	hllStdError = 0.0081
)

// limitsFor returns what Apply and ApplyBatch accept: the engine's
// defaults, with Redis's HLL precision and ids that keep their hash tag.
func limitsFor(maxBatch int) contract.Limits {
	l := contract.DefaultLimits()
	if maxBatch > 0 {
		l.MaxBatch = maxBatch
	}
	l.HLLPrecision = hllPrec
	l.RedisHashTags = true
	return l
}

// Apply applies one mutation: in Redis, then handed to the write-behind.
// A sync write returns once the PostgreSQL batch holding it committed.
func (b *Backend) Apply(ctx context.Context, op contract.Op, wo contract.WriteOptions) (contract.Result, error) {
	if err := op.Validate(b.limits); err != nil {
		return contract.Result{}, err
	}
	if err := refuseFloatFields(&op); err != nil {
		return contract.Result{}, err
	}
	res, err := b.applyKeyed(ctx, []contract.Op{op}, wo, false)
	if err != nil {
		return contract.Result{}, err
	}
	return res[0], nil
}

// ApplyBatch applies ops in order. Every op is validated first, so bad
// input changes nothing. When an op fails at run time (wrong kind,
// overflow), the adds and hash adds already applied are undone by their
// inverse; other ops of the batch (set, delete, expire, pfadd, pfmerge,
// hdel) cannot be undone, and readers may see a batch half applied (Redis
// keys of different ids are not updated atomically).
func (b *Backend) ApplyBatch(ctx context.Context, ops []contract.Op, wo contract.WriteOptions) ([]contract.Result, error) {
	if err := contract.ValidateBatch(ops, b.limits); err != nil {
		return nil, err
	}
	for i := range ops {
		if err := refuseFloatFields(&ops[i]); err != nil {
			return nil, &contract.BatchError{Index: i, Err: err}
		}
	}
	return b.applyKeyed(ctx, ops, wo, true)
}

// refuseFloatFields refuses float hash fields (HINCRBYFLOAT, HSET of a
// float) and sets of a float value (SET k 1.5): the write-behind keeps hash fields as int64 deltas in
// PostgreSQL's counter_fields, which cannot hold them yet
// (Capabilities.FloatHashFields is false).
func refuseFloatFields(op *contract.Op) error {
	if op.Type == contract.OpSet && op.Float != "" {
		return fmt.Errorf("%w: %q: a set of a float value is not supported in the tiered mode (add it with a float increment)", contract.ErrInvalidArgument, op.ID)
	}
	if op.Type != contract.OpHAdd && op.Type != contract.OpHSet {
		return nil
	}
	for _, f := range op.Fields {
		if f.Float != "" {
			return fmt.Errorf("%w: %q field %q: float hash fields are not supported in the tiered mode", contract.ErrInvalidArgument, op.ID, f.Name)
		}
	}
	return nil
}

// applyKeyed applies ops under wo's idempotency key (if any) and waits
// for durability. In a batch a failing op's error names it (BatchError).
func (b *Backend) applyKeyed(ctx context.Context, ops []contract.Op, wo contract.WriteOptions, batch bool) ([]contract.Result, error) {
	start := time.Now()
	var res []contract.Result
	var err error
	if wo.IdempotencyKey != "" {
		res, err = b.idempotent(ctx, wo.IdempotencyKey, ops, func(ctx context.Context) ([]contract.Result, error) { return b.applyAll(ctx, ops, batch) })
	} else {
		res, err = b.applyAll(ctx, ops, batch)
	}
	if err != nil {
		return nil, err
	}
	return res, b.durable(ctx, wo, start)
}

// durable waits, for a sync write, until every delta handed to the
// aggregator so far is committed in PostgreSQL, at most until SyncTimeout
// after the request started (a keyed request may have waited for another
// one's claim, or for the durable tier, before it applied).
func (b *Backend) durable(ctx context.Context, wo contract.WriteOptions, start time.Time) error {
	d := wo.Durability
	if d == contract.DurabilityDefault {
		d = b.opts.Durability
	}
	if d != contract.Sync {
		return nil
	}
	ctx, cancel := context.WithDeadline(ctx, start.Add(b.opts.SyncTimeout))
	defer cancel()
	if err := b.agg.Sync(ctx); err != nil {
		return &storeError{sentinel: ErrUnavailable, cause: err,
			msg: "engine: unavailable: sync write not yet committed in PostgreSQL (it is applied and will be written when PostgreSQL answers)"}
	}
	return nil
}

// applyAll applies ops in order; on a failure it undoes what it can (see
// ApplyBatch).
func (b *Backend) applyAll(ctx context.Context, ops []contract.Op, batch bool) ([]contract.Result, error) {
	res := make([]contract.Result, len(ops))
	for i := range ops {
		r, err := b.apply(ctx, &ops[i])
		if err != nil {
			b.undo(ctx, ops[:i])
			if !batch {
				return nil, err
			}
			return nil, &contract.BatchError{Index: i, Err: err}
		}
		res[i] = r
	}
	b.ops.Add(uint64(len(ops)))
	return res, nil
}

// undo applies the inverse of the invertible ops (add, hash add) in
// reverse order. Errors are logged: the batch already failed.
func (b *Backend) undo(ctx context.Context, done []contract.Op) {
	for i := len(done) - 1; i >= 0; i-- {
		inv, ok := inverse(done[i])
		if !ok {
			continue
		}
		if _, err := b.apply(ctx, &inv); err != nil {
			b.opts.Logger.Error("tiered: undoing a failed batch", "id", inv.ID, "err", err)
		}
	}
}

func inverse(op contract.Op) (contract.Op, bool) {
	switch op.Type {
	case contract.OpAdd:
		if op.Delta == -op.Delta && op.Delta != 0 { // MinInt64 has no inverse
			return op, false
		}
		op.Delta = -op.Delta
		return op, true
	case contract.OpHAdd:
		fs := make([]counter.FieldDelta, len(op.Fields))
		for i, f := range op.Fields {
			if f.Delta == -f.Delta && f.Delta != 0 {
				return op, false
			}
			fs[i] = counter.FieldDelta{Name: f.Name, Delta: -f.Delta}
		}
		op.Fields = fs
		return op, true
	}
	return op, false
}

// opFunc applies one validated op of its type.
type opFunc func(b *Backend, ctx context.Context, op *contract.Op) (contract.Result, error)

var opFuncs = map[contract.OpType]opFunc{
	contract.OpAdd:     (*Backend).add,
	contract.OpSet:     (*Backend).set,
	contract.OpDelete:  (*Backend).del,
	contract.OpExpire:  (*Backend).expire,
	contract.OpPFAdd:   (*Backend).pfadd,
	contract.OpPFMerge: (*Backend).pfmerge,
	contract.OpHAdd:    (*Backend).hadd,
	contract.OpHDel:    (*Backend).hdel,
	contract.OpHSet:    (*Backend).hset,
}

// apply runs one validated op.
func (b *Backend) apply(ctx context.Context, op *contract.Op) (contract.Result, error) {
	f, ok := opFuncs[op.Type]
	if !ok {
		return contract.Result{}, fmt.Errorf("%w: %s is not supported in the tiered mode", contract.ErrInvalidArgument, op.Type)
	}
	if op.ExpireAt != 0 { // Redis keeps relative TTLs here
		o := *op
		o.ResolveExpireAt(b.opts.Now())
		op = &o
	}
	ctx = context.WithValue(ctx, writingKey{}, true)
	var c *creation
	if creates(op.Type) {
		if ref, ok := b.quotaRefOf(op.ID); ok {
			c = &creation{id: op.ID, ref: ref}
			ctx = context.WithValue(ctx, creationKey{}, c)
		}
	}
	res, err := f(b, ctx, op)
	if c != nil {
		b.settle(c, res, err)
	}
	if err != nil {
		return contract.Result{}, mapOpErr(op.ID, err)
	}
	res.ID = op.ID
	if res.Version > 0 && op.Type != contract.OpAdd { // add records it with its delta
		b.agg.SetVersion(op.ID, res.Version)
	}
	return res, nil
}

var storeKinds = map[contract.Kind]redisstore.Kind{
	contract.KindNone:    redisstore.KindAuto,
	contract.KindCounter: redisstore.KindCounter,
	contract.KindSharded: redisstore.KindSharded,
	contract.KindPN:      redisstore.KindPN,
	contract.KindWindow:  redisstore.KindWindow,
	contract.KindHash:    redisstore.KindHash,
	contract.KindHLL:     redisstore.KindHLL,
	contract.KindFloat:   redisstore.KindFloat,
}

func engineKind(k redisstore.Kind) contract.Kind {
	for ek, sk := range storeKinds {
		if sk == k && ek != contract.KindNone {
			return ek
		}
	}
	return contract.KindNone
}

// afterAddScript, when set (tests only), runs after an add's Redis script
// and before its delta is handed to the write-behind.
var afterAddScript func(id string)

func (b *Backend) add(ctx context.Context, op *contract.Op) (contract.Result, error) {
	if op.Kind == contract.KindFloat {
		return b.addFloat(ctx, op)
	}
	o := redisstore.AddOptions{Shards: op.Shards, Window: op.Window, At: op.At}
	if op.Shard > 0 { // engine: Shard n>0 is shard n-1; 0 is any
		o.Fixed, o.Shard = true, op.Shard-1
	}
	var r redisstore.AddReply
	var err error
	at := b.opts.Now()
	if op.At != 0 { // rollups by event time
		at = time.Unix(0, op.At)
	}
	var gen uint64
	var j *redisstore.Journal
	jd, release := false, func() {}
	ctx, life := withLife(ctx)
	mw := markedOf(ctx)
	if mw != nil { // countermarks.go
		if r, mw.reply, err = b.rs.AddMarked(ctx, op.ID, storeKinds[op.Kind], op.Delta, o, mw.marks); err == nil && !mw.reply.Written() {
			return contract.Result{}, nil
		}
	} else { // the coalesced journal (journal.go)
		var jctx context.Context
		jctx, gen, release = b.jbegin(ctx)
		defer release()
		j = b.journalOf(op.ID, gen, at)
		r, jd, err = b.rs.AddJournaled(jctx, op.ID, storeKinds[op.Kind], op.Delta, o, j)
	}
	if err != nil {
		return contract.Result{}, err
	}
	if afterAddScript != nil { // tests: between the Redis script and the hand-over
		afterAddScript(op.ID)
	}
	if r.FromFloat {
		release()
		if err := b.fromFloat(ctx, op.ID, r.Value, r.Version, *life); err != nil {
			return contract.Result{}, err
		}
		return contract.Result{Kind: contract.KindCounter, Value: r.Value, Version: r.Version, Changed: true}, nil
	}
	switch {
	case jd:
		b.handJournaled(ctx, gen, j, []postgres.JournalDelta{{ID: op.ID, Kind: string(r.Kind), Shard: r.Shard, Delta: op.Delta, At: at, Version: r.Version, Life: *life}})
	case mw == nil || !b.journaled(mw, []postgres.Delta{{CounterID: op.ID, Kind: string(r.Kind), Shard: r.Shard, Delta: op.Delta, At: at, Life: *life}}, op.ID, r.Version):
		b.agg.AddVersion(op.ID, string(r.Kind), r.Shard, op.Delta, at, r.Version, *life)
	}
	return contract.Result{Kind: engineKind(r.Kind), Value: r.Value, Version: r.Version, Changed: true}, nil
}

func (b *Backend) set(ctx context.Context, op *contract.Op) (contract.Result, error) {
	ttl, expected, skip, err := b.setPlan(ctx, op)
	if err != nil || skip {
		return contract.Result{Kind: contract.KindCounter}, err
	}
	jctx, gen, release := b.jbegin(ctx) // the coalesced journal (journal.go)
	defer release()
	jctx, life := withLife(jctx)
	now := b.opts.Now()
	j := b.journalOf(op.ID, gen, now)
	ver, prev, fromFloat, jd, err := b.rs.SetPrevKindJournaled(jctx, op.ID, op.Value, expected, ttl, j)
	if errors.Is(err, redisstore.ErrVersionConflict) && op.SetMode != contract.SetAlways && !op.CheckVersion {
		return contract.Result{Kind: contract.KindCounter}, nil // NX/XX lost a race: not applied
	}
	if err != nil {
		return contract.Result{}, err
	}
	// Wrapping subtraction: the aggregated delta brings PostgreSQL to
	// the same value (see docs/postgres.md for the int64-edge caveat).
	switch {
	case fromFloat:
		release()
		if err := b.fromFloat(ctx, op.ID, op.Value, ver, *life); err != nil {
			return contract.Result{}, err
		}
	case jd:
		b.handJournaled(ctx, gen, j, []postgres.JournalDelta{{ID: op.ID, Kind: string(redisstore.KindCounter), Shard: -1, Delta: op.Value - prev, At: now, Life: *life}})
	default:
		b.agg.AddVersion(op.ID, string(redisstore.KindCounter), -1, op.Value-prev, now, 0, *life)
	}
	b.agg.SetExpiry(op.ID, b.expiryAt(ttl))
	if err := b.expiring(ctx, op.ID, ttl); err != nil {
		return contract.Result{}, err
	}
	return contract.Result{Kind: contract.KindCounter, Value: op.Value, Version: ver, Changed: true}, nil
}

// setPlan works out the TTL and version condition of a set; skip is true
// when SET NX/XX does not apply.
func (b *Backend) setPlan(ctx context.Context, op *contract.Op) (ttl time.Duration, expected *uint64, skip bool, err error) {
	ttl = op.TTL
	if op.CheckVersion {
		v := op.ExpectedVersion
		expected = &v
	}
	if op.SetMode == contract.SetAlways && !op.KeepTTL {
		return ttl, expected, false, nil
	}
	rec, found, err := b.rs.Get(ctx, op.ID)
	if err != nil {
		return 0, nil, false, err
	}
	switch {
	case op.SetMode == contract.SetIfAbsent && found, op.SetMode == contract.SetIfExists && !found:
		return 0, nil, true, nil
	case op.SetMode == contract.SetIfAbsent && expected == nil:
		var zero uint64
		expected = &zero
	case op.SetMode == contract.SetIfExists && expected == nil:
		v := rec.Version
		expected = &v
	}
	if op.KeepTTL && found && ttl == 0 {
		ttl = rec.TTL
	}
	return ttl, expected, false, nil
}

func (b *Backend) expiryAt(ttl time.Duration) time.Time {
	if ttl <= 0 {
		return time.Time{}
	}
	return b.opts.Now().Add(ttl)
}

func (b *Backend) del(ctx context.Context, op *contract.Op) (contract.Result, error) {
	// Read through first: a counter only PostgreSQL holds exists too.
	rec, found, err := b.rs.Get(ctx, op.ID)
	if err != nil {
		return contract.Result{}, err
	}
	existed, life, err := b.rs.DeleteLife(ctx, op.ID)
	if err != nil {
		return contract.Result{}, err
	}
	if !found {
		return contract.Result{}, nil
	}
	if existed {
		if err := b.deleted(ctx, op.ID); err != nil {
			return contract.Result{}, err
		}
	}
	b.agg.DeleteLife(op.ID, life)
	if rec.Kind == redisstore.KindHLL {
		if err := b.deleteUniques(ctx, op.ID); err != nil {
			return contract.Result{}, err
		}
	}
	return contract.Result{Kind: engineKind(rec.Kind), Changed: true}, nil
}

func (b *Backend) expire(ctx context.Context, op *contract.Op) (contract.Result, error) {
	if op.TTL < 0 { // a time in the past: deleted, as in Redis and the engine
		return b.del(ctx, op)
	}
	rec, found, err := b.rs.Get(ctx, op.ID) // read through, so Redis has it
	if err != nil || !found {
		return contract.Result{}, err
	}
	ok, ver, err := b.rs.ExpireVersion(ctx, op.ID, op.TTL)
	if err != nil || !ok {
		return contract.Result{}, err
	}
	b.agg.SetExpiry(op.ID, b.expiryAt(op.TTL))
	if err := b.expiring(ctx, op.ID, op.TTL); err != nil {
		return contract.Result{}, err
	}
	return contract.Result{Kind: engineKind(rec.Kind), Value: rec.Value, Version: ver, Changed: true}, nil
}

func (b *Backend) pfadd(ctx context.Context, op *contract.Op) (contract.Result, error) {
	ctx, life := withLife(ctx)
	changed, ver, err := b.rs.PFAddVersion(ctx, op.ID, op.Items...)
	if err != nil {
		return contract.Result{}, err
	}
	res := contract.Result{Kind: contract.KindHLL, Version: ver, Changed: changed}
	if err := b.addUniques(ctx, op.ID, op.Items, op.At); err != nil {
		return contract.Result{}, err
	}
	if changed {
		if err := b.writeSketch(ctx, op.ID, *life); err != nil {
			return contract.Result{}, err
		}
	}
	if op.Estimate {
		n, err := b.rs.PFCount(ctx, op.ID)
		if err != nil {
			return contract.Result{}, err
		}
		res.Value = n
	}
	return res, nil
}

// writeSketch hands id's current Redis HLL, of its life, to the
// write-behind (PostgreSQL keeps the latest full sketch).
func (b *Backend) writeSketch(ctx context.Context, id string, life uint64) error {
	raw, err := b.rs.RawHLL(ctx, id)
	if err != nil {
		return err
	}
	if raw != nil {
		b.agg.SetSketchLife(id, raw, life)
	}
	return nil
}

func (b *Backend) pfmerge(ctx context.Context, op *contract.Op) (contract.Result, error) {
	ctx, life := withLife(ctx)
	est, ver, err := b.rs.PFMerge(ctx, op.ID, op.Sources)
	if err != nil {
		return contract.Result{}, err
	}
	if err := b.writeSketch(ctx, op.ID, *life); err != nil {
		return contract.Result{}, err
	}
	return contract.Result{Kind: contract.KindHLL, Value: est, Version: ver, Changed: true}, nil
}

func (b *Backend) hadd(ctx context.Context, op *contract.Op) (contract.Result, error) {
	var fields []counter.Field
	var ver uint64
	var err error
	var gen uint64
	var j *redisstore.Journal
	jd := false
	now := b.opts.Now()
	ctx, life := withLife(ctx)
	mw := markedOf(ctx)
	if mw != nil { // countermarks.go
		if fields, ver, mw.reply, err = b.rs.HAddMarked(ctx, op.ID, op.Fields, b.maxFields(op.ID), mw.marks); err == nil && !mw.reply.Written() {
			return contract.Result{}, nil
		}
	} else { // the coalesced journal (journal.go)
		jctx, g, release := b.jbegin(ctx)
		defer release()
		gen, j = g, b.journalOf(op.ID, g, now)
		fields, ver, jd, err = b.rs.HAddJournaled(jctx, op.ID, op.Fields, b.maxFields(op.ID), j)
	}
	if err != nil {
		return contract.Result{}, b.fieldLimitErr(op.ID, err)
	}
	switch {
	case jd:
		ds := make([]postgres.JournalDelta, len(op.Fields))
		for i, f := range op.Fields {
			ds[i] = postgres.JournalDelta{ID: op.ID, Kind: postgres.KindHash, Shard: -1, Field: f.Name, Delta: f.Delta, At: now, Version: ver, Life: *life}
		}
		b.handJournaled(ctx, gen, j, ds)
	case mw == nil || !b.journaled(mw, b.fieldDeltas(op, *life), op.ID, ver):
		b.writeFields(op.ID, op.Fields, *life)
	}
	return contract.Result{Kind: contract.KindHash, Version: ver, Changed: true, Fields: uniqueFields(fields)}, nil
}

func (b *Backend) hset(ctx context.Context, op *contract.Op) (contract.Result, error) {
	fs := make([]counter.Field, len(op.Fields))
	for i, f := range op.Fields {
		fs[i] = counter.Field{Name: f.Name, Value: f.Delta}
	}
	ctx, life := withLife(ctx)
	created, ver, deltas, err := b.rs.HSetMax(ctx, op.ID, fs, op.SetMode == contract.SetIfAbsent, b.maxFields(op.ID))
	if err != nil {
		return contract.Result{}, b.fieldLimitErr(op.ID, err)
	}
	b.writeFields(op.ID, deltas, *life)
	changed := len(deltas) > 0
	return contract.Result{Kind: contract.KindHash, Value: int64(created), Version: ver, Changed: changed}, nil
}

// uniqueFields keeps the last value of each name, in the order names first
// appear, as the embedded engine reports a hash add that names a field
// twice (Redis answers once per delta).
func uniqueFields(fs []counter.Field) []counter.Field {
	out := fs[:0:0]
	at := make(map[string]int, len(fs))
	for _, f := range fs {
		if i, ok := at[f.Name]; ok {
			out[i].Value = f.Value
			continue
		}
		at[f.Name] = len(out)
		out = append(out, f)
	}
	return out
}

// writeFields hands hash field deltas of the counter's life to the
// write-behind.
func (b *Backend) writeFields(id string, fs []counter.FieldDelta, life uint64) {
	now := b.opts.Now()
	for _, f := range fs {
		b.agg.AddFieldLife(id, f.Name, f.Delta, now, life)
	}
}

func (b *Backend) hdel(ctx context.Context, op *contract.Op) (contract.Result, error) {
	ctx, life := withLife(ctx)
	removed, ver, err := b.rs.HDel(ctx, op.ID, op.Names)
	if err != nil {
		return contract.Result{}, err
	}
	undo := make([]counter.FieldDelta, len(removed))
	for i, f := range removed {
		undo[i] = counter.FieldDelta{Name: f.Name, Delta: -f.Value}
	}
	b.writeFields(op.ID, undo, *life)
	if len(removed) > 0 {
		if err := b.dropEmptyHash(ctx, op.ID, ver); err != nil {
			return contract.Result{}, err
		}
	}
	return contract.Result{Kind: contract.KindHash, Value: int64(len(removed)), Version: ver, Changed: len(removed) > 0}, nil
}

// dropEmptyHash deletes the hash id if HDEL at version ver removed its last
// field: like Redis (and the embedded engine), a hash without fields does
// not exist. A hash add landing between the read and the delete is lost
// with it; the version check keeps that window to one round trip.
func (b *Backend) dropEmptyHash(ctx context.Context, id string, ver uint64) error {
	rec, found, err := b.rs.Get(ctx, id)
	if err != nil || !found || rec.Kind != redisstore.KindHash || rec.Version != ver || len(rec.Fields) > 0 {
		return err
	}
	existed, life, err := b.rs.DeleteLife(ctx, id)
	if err != nil {
		return err
	}
	b.agg.DeleteLife(id, life)
	if existed {
		return b.deleted(ctx, id)
	}
	return nil
}

// addFloat runs Redis's own INCRBYFLOAT (so the arithmetic and the text are
// Redis's by construction) and hands the new text to the write-behind.
func (b *Backend) addFloat(ctx context.Context, op *contract.Op) (contract.Result, error) {
	ctx, life := withLife(ctx)
	text, ver, prev, converted, err := b.rs.AddFloat(ctx, op.ID, op.Float)
	if err != nil {
		return contract.Result{}, err
	}
	if converted && prev != 0 {
		// PostgreSQL keeps a float's value column at 0.
		b.agg.AddVersion(op.ID, string(redisstore.KindCounter), -1, -prev, b.opts.Now(), 0, *life)
	}
	b.agg.SetFloat(op.ID, text, ver, *life)
	return contract.Result{Kind: contract.KindFloat, Float: text, Version: ver, Changed: true}, nil
}

// fromFloat hands the write-behind a float that became a counter: first
// everything pending (so the float's own row change commits before), then
// the counter's absolute value (PostgreSQL holds 0 for a float).
func (b *Backend) fromFloat(ctx context.Context, id string, value int64, ver, life uint64) error {
	letGo(ctx) // a keyed request's hold would keep Sync waiting for itself
	if err := b.agg.Sync(ctx); err != nil {
		return unavailable(err)
	}
	now := b.opts.Now()
	if mw := markedOf(ctx); mw == nil || !b.journaled(mw, []postgres.Delta{{CounterID: id, Kind: string(redisstore.KindCounter), Shard: -1, Delta: value, At: now, Life: life}}, id, ver) {
		b.agg.AddVersion(id, string(redisstore.KindCounter), -1, value, now, ver, life)
	}
	return nil
}

// fieldDeltas is a hash add's write-behind deltas, at now, of the
// counter's life.
func (b *Backend) fieldDeltas(op *contract.Op, life uint64) []postgres.Delta {
	now := b.opts.Now()
	ds := make([]postgres.Delta, len(op.Fields))
	for i, f := range op.Fields {
		ds[i] = postgres.Delta{CounterID: op.ID, Kind: postgres.KindHash, Shard: -1, Field: f.Name, Delta: f.Delta, At: now, Life: life}
	}
	return ds
}

// withLife returns ctx whose store write reports, in *life, the life of
// the counter it wrote (docs/redis-tier.md, "Deletes and lives"), which
// its write-behind changes carry.
func withLife(ctx context.Context) (context.Context, *uint64) {
	life := new(uint64)
	return redisstore.WithLife(ctx, life), life
}

// writingKey marks the ctx of a write (apply): its read-through of a
// counter PostgreSQL lacks leaves a tombstone at least at the flush
// epoch's floor (load).
type writingKey struct{}

func writing(ctx context.Context) bool { return ctx.Value(writingKey{}) != nil }
