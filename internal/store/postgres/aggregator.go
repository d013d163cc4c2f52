package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultFlushInterval is the Aggregator's default write-behind period.
const DefaultFlushInterval = time.Second

// AggregatorOptions configure NewAggregator.
type AggregatorOptions struct {
	// FlushInterval is the write-behind period (default 1 s). Negative: no
	// background loop (Flush must be called).
	FlushInterval time.Duration
	// NodeID prefixes batch ids (default: random). Batch ids are
	// NodeID-<random per aggregator>-<sequence>.
	NodeID string
	// OnError is called (from the flush loop) when a flush fails; the batch
	// is retried with the same id on the next flush.
	OnError func(error)
	// OnFlush is called (from the flush loop) after a flush succeeded.
	OnFlush func()
	// OnCommit, if set, is called with every batch once it is committed
	// (by Flush, before it returns): the tiered mode trims the journal
	// entries of the batch's journaled writes.
	OnCommit func(Batch)
	// MaxHoldWait bounds how long a flush waits for holders (Hold)
	// before it cuts a batch anyway (default 100 ms): a holder slower
	// than that (its store not answering) may see its later changes go
	// into the next batch, and the holders and flushes behind it wait no
	// longer than that.
	MaxHoldWait time.Duration
	// JournalID, if set, names the JournalWrite that carries a cycle's
	// journaled deltas (AddJournaled), by the cycle's generation: the
	// tiered mode's coalesced journal.
	JournalID func(gen uint64) string
}

type aggKeyMem struct {
	id, kind, field string
	shard           int
	minute          int64  // unix minute of the delta's time
	life            uint64 // Delta.Life
}

// cycle is one flush: every delta added while it is current goes into the
// batch it becomes; done is closed once that batch is committed.
type cycle struct {
	done chan struct{}
	gen  uint64 // Gen
}

