// Package consumer applies events to counters exactly once.
//
// An Applier turns records into engine ops with the rules, coalesces them
// per counter and applies them in engine batches. Each event that changes
// something is deduplicated by its id: the batch that applies its effect
// also creates its marker "_events:<id>", which must not exist, with the
// rules file's dedupe TTL: a dedupe mark of the embedded engine
// (engine.MarkApplier), else a marker counter created with
// ExpectedVersion 0. Both land in one atomic engine batch, so an event is
// either applied with its marker or not at all; a redelivered or
// duplicated event finds its marker and is skipped, and a racing duplicate
// fails the batch with a version conflict on its marker and is dropped
// before the batch is retried. Every batch
// also carries an idempotency key derived from its stream position
// (source, partition, first and last offset.index), so a retried apply after an
// ambiguous error replays instead of applying again. The engine writes a
// batch with an idempotency key to disk atomically with its record (its
// flush gate), so each batch is applied asynchronously and one synced
// write at the end of Apply waits for all of them: on disk before the
// stream's offsets are committed.
//
// Run polls a stream.Consumer, applies, publishes dead letters and
// commits; it applies several polls before one wait for durability and
// one commit of them all (the commit interval, loop.go). Killed at any
// point, the records after the last commit are delivered again and
// skipped by their markers.
package consumer

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/pipeline/event"
	"github.com/counterd/counterd/internal/pipeline/rules"
	"github.com/counterd/counterd/internal/pipeline/stream"
	"github.com/counterd/counterd/internal/rollup"
	"github.com/counterd/counterd/internal/tracing"
)

// MarkerPrefix starts the id of every event-id marker counter.
const MarkerPrefix = engine.MarkerCounterPrefix

// MarkerID returns the marker counter of event id: MarkerPrefix + id, or
// MarkerPrefix + "#" + a SHA-256 prefix when that would be too long.
func MarkerID(id string) string {
	if plainMarker(id) {
		return MarkerPrefix + id
	}
	return hashedMarker(id)
}

// plainMarker reports whether the marker of event id is MarkerPrefix + id.
func plainMarker(id string) bool {
	return len(MarkerPrefix)+len(id) <= contract.MaxIDLen && id != "" && id[0] != '#'
}

// markerOf is MarkerID(id) given prefixed, MarkerPrefix + id
// (event.DecodeIntoPrefixed): no copy of it when it is the marker.
func markerOf(id, prefixed string) string {
	if plainMarker(id) {
		return prefixed
	}
	return hashedMarker(id)
}

func hashedMarker(id string) string {
	sum := sha256.Sum256([]byte(id))
	return MarkerPrefix + "#" + hex.EncodeToString(sum[:16])
}

// atomicBatchOps bounds a batch applied with engine.AtomicApplier: big
// enough that events of the same counters coalesce, small enough that
// the flusher does not wait long for its locks.
const atomicBatchOps = 16384

// Applier applies records exactly once. Safe for concurrent use; SetRules
// swaps the rules atomically.
type Applier struct {
	be      contract.Backend
	rules   atomic.Pointer[rules.Set]
	limits  event.Limits
	opLim   contract.Limits // the backend's, zero fields defaulted (once, not per op)
	maxOps  int
	m       *Metrics
	atomic  engine.AtomicApplier   // be's, when it has one
	marks   engine.MarkApplier     // be's, when it has one: markers are its dedupe marks
	cmark   contract.CounterMarker // be's, when its batches are not atomic (countermarked.go)
	rollups rollupOfer             // be's, when it has one

	// olds is be's, when it tells whether marker counters may exist (the
	// engine): without any, an event needs no look-up of its own.
	olds interface{ MayHaveMarkerCounters() bool }

	et atomic.Pointer[EventTime]
	// newest is the newest event time (Unix ms) applied: the watermark.
	newest atomic.Int64
	late   atomic.Int64 // events dead-lettered as too_late
	early  atomic.Int64 // events dead-lettered as too_early

	scratch sync.Pool // of *scratch
	// kept is a scratch kept out of the pool, which drops its contents
	// at every GC: a poll's segments reuse the same big slices.
	kept atomic.Pointer[scratch]

	tracer *tracing.Tracer // SetTracer; nil: no spans (tracing.go)

	commitEvery time.Duration      // SetCommitInterval (loop.go)
	flushes     engine.FlushWaiter // be's, when it has them (loop.go)
}

// Event-time defaults (docs/pipeline.md, "Event time").
const (
	DefaultAllowedLateness = time.Hour
	DefaultMaxSkew         = 5 * time.Minute
)