// Aggregator accumulates deltas in memory (local aggregation: N increments
// of one counter in one minute become one row change) and writes them
// behind to the Store in batches applied exactly once.
type Aggregator struct {
	s      *Store
	opts   AggregatorOptions
	prefix string
	seq    atomic.Uint64

	mu      sync.Mutex
	pending map[aggKeyMem]int64
	sketch  map[string]sketchValue
	floats  map[string]floatValue // latest float value per id (higher version wins)
	deletes map[string]uint64     // deleted ids: the highest life deleted (0: unknown)
	expiry  map[string]time.Time  // zero: remove the TTL
	version map[string]uint64     // latest version seen per id (max wins)
	dirty   map[string]bool       // ids with anything in pending/sketch/expiry/deletes
	flying  map[string]bool       // ids in the in-flight batch
	idem    map[string]IdemRecord // idempotency records, by key
	journal []JournalWrite        // journaled writes (AddJournal)
	// jpending are the journaled deltas of the cycle (AddJournaled):
	// applied as one JournalWrite named by the cycle's generation.
	jpending map[aggKeyMem]int64
	jdropped []aggKeyMem // of jpending, dropped by a Delete (JournalWrite.Trim)
	gens     uint64
	gen      atomic.Uint64 // the current cycle's generation (Gen)
	// idemFlying are the records of the in-flight batch.
	idemFlying map[string]IdemRecord
	cur        *cycle

	// holds keep a cycle open: a writer holding it (Hold) hands all of
	// its changes to one cycle, which Flush cuts once it is let go (or
	// MaxHoldWait passed).
	holds holds

	flushMu  sync.Mutex // serialises flushes; guards inflight
	inflight *inflightBatch

	adds atomic.Uint64

	kick      chan struct{}
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

type inflightBatch struct {
	b   Batch
	cyc *cycle
}

// NewAggregator starts an aggregator writing to s.
func (s *Store) NewAggregator(opts AggregatorOptions) *Aggregator {
	if opts.FlushInterval == 0 {
		opts.FlushInterval = DefaultFlushInterval
	}
	if opts.MaxHoldWait <= 0 {
		opts.MaxHoldWait = DefaultMaxHoldWait
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	prefix := hex.EncodeToString(rnd[:])
	if opts.NodeID != "" {
		prefix = opts.NodeID + "-" + prefix
	}
	a := &Aggregator{
		s: s, opts: opts, prefix: prefix,
		cur:  &cycle{done: make(chan struct{})},
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
	a.holds.maxWait = opts.MaxHoldWait
	a.reset()
	if opts.FlushInterval > 0 {
		go a.loop()
	} else {
		close(a.done)
	}
	return a
}

// Add records delta for a counter of the given kind (shard -1: none) at
// time at (zero: now). It returns immediately (async durability).
func (a *Aggregator) Add(id, kind string, shard int, delta int64, at time.Time) {
	a.add(aggKeyMem{id: id, kind: kind, shard: shard}, delta, at, 0)
}

// AddVersion is Add and SetVersion under one lock (the tiered hot path),
// of the counter's life (Delta.Life; 0: none known).
func (a *Aggregator) AddVersion(id, kind string, shard int, delta int64, at time.Time, version, life uint64) {
	a.add(aggKeyMem{id: id, kind: kind, shard: shard, life: life}, delta, at, version)
}

// AddField records delta for one field of a hash counter.
func (a *Aggregator) AddField(id, field string, delta int64, at time.Time) {
	a.AddFieldLife(id, field, delta, at, 0)
}

// AddFieldLife is AddField of the counter's life (Delta.Life).
func (a *Aggregator) AddFieldLife(id, field string, delta int64, at time.Time, life uint64) {
	a.add(aggKeyMem{id: id, kind: KindHash, field: field, shard: -1, life: life}, delta, at, 0)
}

// floatValue is a float counter's text at a version of a life.
type floatValue struct {
	text          string
	version, life uint64
}

// sketchValue is an hll counter's sketch of a life.
type sketchValue struct {
	sketch []byte
	life   uint64
}

// SetFloat records the value of the float counter id at version, of its
// life (the higher life, then version wins, so writers handing values
// over out of order leave the newest), and raises id's version like
// SetVersion.
func (a *Aggregator) SetFloat(id, text string, version, life uint64) {
	a.adds.Add(1)
	a.mu.Lock()
	if f, ok := a.floats[id]; !ok || life > f.life || life == f.life && version >= f.version {
		a.floats[id] = floatValue{text, version, life}
	}
	if version > a.version[id] {
		a.version[id] = version
	}
	a.dirty[id] = true
	a.mu.Unlock()
}

// SetSketch records the current full HLL sketch of id (latest wins).
func (a *Aggregator) SetSketch(id string, sketch []byte) { a.SetSketchLife(id, sketch, 0) }

// SetSketchLife is SetSketch of the counter's life (Delta.Life): a
// sketch of an older life than the one recorded is dropped.
func (a *Aggregator) SetSketchLife(id string, sketch []byte, life uint64) {
	a.adds.Add(1)
	a.mu.Lock()
	if sk, ok := a.sketch[id]; !ok || life >= sk.life {
		a.sketch[id] = sketchValue{append([]byte(nil), sketch...), life}
	}
	a.dirty[id] = true
	a.mu.Unlock()
}

// Delete records that id was deleted: deltas of id added before are
// dropped, and the batch deletes the counter (its shards, fields and
// sketch) before applying the deltas added after. Time-series buckets
// already written are kept.
func (a *Aggregator) Delete(id string) { a.DeleteLife(id, 0) }

// DeleteLife is Delete of the counter's life (Batch.DeadLives): what is
// pending of that life or an older one (or of none known) is dropped,
// what is of a later life (handed over before the delete's call) is kept,
// and PostgreSQL applies the delete by life (lives.go).
func (a *Aggregator) DeleteLife(id string, life uint64) {
	a.adds.Add(1)
	a.mu.Lock()
	a.dropLocked(id, life)
	if l, ok := a.deletes[id]; !ok || life > l {
		a.deletes[id] = life
	}
	a.dirty[id] = true
	a.mu.Unlock()
}

// AddJournal records a journaled write (JournalWrite: its deltas apply
// once however often it is handed over, here and by replays). Its deltas
// are not summed with others' in memory; a Delete of one of its counters
// drops its deltas and versions but keeps the write (and its id).
func (a *Aggregator) AddJournal(w JournalWrite) {
	a.adds.Add(1)
	a.mu.Lock()
	a.journal = append(a.journal, w)
	for _, d := range w.Deltas {
		a.dirty[d.CounterID] = true
	}
	for _, v := range w.Versions {
		a.dirty[v.ID] = true
	}
	a.mu.Unlock()
}

// SetExpiry records the time id expires (zero: never), written to
// counters.expires_at after the batch's deltas; latest wins.
func (a *Aggregator) SetExpiry(id string, at time.Time) {
	a.adds.Add(1)
	a.mu.Lock()
	a.expiry[id] = at
	a.dirty[id] = true
	a.mu.Unlock()
}

// dropLocked forgets what is pending for id of lives up to life (every
// life when life is 0), and of no known life. Caller holds a.mu.
func (a *Aggregator) dropLocked(id string, life uint64) {
	if !a.dirty[id] {
		return
	}
	dead := func(l uint64) bool { return life == 0 || l <= life }
	for k := range a.pending {
		if k.id == id && dead(k.life) {
			delete(a.pending, k)
		}
	}
	for k := range a.jpending {
		if k.id == id && dead(k.life) {
			delete(a.jpending, k)
			a.jdropped = append(a.jdropped, k)
		}
	}
	if sk, ok := a.sketch[id]; ok && dead(sk.life) {
		delete(a.sketch, id)
	}
	if f, ok := a.floats[id]; ok && dead(f.life) {
		delete(a.floats, id)
	}
	delete(a.expiry, id)
	delete(a.version, id)
	for i := range a.journal {
		w := &a.journal[i]
		w.Deltas = slices.DeleteFunc(w.Deltas, func(d Delta) bool { return d.CounterID == id && dead(d.Life) })
		w.Versions = slices.DeleteFunc(w.Versions, func(v Version) bool { return v.ID == id })
	}
}

// Hold keeps the current cycle open until the returned func is called
// (once; later calls do nothing): every change handed over in between
// goes into one batch (one transaction), such as a keyed request's
// deltas and its idempotency record. Flush waits for the holders, at most
// AggregatorOptions.MaxHoldWait, before it cuts a batch; a holder must not wait for a
// flush meanwhile (it would wait that long).
func (a *Aggregator) Hold() (release func()) { return a.holds.hold() }

// DefaultMaxHoldWait is AggregatorOptions.MaxHoldWait's default.
const DefaultMaxHoldWait = 100 * time.Millisecond

// holds counts the holders of the current cycle; a cutter (Flush) makes
// new holders wait until it has cut, and waits for the current ones at
// most maxWait.
type holds struct {
	maxWait time.Duration
	mu      sync.Mutex
	n       int
	cutting chan struct{} // closed when the cut is done; nil when none
	idle    chan struct{} // closed when n drops to 0 during a cut
}

func (h *holds) hold() func() {
	h.mu.Lock()
	for h.cutting != nil {
		c := h.cutting
		h.mu.Unlock()
		<-c
		h.mu.Lock()
	}
	h.n++
	h.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			h.n--
			if h.n == 0 && h.idle != nil {
				close(h.idle)
				h.idle = nil
			}
			h.mu.Unlock()
		})
	}
}

// cut waits until no one holds the cycle (at most maxWait), runs
// fn, and lets new holders in again.
func (h *holds) cut(fn func()) {
	h.mu.Lock()
	done := make(chan struct{})
	h.cutting = done
	var idle chan struct{}
	if h.n > 0 {
		idle = make(chan struct{})
		h.idle = idle
	}
	h.mu.Unlock()
	if idle != nil {
		t := time.NewTimer(h.maxWait)
		select {
		case <-idle:
		case <-t.C:
		}
		t.Stop()
	}
	fn()
	h.mu.Lock()
	h.cutting, h.idle = nil, nil
	h.mu.Unlock()
	close(done)
}

// AddIdem records an idempotency record, written in the batch of the
// changes handed over with it (see Hold). A key's first record wins (the
// store keeps the first too).
func (a *Aggregator) AddIdem(r IdemRecord) {
	a.adds.Add(1)
	a.mu.Lock()
	if _, ok := a.idem[r.Key]; !ok {
		a.idem[r.Key] = r
	}
	a.mu.Unlock()
}

// Idem returns key's record while it is handed over but not yet committed
// (pending or in flight): what Store.IdemRecord does not read yet.
func (a *Aggregator) Idem(key string) ([]byte, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r, ok := a.idemFlying[key]; ok {
		return r.Record, true
	}
	if r, ok := a.idem[key]; ok {
		return r.Record, true
	}
	return nil, false
}

// SetVersion records the version the hot tier gave id; the batch sets
// counters.version to at least it, so a counter loaded back from
// PostgreSQL does not see its version go backwards.
func (a *Aggregator) SetVersion(id string, v uint64) {
	a.mu.Lock()
	if v > a.version[id] {
		a.version[id] = v
		a.dirty[id] = true
	}
	a.mu.Unlock()
}

// Pending reports whether changes to id are not yet committed (pending or
// in flight). A read-through loader flushes first when they are, so that
// what it loads includes them.
func (a *Aggregator) Pending(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.dirty[id] || a.flying[id]
}

// Sync returns once everything added before the call is committed (or
// ctx ends); concurrent callers share one transaction (group commit).
func (a *Aggregator) Sync(ctx context.Context) error {
	a.mu.Lock()
	c := a.cur
	a.mu.Unlock()
	return a.wait(ctx, c)
}