// EventTime is how the applier treats events' own times. Every op a rule
// makes carries its event's ts (contract.Op.At), so window and rollup
// buckets are chosen by it.
type EventTime struct {
	// AllowedLateness: an event whose ts is older than now minus it is
	// too_late for window rules (dead-lettered; --events-allowed-lateness,
	// default 1h). Rollups take any ts inside their retention (the engine
	// refuses older ones with engine.ErrTooLate: too_late as well).
	AllowedLateness time.Duration
	// MaxSkew: an event whose ts is more than this ahead of now is
	// refused as too_early (--events-max-skew, default 5m).
	MaxSkew time.Duration
	Now     func() time.Time // nil: time.Now
}

func (et *EventTime) withDefaults() *EventTime {
	c := *et
	if c.AllowedLateness <= 0 {
		c.AllowedLateness = DefaultAllowedLateness
	}
	if c.MaxSkew <= 0 {
		c.MaxSkew = DefaultMaxSkew
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return &c
}

// SetEventTime sets the lateness and skew bounds (zero fields: defaults).
func (a *Applier) SetEventTime(et EventTime) { a.et.Store(et.withDefaults()) }

// EventTimeStatus is the event-time part of GET /events/status.
type EventTimeStatus struct {
	// Watermark is the newest event time this node's consumer applied
	// (zero before the first): event-time progress, so now minus it is
	// how far behind in event time the node's consumption is.
	Watermark       time.Time
	AllowedLateness time.Duration
	MaxSkew         time.Duration
	TooLate         int64 // events dead-lettered as too_late
	TooEarly        int64 // events dead-lettered as too_early
}

// EventTimeStatus reports the watermark, the bounds and the refusals.
func (a *Applier) EventTimeStatus() EventTimeStatus {
	et := a.et.Load()
	st := EventTimeStatus{AllowedLateness: et.AllowedLateness, MaxSkew: et.MaxSkew, TooLate: a.late.Load(), TooEarly: a.early.Load()}
	if ms := a.newest.Load(); ms != 0 {
		st.Watermark = time.UnixMilli(ms).UTC()
	}
	return st
}

// Dead-letter reasons of the event-time checks start with these.
const (
	ReasonTooLate  = "too_late"
	ReasonTooEarly = "too_early"
	// reasonWindowOpDropped labels the window ops of late events that were
	// dropped while the events' other ops applied.
	reasonWindowOpDropped = "window_op_dropped"
)

// NewApplier returns an Applier over be with rules rs. m may be nil.
func NewApplier(be contract.Backend, rs *rules.Set, l event.Limits, m *Metrics) (*Applier, error) {
	caps := be.Capabilities()
	cmark, _ := be.(contract.CounterMarker)
	if caps.Batches != contract.BatchAtomic && cmark == nil {
		// A cluster (atomic per owner) was tried with each event one
		// batch keyed by its id (commit c9c9b35): a counter came out one
		// too high when ownership moved under load (docs/pipeline.md).
		// Such backends consume through dedupe marks beside each counter
		// (countermarked.go).
		return nil, fmt.Errorf("consumer: exactly-once needs a backend with atomic batches or dedupe marks beside each counter (contract.CounterMarker); %s batches are %s", caps.Mode, caps.Batches)
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	a := &Applier{be: be, limits: l, opLim: caps.Limits.WithDefaults(), maxOps: caps.Limits.MaxBatch, m: m, commitEvery: DefaultCommitInterval}
	if a.maxOps <= 0 {
		a.maxOps = contract.DefaultLimits().MaxBatch
	}
	if aa, ok := be.(engine.AtomicApplier); ok {
		a.atomic, a.maxOps = aa, atomicBatchOps
	}
	a.marks, _ = be.(engine.MarkApplier)
	if a.marks == nil && caps.Batches != contract.BatchAtomic {
		a.cmark = cmark
	}
	a.rollups, _ = be.(rollupOfer)
	a.flushes, _ = be.(engine.FlushWaiter)
	a.olds, _ = be.(interface{ MayHaveMarkerCounters() bool })
	a.rules.Store(rs)
	a.SetEventTime(EventTime{})
	a.scratch.New = func() any {
		return &scratch{}
	}
	return a, nil
}

// SetRules replaces the rules for the next batches.
func (a *Applier) SetRules(rs *rules.Set) { a.rules.Store(rs) }

// Rules returns the rules in use.
func (a *Applier) Rules() *rules.Set { return a.rules.Load() }

// Metrics returns the applier's metrics.
func (a *Applier) Metrics() *Metrics { return a.m }

// pending is one event on its way into a batch.
type pending struct {
	rec    *stream.Record
	g      int // the record's group (ApplyGroups)
	marker string
	hits   []rules.Hit
	drop   bool  // duplicate or dead-lettered
	ts     int64 // the event's time, Unix ms
}

// Apply applies recs, records of one partition of source in offset order,
// and returns the dead letters (records that decode badly, fail a rule or
// whose op the engine refuses), in offset order, which the caller
// publishes. An error means some batches may not have been applied;
// applying recs again is safe.
func (a *Applier) Apply(ctx context.Context, source string, recs []stream.Record) ([]stream.DeadLetter, error) {
	dead, err := a.ApplyGroups(ctx, source, [][]stream.Record{recs})
	if err != nil {
		return nil, err
	}
	return dead[0], nil
}

// ApplyGroups is Apply of each group (the records of one partition, as
// a poll returns them) with one wait for durability for them all; dead[i]
// are the dead letters of groups[i]. Events of different groups share
// engine batches.
func (a *Applier) ApplyGroups(ctx context.Context, source string, groups [][]stream.Record) ([][]stream.DeadLetter, error) {
	dead, applied, err := a.applyAsync(ctx, source, groups)
	if err != nil {
		return nil, err
	}
	if applied {
		if err := a.waitDurable(ctx, source, groups); err != nil {
			return nil, err
		}
	}
	return dead, nil
}

// applyAsync is ApplyGroups without the wait for durability: the batches
// go in with async durability, each atomic on disk (ApplyMarked,
// ApplyAtomic, or with its idempotency record), and applied reports
// whether there was any, which waitDurable then makes durable.
func (a *Applier) applyAsync(ctx context.Context, source string, groups [][]stream.Record) (dead [][]stream.DeadLetter, applied bool, err error) {
	rs := a.rules.Load()
	s := a.kept.Swap(nil)
	if s == nil {
		s = a.scratch.Get().(*scratch)
	}
	defer func() {
		s.release()
		if !a.kept.CompareAndSwap(nil, s) {
			a.scratch.Put(s)
		}
	}()
	s.gen++
	dead = make([][]stream.DeadLetter, len(groups))
	var parts []part // the segment: up to segmentEvents records
	n := 0
	apply := func() error {
		ok, err := a.applySegment(ctx, source, rs, s, parts, dead)
		s.truncate()
		parts, n = parts[:0], 0
		applied = applied || ok
		return err
	}
	for g, recs := range groups {
		for len(recs) > 0 {
			take := min(segmentEvents-n, len(recs))
			parts = append(parts, part{g, recs[:take]})
			n, recs = n+take, recs[take:]
			if n == segmentEvents {
				if err := apply(); err != nil {
					return nil, false, err
				}
			}
		}
	}
	if n > 0 {
		if err := apply(); err != nil {
			return nil, false, err
		}
	}
	total := 0
	for _, d := range dead {
		// Decoding and rule failures come before the engine's refusals:
		// publish them in the stream's order.
		slices.SortStableFunc(d, func(x, y stream.DeadLetter) int {
			return cmp.Or(cmp.Compare(x.Record.Offset, y.Record.Offset), cmp.Compare(x.Record.Index, y.Record.Index))
		})
		total += len(d)
	}
	a.m.Dead.Add(float64(total))
	if total > 0 {
		a.m.Events.WithLabelValues("dead").Add(float64(total))
	}
	return dead, applied, nil
}

// waitDurable waits until every batch applied so far is durable: one
// synced write of the progress counters (the last offset of each
// partition in groups, the records of one or more polls) waits for them
// all (engine group commit).
func (a *Applier) waitDurable(ctx context.Context, source string, groups [][]stream.Record) error {
	a.m.DurableWaits.Inc()
	if err := a.writeProgress(ctx, source, groups, contract.Sync); err != nil {
		return fmt.Errorf("consumer: wait for durability: %w", err)
	}
	return nil
}

// writeProgress writes the progress counters of groups with durability d.
func (a *Applier) writeProgress(ctx context.Context, source string, groups [][]stream.Record, d contract.Durability) error {
	var ops []contract.Op
	for _, g := range groups {
		if len(g) == 0 {
			continue
		}
		last := g[len(g)-1]
		id := ProgressID(source, last.Partition)
		if i := slices.IndexFunc(ops, func(o contract.Op) bool { return o.ID == id }); i >= 0 {
			ops[i].Value = last.Offset // a later poll's
			continue
		}
		ops = append(ops, contract.Op{Type: contract.OpSet, ID: id, Value: last.Offset})
	}
	if len(ops) == 0 && d != contract.Sync {
		return nil
	}
	_, err := a.be.ApplyBatch(ctx, ops, contract.WriteOptions{Durability: d})
	return err
}

// part is records of group g of an ApplyGroups call.
type part struct {
	g    int
	recs []stream.Record
}

// segmentEvents is how many records Apply evaluates before it applies
// them: enough for several per counter to coalesce, few enough that the
// scratch space of their ops stays small and is reused.
const segmentEvents = 8192

// scratch is the working space of applying a segment, reused.
type scratch struct {
	evs   []pending
	arena []rules.Hit // the hits of every event, each event's a slice of it
	seen  markerSet   // the markers of evs
	// markers and found: the marker of each of evs and whether it is
	// marked (engine.MarkApplier.MarkedAll).
	markers []string
	found   []bool
	hits    []ruleHits // rule hits, for the metric
	c       chunk
	// gen numbers the polls s applied (from 1): the grains kept in the
	// hits' Aux words are the poll's (hitGrain).
	gen uint64
	// ev and in: each record is decoded into ev and the rules see it
	// through in; both, and the buffer in builds counter ids in
	// (rules.Input), are reused from one segment to the next.
	ev event.Event
	in *rules.Input
}

// ruleHits counts the hits of one rule.
type ruleHits struct {
	rule *rules.Rule
	n    int
}

// hit counts a hit of r (a rules file has a few rules: a search).
func (s *scratch) hit(r *rules.Rule) {
	for i := range s.hits {
		if s.hits[i].rule == r {
			s.hits[i].n++
			return
		}
	}
	s.hits = append(s.hits, ruleHits{r, 1})
}

// truncate empties s for the next segment of a poll. The slices keep
// their contents past their lengths (the next segment's appends write
// whole elements over them): zeroing the arena and the ops, megabytes,
// after every segment cost about 1% of an event's CPU. release drops
// the references once the poll is applied.
func (s *scratch) truncate() {
	s.evs, s.arena = s.evs[:0], s.arena[:0]
	s.seen.reset()
	s.markers = s.markers[:0]
	clear(s.hits) // no hold on the rules of a reload
	s.hits = s.hits[:0]
	s.c.reset(false)
}

// release drops every reference of s's slices, up to their capacities
// (what the poll's segments left past their lengths), and empties s.
func (s *scratch) release() {
	s.truncate()
	clear(s.evs[:cap(s.evs)])
	clear(s.arena[:cap(s.arena)])
	clear(s.markers[:cap(s.markers)])
	s.c.release()
}

// applySegment applies the records of parts (at most segmentEvents) and
// reports whether it applied an engine batch. Dead letters of group g go
// to dead[g].
func (a *Applier) applySegment(ctx context.Context, source string, rs *rules.Set, s *scratch, parts []part, dead [][]stream.DeadLetter) (bool, error) {
	ev := &s.ev // decoded into again for every record
	if s.in == nil {
		s.in = rules.NewInput(ev)
	}
	in := s.in
	var filtered, duplicates int
	et := a.et.Load()
	now := et.Now()
	maxTS := now.Add(et.MaxSkew).UnixMilli()
	lateNs := now.Add(-et.AllowedLateness).UnixNano()
	for _, pt := range parts {
		recs := pt.recs
		for i := range recs {
			prefixed, err := event.DecodeIntoPrefixed(ev, recs[i].Value, a.limits, MarkerPrefix)
			if err != nil {
				dead[pt.g] = append(dead[pt.g], stream.DeadLetter{Record: recs[i], Reason: err.Error()})
				continue
			}
			if ev.TS > maxTS {
				a.early.Add(1)
				a.m.EventTime.WithLabelValues(ReasonTooEarly).Inc()
				dead[pt.g] = append(dead[pt.g], stream.DeadLetter{Record: recs[i], Reason: fmt.Sprintf(
					"%s: event time %s is more than %v ahead of this node's clock (%s; --events-max-skew)",
					ReasonTooEarly, ev.Time().Format(time.RFC3339Nano), et.MaxSkew, now.UTC().Format(time.RFC3339Nano))})
				continue
			}
			in.Reset(ev)
			from := len(s.arena)
			s.arena, err = rs.Eval(in, s.arena)
			hits := s.arena[from:len(s.arena):len(s.arena)]
			if err == nil {
				err = a.validate(hits)
			}
			if err == nil {
				var n int
				n, err = a.eventTime(hits, ev.TS, now.UnixNano(), lateNs, et, s.gen)
				hits = hits[:n]
				s.arena = s.arena[:from+n]
			}
			if err != nil {
				s.arena = s.arena[:from]
				dead[pt.g] = append(dead[pt.g], stream.DeadLetter{Record: recs[i], Reason: err.Error()})
				continue
			}
			for j := range hits {
				s.hit(hits[j].Rule)
			}
			if len(hits) == 0 {
				filtered++
				continue
			}
			mk := markerOf(ev.ID, prefixed)
			if !s.seen.add(mk) {
				duplicates++
				s.arena = s.arena[:from]
				continue
			}
			s.evs = append(s.evs, pending{rec: &recs[i], g: pt.g, marker: mk, hits: hits, ts: ev.TS})
		}
	}
	for _, h := range s.hits {
		a.m.RuleHits.WithLabelValues(h.rule.Name).Add(float64(h.n))
	}
	a.m.Events.WithLabelValues("filtered").Add(float64(filtered))
	if a.cmark != nil {
		a.m.Events.WithLabelValues("duplicate").Add(float64(duplicates))
		return a.applyCounterMarked(ctx, rs, s.evs, dead)
	}
	// Skip what an earlier delivery (or an earlier copy) applied.
	live := s.evs[:0]
	olds := a.olds == nil || a.olds.MayHaveMarkerCounters()
	if a.marks != nil {
		s.markers, s.found = s.markers[:0], slices.Grow(s.found[:0], len(s.evs))[:len(s.evs)]
		for i := range s.evs {
			s.markers = append(s.markers, s.evs[i].marker)
		}
		a.marks.MarkedAll(s.markers, s.found)
	}
	for i, p := range s.evs {
		if a.marks != nil && s.found[i] {
			duplicates++
			continue
		}
		if !olds {
			live = append(live, p)
			continue
		}
		// A marker counter: what applied the event before the engine
		// kept marks (or a backend without them).
		_, _, exists, err := a.be.TTL(ctx, p.marker)
		if err != nil {
			return false, err
		}
		if exists {
			duplicates++
			continue
		}
		live = append(live, p)
	}
	a.m.Events.WithLabelValues("duplicate").Add(float64(duplicates))
	applied := false
	for len(live) > 0 {
		n, ok, err := a.applyChunk(ctx, source, rs, &s.c, live, dead)
		if err != nil {
			return false, err
		}
		applied = applied || ok
		live = live[n:]
	}
	return applied, nil
}

// validate checks the ops of hits against the backend's limits, so that
// an event the engine would refuse is dead-lettered alone. The rules
// checked each op's counter id (contract.ValidateID) as they built it.
func (a *Applier) validate(hits []rules.Hit) error {
	for i := range hits {
		if err := hits[i].Op.ValidateDefaultedValidID(&a.opLim); err != nil {
			return fmt.Errorf("rule %q: %w", hits[i].Rule.Name, err)
		}
	}
	return nil
}

// eventTime gives the ops of hits the event's time ts (Unix ms): a
// window op's At is the start of its bucket, an add's or a pfadd's the
// start of its minute (the finest rollup bucket), so that ops of one
// counter and bucket still coalesce. It returns how many hits stay, moved
// to the front: a window op of an event older than lateNs (now minus the
// allowed lateness) is dropped and counted, and an event left with no
// op at all is too_late (an error). gen is the poll's (hitGrain).
func (a *Applier) eventTime(hits []rules.Hit, ts, nowNs, lateNs int64, et *EventTime, gen uint64) (int, error) {
	if ts > math.MaxInt64/int64(time.Millisecond) {
		return 0, fmt.Errorf("%s: event time %s is after 2200", ReasonTooEarly, time.UnixMilli(ts).UTC().Format(time.RFC3339Nano))
	}
	at := ts * int64(time.Millisecond)
	if err := contract.ValidateAt(at); err != nil {
		return 0, fmt.Errorf("%s: %w", ReasonTooEarly, err)
	}
	n := 0
	var lateRule string
	for i := range hits {
		op := &hits[i].Op
		switch {
		case op.Type == contract.OpAdd && op.Kind == contract.KindWindow:
			g := int64(op.Window.Granularity)
			if g <= 0 {
				g = int64(time.Second)
			}
			op.At = at - ((at%g)+g)%g
			// Past the lateness, or in a bucket the window of now no
			// longer holds (the engine would refuse it).
			if at < lateNs || (op.Window.Span > 0 && op.At+int64(op.Window.Span) <= nowNs-((nowNs%g)+g)%g) {
				a.m.EventTime.WithLabelValues(reasonWindowOpDropped).Inc()
				lateRule = hits[i].Rule.Name
				continue
			}
		case op.Type == contract.OpAdd || op.Type == contract.OpPFAdd:
			if g := a.hitGrain(&hits[i], gen); g > 0 {
				op.At = at - ((at%g)+g)%g
			} else {
				op.At = 0 // no rollup: the time counts for nothing
			}
		}
		if n != i {
			hits[n] = hits[i]
		}
		n++
	}
	if n == 0 && lateRule != "" {
		a.late.Add(1)
		a.m.EventTime.WithLabelValues(ReasonTooLate).Inc()
		return 0, fmt.Errorf("%s: rule %q: event time %s is older than the allowed lateness %v of window counters (--events-allowed-lateness)",
			ReasonTooLate, lateRule, time.UnixMilli(ts).UTC().Format(time.RFC3339Nano), et.AllowedLateness)
	}
	return n, nil
}

// rollupOfer is a backend that tells which rollup spec applies to a
// counter (the embedded engine).
type rollupOfer interface {
	RollupOf(id string) (rollup.Spec, bool)
}

// grain returns the finest rollup bucket (ns) that an op of type t on
// counter id counts in: the bucket its time is rounded down to, so that
// the ops of one counter coalesce per bucket its rollups tell apart. An
// add counts in the count buckets (a minute, an hour, a day; a day for
// months too, as days nest in UTC months), a pfadd in the sketches (an
// hour, a day); 0 when the counter's rollups keep none for the op (or it
// has none), whose ops then carry no time at all. A backend that does
// not tell: a minute, the finest bucket.
func (a *Applier) grain(t contract.OpType, id string) int64 {
	if a.rollups == nil {
		return int64(time.Minute)
	}
	spec, ok := a.rollups.RollupOf(id)
	switch {
	case !ok:
		return 0
	case t == contract.OpPFAdd && spec.UniqueHours > 0:
		return int64(time.Hour)
	case t == contract.OpPFAdd && spec.UniqueDays > 0:
		return int64(24 * time.Hour)
	case t == contract.OpPFAdd:
		return 0
	case spec.Minute > 0:
		return int64(time.Minute)
	case spec.Hour > 0:
		return int64(time.Hour)
	case spec.Day > 0 || spec.Month > 0:
		return int64(24 * time.Hour)
	}
	return 0
}

// chunk is one engine batch being built: markers and coalesced ops. Its
// storage is reused from one batch to the next.
type chunk struct {
	ops    []contract.Op
	byKey  opTable // the op each key's next op merges into
	events []*pending
	// opOf lists, event after event of events, the index in ops of each
	// of its hits and then of its marker (len(hits)+1 entries an event;
	// -1 for a marker kept in marks).
	opOf []int32
	// marks, when the backend keeps dedupe marks (engine.MarkApplier):
	// the marker of each of events, instead of an op.
	marks   []string
	useMark bool
}

// reset empties c for the next batch; the references of the last one
// stay past the slices' lengths until release (scratch.truncate).
func (c *chunk) reset(useMark bool) {
	c.ops, c.events, c.opOf, c.marks = c.ops[:0], c.events[:0], c.opOf[:0], c.marks[:0]
	c.byKey.reset()
	c.useMark = useMark
}

// release drops the references of c's slices up to their capacities.
func (c *chunk) release() {
	clear(c.ops[:cap(c.ops)]) // the ids and items of the poll's batches
	clear(c.marks[:cap(c.marks)])
	clear(c.events[:cap(c.events)])
}

type opKey struct {
	t      contract.OpType
	id     string
	window counter.WindowSpec
	at     int64 // the event time's bucket: ops of different ones stay apart
}

// add adds p's ops to c unless that could pass maxOps (each of p's hits
// might need an op of its own: a merge that would overflow or pass
// maxItems keeps them apart); it reports whether it did.
func (c *chunk) add(p *pending, maxOps int, maxItems int) bool {
	if len(c.ops)+len(p.hits)+1 > maxOps {
		return false
	}
	for i := range p.hits {
		op := &p.hits[i].Op
		h := opHash(op, p.hits[i].IDHash)
		j := c.byKey.find(c.ops, op, h)
		if j < 0 || !merge(&c.ops[j], op, maxItems) {
			j = len(c.ops)
			c.ops = append(c.ops, *op)
			c.byKey.put(c.ops, h, j)
			o := &c.ops[j]
			// The hit's items stay its own: clipped, a merge's append
			// copies them first. A merge adds to fields in place: copied.
			o.Items = slices.Clip(o.Items)
			if len(o.Fields) > 0 {
				o.Fields = slices.Clone(o.Fields)
			}
		}
		c.opOf = append(c.opOf, int32(j))
	}
	if c.useMark {
		c.opOf = append(c.opOf, -1)
		c.marks = append(c.marks, p.marker)
	} else {
		c.opOf = append(c.opOf, int32(len(c.ops)))
		c.ops = append(c.ops, contract.Op{Type: contract.OpSet, ID: p.marker, Value: 1, CheckVersion: true, ExpectedVersion: 0})
	}
	c.events = append(c.events, p)
	return true
}

// merge folds src into dst (same type and id); false when it cannot
// (overflow, too many items).
func merge(dst, src *contract.Op, maxItems int) bool {
	switch dst.Type {
	case contract.OpAdd:
		sum := dst.Delta + src.Delta
		if (dst.Delta >= 0) == (src.Delta >= 0) && (sum >= 0) != (dst.Delta >= 0) {
			return false // overflow: keep them apart, the engine decides
		}
		dst.Delta = sum
	case contract.OpPFAdd:
		n := len(dst.Items) + len(src.Items)
		if n > maxItems {
			return false
		}
		if n > cap(dst.Items) {
			// Grown to 8 at once: an op starts with its first hit's
			// items, clipped (chunk.add), and one that merged once
			// usually merges again (a post's viewers): appends grew
			// it 1, 2, 4, 8, a copy each.
			items := make([][]byte, len(dst.Items), min(max(2*n, 8), maxItems))
			copy(items, dst.Items)
			dst.Items = items
		}
		dst.Items = append(dst.Items, src.Items...)
	case contract.OpHAdd:
		for _, f := range src.Fields {
			found := false
			for i := range dst.Fields {
				if dst.Fields[i].Name == f.Name {
					s := dst.Fields[i].Delta + f.Delta
					if (f.Delta > 0 && s < dst.Fields[i].Delta) || (f.Delta < 0 && s > dst.Fields[i].Delta) {
						return false
					}
					dst.Fields[i].Delta = s
					found = true
					break
				}
			}
			if !found {
				if len(dst.Fields) >= maxItems {
					return false
				}
				dst.Fields = append(dst.Fields, f)
			}
		}
	default:
		return false
	}
	return true
}

// ProgressID is the counter that holds the last offset of partition of
// source the consumer applied (informational: exactly-once rests on the
// event markers).
func ProgressID(source string, partition int32) string {
	id := fmt.Sprintf("_pipeline:%s:%d", source, partition)
	if len(id) > contract.MaxIDLen {
		sum := sha256.Sum256([]byte(id))
		id = "_pipeline:#" + hex.EncodeToString(sum[:16])
	}
	return id
}

// applyChunk builds one batch in c from the front of evs, applies it and
// returns how many events it consumed (applied, duplicate or dead) and
// whether it applied a batch.
func (a *Applier) applyChunk(ctx context.Context, source string, rs *rules.Set, c *chunk, evs []pending, dead [][]stream.DeadLetter) (int, bool, error) {
	maxItems := a.maxItems()
	for attempt := 0; ; attempt++ {
		c.reset(a.marks != nil)
		n := 0
		for n < len(evs) {
			if evs[n].drop {
				n++
				continue
			}
			if !c.add(&evs[n], a.maxOps, maxItems) {
				break
			}
			n++
		}
		if len(c.events) == 0 {
			return n, false, nil
		}
		for i := range c.ops {
			if c.ops[i].Type == contract.OpSet {
				c.ops[i].TTL = rs.Dedupe
			}
		}
		first, last := c.events[0].rec, c.events[len(c.events)-1].rec
		pos := fmt.Sprintf("%s:%d:%d.%d-%d.%d", source, first.Partition, first.Offset, first.Index, last.Offset, last.Index)
		var err error
		if a.marks != nil {
			// The engine's dedupe marks: created with the batch, which
			// fails if one exists.
			err = a.marks.ApplyMarked(ctx, c.ops, c.marks, dedupeTTL(rs), contract.WriteOptions{Durability: contract.Async})
		} else if a.atomic != nil {
			// The markers make a retry safe without an idempotency record.
			err = a.atomic.ApplyAtomic(ctx, c.ops, contract.WriteOptions{Durability: contract.Async})
		} else {
			key := fmt.Sprintf("pipeline:%s:%x", pos, engine.Fingerprint(c.ops))
			if len(key) > engine.MaxIdempotencyKeyLen {
				sum := sha256.Sum256([]byte(key))
				key = "pipeline:#" + hex.EncodeToString(sum[:16])
			}
			_, err = a.be.ApplyBatch(ctx, c.ops, contract.WriteOptions{Durability: contract.Async, IdempotencyKey: key})
		}
		if err == nil {
			a.m.Events.WithLabelValues("applied").Add(float64(len(c.events)))
			a.m.Batches.Inc()
			newest := int64(0)
			for _, p := range c.events {
				newest = max(newest, p.ts)
			}
			a.advanceNewest(newest)
			return n, true, nil
		}
		var be *contract.BatchError
		if errors.As(err, &be) && c.useMark && be.Index >= len(c.ops) && be.Index < len(c.ops)+len(c.events) &&
			errors.Is(be.Err, contract.ErrVersionConflict) {
			// An event's mark exists: a copy applied concurrently.
			c.events[be.Index-len(c.ops)].drop = true
			a.m.Events.WithLabelValues("duplicate").Inc()
			if attempt > len(evs)+1 {
				panic("consumer: a batch kept failing after every event it named was dropped")
			}
			continue
		}
		if !errors.As(err, &be) || be.Index < 0 || be.Index >= len(c.ops) {
			return 0, false, fmt.Errorf("consumer: apply %s: %w", pos, err)
		}
		// Drop the events behind the failing op.
		op := &c.ops[be.Index]
		at := 0
		for _, p := range c.events {
			hit := slices.Index(c.opOf[at:at+len(p.hits)+1], int32(be.Index))
			at += len(p.hits) + 1
			if hit < 0 {
				continue
			}
			p.drop = true
			if op.Type == contract.OpSet && errors.Is(err, contract.ErrVersionConflict) {
				a.m.Events.WithLabelValues("duplicate").Inc() // a copy applied concurrently
				continue
			}
			a.deadApply(dead, p, hit, op, be.Err)
		}
		if attempt > len(evs)+1 {
			panic("consumer: a batch kept failing after every event it named was dropped")
		}
	}
}

// deadApply dead-letters event p whose hit-th op failed to apply with
// err (applyReason), counting a too_late one.
func (a *Applier) deadApply(dead [][]stream.DeadLetter, p *pending, hit int, op *contract.Op, err error) {
	if errors.Is(err, engine.ErrTooLate) {
		a.late.Add(1)
		a.m.EventTime.WithLabelValues(ReasonTooLate).Inc()
	}
	dead[p.g] = append(dead[p.g], stream.DeadLetter{Record: *p.rec, Reason: applyReason(p, hit, op, err)})
}

// applyReason is the dead-letter reason of event p whose hit-th op (its
// marker when hit is len(p.hits)) failed: the rule that asked for it, the
// op and the engine's error, such as the kind the counter already has.
func applyReason(p *pending, hit int, op *contract.Op, err error) string {
	if errors.Is(err, engine.ErrTooLate) {
		return fmt.Sprintf("%s: rule %q: apply %s %q: %v", ReasonTooLate, p.hits[min(hit, len(p.hits)-1)].Rule.Name, op.Type, op.ID, err)
	}
	if hit < len(p.hits) {
		return fmt.Sprintf("rule %q: apply %s %q: %v", p.hits[hit].Rule.Name, op.Type, op.ID, err)
	}
	return fmt.Sprintf("apply %s %q: %v", op.Type, op.ID, err)
}

// Events applies a batch the collector received, in the embedded mode
// (no stream): positions are the batch's sequence number and indexes.
func (a *Applier) Events(ctx context.Context, seq int64, encoded [][]byte) ([]stream.DeadLetter, error) {
	recs := make([]stream.Record, len(encoded))
	for i, b := range encoded {
		recs[i] = stream.Record{Partition: 0, Offset: seq + int64(i), Value: b}
	}
	return a.Apply(ctx, "http", recs)
}

// maxItems is the most items an op may carry (the backend's limit, else
// the contract's).
func (a *Applier) maxItems() int {
	return a.opLim.MaxItems // defaulted: the backend's, else the contract's
}

// dedupeTTL is how long the marks of rs's events live: its dedupe TTL, or
// the longest TTL for a Set not from Load (a marker counter without a
// TTL stayed).
func dedupeTTL(rs *rules.Set) time.Duration {
	if rs.Dedupe > 0 {
		return rs.Dedupe
	}
	return contract.MaxTTL
}

// advanceNewest moves the watermark (the newest event time applied, Unix
// ms) up to newest and publishes it.
func (a *Applier) advanceNewest(newest int64) {
	for {
		cur := a.newest.Load()
		if newest <= cur || a.newest.CompareAndSwap(cur, newest) {
			break
		}
	}
	a.m.Watermark.Set(float64(a.newest.Load()) / 1000)
}