// reset starts an empty current cycle. Caller holds a.mu (or owns a).
func (a *Aggregator) reset() {
	a.pending, a.sketch, a.floats = map[aggKeyMem]int64{}, map[string]sketchValue{}, map[string]floatValue{}
	a.deletes, a.expiry, a.dirty = map[string]uint64{}, map[string]time.Time{}, map[string]bool{}
	a.version = map[string]uint64{}
	a.idem = map[string]IdemRecord{}
	a.journal = nil
	a.jpending, a.jdropped = map[aggKeyMem]int64{}, nil
	a.gens++
	a.cur = &cycle{done: make(chan struct{}), gen: a.gens}
	a.gen.Store(a.gens)
}

// Gen returns the generation of the current cycle: a new one starts
// with every flush. A writer journaling its delta under a generation
// holds the cycle (Hold) from Gen until AddJournaled.
func (a *Aggregator) Gen() uint64 { return a.gen.Load() }

// JournalDelta is a journaled delta (AddJournaled): Field is a hash
// counter's field (Kind KindHash, Shard -1).
type JournalDelta struct {
	ID, Kind, Field string
	Shard           int
	Delta           int64
	At              time.Time
	Version         uint64
	Life            uint64 // Delta.Life
}

// AddJournaled records ds, journaled under generation gen, if gen is
// still the current cycle's, and reports whether it did (else the
// caller journals it again under the current generation). The cycle's
// journaled deltas are summed per counter, kind, shard, field and minute
// and applied as one JournalWrite (AggregatorOptions.JournalID), so a
// replay of the generation's journal applies them once however often
// it runs; the version is recorded as SetVersion does.
func (a *Aggregator) AddJournaled(gen uint64, ds ...JournalDelta) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cur.gen != gen || a.opts.JournalID == nil {
		return false
	}
	a.adds.Add(1)
	for _, d := range ds {
		k := aggKeyMem{id: d.ID, kind: d.Kind, field: d.Field, shard: d.Shard, minute: d.At.Unix() / 60, life: d.Life}
		if k.kind == "" {
			k.kind = KindCounter
		}
		a.jpending[k] += d.Delta
		a.dirty[k.id] = true
		if d.Version > a.version[k.id] {
			a.version[k.id] = d.Version
		}
	}
	return true
}

func (a *Aggregator) add(k aggKeyMem, delta int64, at time.Time, version uint64) *cycle {
	if at.IsZero() {
		at = time.Now()
	}
	k.minute = at.Unix() / 60
	if k.kind == "" {
		k.kind = KindCounter
	}
	a.adds.Add(1)
	a.mu.Lock()
	a.pending[k] += delta
	a.dirty[k.id] = true
	if version > a.version[k.id] {
		a.version[k.id] = version
	}
	c := a.cur
	a.mu.Unlock()
	return c
}

// AddSync is Add for a sync writer: it returns once the batch holding the
// delta is committed in PostgreSQL (or ctx ends; the delta then stays
// queued and is still written). It triggers a flush rather than waiting for
// the next tick; concurrent sync writers share one transaction.
func (a *Aggregator) AddSync(ctx context.Context, id, kind string, shard int, delta int64, at time.Time) error {
	c := a.add(aggKeyMem{id: id, kind: kind, shard: shard}, delta, at, 0)
	return a.wait(ctx, c)
}

func (a *Aggregator) wait(ctx context.Context, c *cycle) error {
	if a.opts.FlushInterval < 0 {
		// no loop: flush ourselves until our cycle is committed
		for {
			select {
			case <-c.done:
				return nil
			default:
			}
			if err := a.Flush(ctx); err != nil {
				return err
			}
		}
	}
	select {
	case a.kick <- struct{}{}:
	default:
	}
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stats of an aggregator.
type AggregatorStats struct {
	Adds uint64 // Add/AddField/SetSketch calls
}

// Stats returns cumulative counts.
func (a *Aggregator) Stats() AggregatorStats { return AggregatorStats{Adds: a.adds.Load()} }

// Flush writes everything added before the call: first the batch left from
// a failed flush (same id, so it is applied at most once), then the deltas
// accumulated since. On error the unacknowledged batch is kept for the next
// Flush.
func (a *Aggregator) Flush(ctx context.Context) error {
	a.flushMu.Lock()
	defer a.flushMu.Unlock()
	if err := a.applyInflight(ctx); err != nil {
		return err
	}
	var pending map[aggKeyMem]int64
	var sketches map[string]sketchValue
	var deletes map[string]uint64
	var dirty map[string]bool
	var expiry map[string]time.Time
	var floats map[string]floatValue
	var versions map[string]uint64
	var idem map[string]IdemRecord
	var journal []JournalWrite
	var jpending map[aggKeyMem]int64
	var jdropped []aggKeyMem
	var cyc *cycle
	a.holds.cut(func() { // no holder between its first change and its last (Hold)
		a.mu.Lock()
		pending, sketches, deletes, expiry, dirty, cyc = a.pending, a.sketch, a.deletes, a.expiry, a.dirty, a.cur
		floats, versions, idem, journal, jpending, jdropped = a.floats, a.version, a.idem, a.journal, a.jpending, a.jdropped
		a.reset()
	}) // a.mu still held
	if len(dirty) == 0 && len(idem) == 0 && len(journal) == 0 {
		// Nothing to write: whoever waits on this cycle is done.
		a.mu.Unlock()
		close(cyc.done)
		return nil
	}
	a.flying = dirty
	a.idemFlying = idem
	a.mu.Unlock()

	b := Batch{ID: fmt.Sprintf("%s-%d", a.prefix, a.seq.Add(1)), Deltas: make([]Delta, 0, len(pending)+len(sketches)), Journal: journal}
	for id, life := range deletes {
		b.Deletes = append(b.Deletes, id)
		if life > 0 {
			if b.DeadLives == nil {
				b.DeadLives = map[string]uint64{}
			}
			b.DeadLives[id] = life
		}
	}
	for id, at := range expiry {
		b.Expiries = append(b.Expiries, Expiry{ID: id, At: at})
	}
	for id, v := range versions {
		b.Versions = append(b.Versions, Version{ID: id, Version: v})
	}
	for k, d := range pending {
		// A zero net delta is still written: it creates the counter (an
		// add of 0 creates one) and marks it updated.
		b.Deltas = append(b.Deltas, Delta{CounterID: k.id, Kind: k.kind, Shard: k.shard, Field: k.field, Delta: d,
			At: time.Unix(k.minute*60, 0).UTC(), Life: k.life})
	}
	for id, sk := range sketches {
		b.Deltas = append(b.Deltas, Delta{CounterID: id, Kind: KindHLL, Shard: -1, Sketch: sk.sketch, Life: sk.life})
	}
	for id, f := range floats {
		b.Deltas = append(b.Deltas, Delta{CounterID: id, Kind: KindFloat, Shard: -1, Float: f.text, Life: f.life})
	}
	for _, r := range idem {
		b.Idem = append(b.Idem, r)
	}
	if (len(jpending) > 0 || len(jdropped) > 0) && a.opts.JournalID != nil {
		w := JournalWrite{ID: a.opts.JournalID(cyc.gen), Gen: cyc.gen, Deltas: make([]Delta, 0, len(jpending))}
		for k, d := range jpending {
			w.Deltas = append(w.Deltas, Delta{CounterID: k.id, Kind: k.kind, Shard: k.shard, Field: k.field, Delta: d,
				At: time.Unix(k.minute*60, 0).UTC(), Life: k.life})
		}
		for _, k := range jdropped {
			w.Trim = append(w.Trim, Delta{CounterID: k.id, Kind: k.kind, Shard: k.shard, Field: k.field, At: time.Unix(k.minute*60, 0).UTC(), Life: k.life})
		}
		b.Journal = append(b.Journal, w)
	}
	a.inflight = &inflightBatch{b: b, cyc: cyc}
	return a.applyInflight(ctx)
}

func (a *Aggregator) applyInflight(ctx context.Context) error {
	in := a.inflight
	if in == nil {
		return nil
	}
	if !in.b.empty() {
		// applied=false means an earlier attempt committed: also success.
		if _, err := a.s.Apply(ctx, in.b); err != nil {
			return err
		}
	}
	a.inflight = nil
	a.mu.Lock()
	a.flying, a.idemFlying = nil, nil
	a.mu.Unlock()
	close(in.cyc.done)
	if a.opts.OnCommit != nil {
		a.opts.OnCommit(in.b)
	}
	return nil
}

func (a *Aggregator) loop() {
	defer close(a.done)
	t := time.NewTicker(a.opts.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-t.C:
		case <-a.kick:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := a.Flush(ctx)
		cancel()
		if err != nil && a.opts.OnError != nil {
			a.opts.OnError(err)
		}
		if err == nil && a.opts.OnFlush != nil {
			a.opts.OnFlush()
		}
	}
}

// Close stops the flush loop and makes a final Flush (bounded by ctx). It
// is idempotent; deltas that could not be written are reported in the error.
func (a *Aggregator) Close(ctx context.Context) error {
	var err error
	a.closeOnce.Do(func() {
		close(a.stop)
		<-a.done
		err = a.Flush(ctx)
	})
	return err
}
