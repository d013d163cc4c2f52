package counter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"time"
)

// Window spec limits. MaxWindowBuckets bounds a window's memory: its ring
// holds 16 bytes per bucket, so at most 56.25 KiB per window counter
// however it was created (request, disk, peer). Finer or longer windows
// are what rollups are for.
const (
	MinGranularity   = time.Millisecond
	MaxWindowBuckets = 3600
)

// ErrTooManyBuckets marks a window spec above MaxWindowBuckets, requested
// (with ErrInvalid) or decoded (with ErrCorrupt), so that a loader can
// tell a window stored before the bound from damaged data.
var ErrTooManyBuckets = errors.New("counter: too many window buckets")

// WindowSpec describes a time-bucketed counter: buckets of Granularity,
// aligned to multiples of Granularity since the Unix epoch (UTC), over a
// window of Span. Sliding windows end at the current bucket; fixed windows
// are aligned to multiples of Span and reset at their boundaries.
type WindowSpec struct {
	Granularity, Span time.Duration
	Fixed             bool
}

// Validate returns an error wrapping ErrInvalid unless Granularity is at
// least MinGranularity and Span is a positive multiple of Granularity of at
// most MaxWindowBuckets buckets.
func (s WindowSpec) Validate() error {
	switch {
	case s.Granularity < MinGranularity:
		return fmt.Errorf("%w: window granularity %v is below %v", ErrInvalid, s.Granularity, MinGranularity)
	case s.Span <= 0 || s.Span%s.Granularity != 0:
		return fmt.Errorf("%w: window span %v is not a positive multiple of the granularity %v", ErrInvalid, s.Span, s.Granularity)
	case s.Span/s.Granularity > MaxWindowBuckets:
		return fmt.Errorf("%w: %w: window of %v at %v has %d buckets, at most %d", ErrInvalid, ErrTooManyBuckets, s.Span, s.Granularity, s.Span/s.Granularity, MaxWindowBuckets)
	}
	return nil
}

// Buckets returns Span/Granularity, the number of buckets in a window, or 0
// when Granularity is not positive.
func (s WindowSpec) Buckets() int {
	if s.Granularity <= 0 {
		return 0
	}
	return int(s.Span / s.Granularity)
}

// Bucket is one time bucket of a Window: the hits counted in
// [Start, Start+Granularity).
type Bucket struct {
	Start time.Time `json:"start"`
	Count int64     `json:"count"`
}

// Window counts hits in time buckets over a sliding or a fixed window. Time
// is always passed in; a Window never reads a clock.
//
// Buckets are numbered floor(t/Granularity) from the Unix epoch, so bucket b
// covers [b*G, (b+1)*G) in UTC. Let c be the bucket of now and n the number
// of buckets (Span/Granularity):
//
//   - Sliding: Sum(now) counts buckets c-n+1 .. c, that is the buckets whose
//     start is after now-Span. With G = 1s and Span = 300s, hits at whole
//     seconds t' are counted by Sum(t) iff t-300 < t' <= t.
//   - Fixed: Sum(now) counts the buckets of the fixed window that contains
//     now, [k*Span, (k+1)*Span) with k = floor(now/Span), up to c. The count
//     drops to zero at each boundary, so a client can get up to twice the
//     per-window budget through in one Span that straddles a boundary (a
//     burst at the end of a window and another at the start of the next);
//     use a sliding window when that matters.
//
// Buckets later than now are not counted (a reader whose clock is behind the
// newest write sees only what happened up to its now).
//
// The Window remembers the newest bucket it was given (the head). An Add at
// an older time (late or out of order) goes to its bucket if that bucket is
// still in the head's window, and is dropped otherwise (Add returns nil;
// TryAdd reports it). Moving the head past the window, for example after a
// gap longer than Span, leaves every older bucket out of the window, so the
// sum restarts from zero.
//
// Memory: a ring of n slots of two int64s (a bucket number and a count),
// allocated on the first Add; Add never allocates after that. Sum and Buckets
// walk at most the buckets that changed since the head, at most n.
//
// Every bucket stays inside the int64 range. A sliding sum can leave it when
// negative buckets slide out; Sum then saturates, and Add refuses to take the
// sum further from zero (ErrOverflow). Times must be representable as int64
// nanoseconds since the epoch (years 1678 to 2262); Add rejects others with
// ErrInvalid and Sum treats them as an empty window.
//
// Create Windows with NewWindow (the zero value rejects Add). A Window is not
// safe for concurrent use: the caller serialises access. Sum, Buckets, Spec,
// Clone and MarshalBinary do not modify the receiver, so concurrent readers
// are fine under a read lock.
type Window struct {
	// The fields a flush reads (Touch, DeltaOK, AppendDelta) come first,
	// in 64 bytes: the Window is 128 bytes, a size class whose objects
	// start on a cache line, so they are one line.
	ring []wslot // n slots, bucket b in slot b mod n; nil until first used
	head int64   // newest bucket seen
	// since has bit i set when slot i was written after MarkBase (windows
	// of up to 64 buckets): the slots AppendDelta encodes.
	since uint64
	// used has bit i set when slot i was written (windows of up to 64
	// buckets), so that encoding a window reads only those slots.
	used    uint64
	n       int64 // buckets per window
	started bool  // head is set
	based   bool  // MarkBase was called, DropBase not since
	fixed   bool  // spec.Fixed

	g    int64 // granularity in ns
	minB int64 // lowest and highest bucket numbers whose start time fits
	maxB int64
	// total is the sum of the slots in [lo(head), head].
	total i128
	undo  *WindowUndo // recording the writes (BeginUndo); nil: not
	_     [16]byte    // (to 128 bytes)
}

type wslot struct{ num, count int64 }

// NewWindow returns an empty window, or an error wrapping ErrInvalid if
// spec.Validate rejects spec.
func NewWindow(spec WindowSpec) (*Window, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	return newWindow(spec), nil
}

func newWindow(spec WindowSpec) *Window {
	g := int64(spec.Granularity)
	return &Window{
		fixed: spec.Fixed,
		g:     g,
		n:     int64(spec.Span / spec.Granularity),
		minB:  -(math.MaxInt64 / g),
		maxB:  math.MaxInt64 / g,
	}
}

// Spec returns the window's spec.
func (w *Window) Spec() WindowSpec {
	return WindowSpec{Granularity: time.Duration(w.g), Span: time.Duration(w.n * w.g), Fixed: w.fixed}
}

var (
	minTime = time.Unix(0, math.MinInt64)
	maxTime = time.Unix(0, math.MaxInt64)
)

// bucketOf returns the number of the bucket holding t, and false if t is
// outside the representable range (or w is a zero Window).
func (w *Window) bucketOf(t time.Time) (int64, bool) {
	if w.g == 0 || t.Before(minTime) || t.After(maxTime) {
		return 0, false
	}
	ns := t.UnixNano()
	b := ns / w.g
	if ns%w.g < 0 {
		b--
	}
	if b < w.minB || b > w.maxB {
		return 0, false
	}
	return b, true
}

// lo returns the first bucket of the window whose last bucket is c.
func (w *Window) lo(c int64) int64 {
	if w.fixed {
		k := c / w.n
		if c%w.n < 0 {
			k--
		}
		return k * w.n
	}
	return c - w.n + 1
}

func (w *Window) slotIndex(b int64) int64 {
	i := b % w.n
	if i < 0 {
		i += w.n
	}
	return i
}

// sumRange returns the sum of the slots holding buckets in [a, b], which
// must lie within [lo(head), head].
func (w *Window) sumRange(a, b int64) i128 {
	var s i128
	if w.ring == nil || a > b {
		return s
	}
	i := w.slotIndex(a)
	for x := a; x <= b; x++ {
		if sl := &w.ring[i]; sl.num == x {
			s = s.addInt64(sl.count)
		}
		if i++; i == w.n {
			i = 0
		}
	}
	return s
}

// Add adds delta to the bucket of time now; see Window for late and old
// times. It returns an error wrapping ErrOverflow when the bucket or the
// window sum would overflow, and one wrapping ErrInvalid for a time outside
// the representable range or a zero Window. On error nothing changes.
func (w *Window) Add(now time.Time, delta int64) error {
	_, err := w.TryAdd(now, delta)
	return err
}

// TryAdd is Add that also reports whether the hit was recorded: false, with
// a nil error, when t is older than the window of the newest bucket seen.
func (w *Window) TryAdd(t time.Time, delta int64) (bool, error) {
	b, ok := w.bucketOf(t)
	if !ok {
		if w.g == 0 {
			return false, fmt.Errorf("%w: zero Window, use NewWindow", ErrInvalid)
		}
		return false, fmt.Errorf("%w: time %v is outside the representable range", ErrInvalid, t)
	}
	switch {
	case !w.started || b > w.head:
		// A new head: buckets before lo(b) leave the window.
		kept := w.keptAt(b)
		total := kept.addInt64(delta)
		if !sumMoveOK(kept, total) {
			return false, fmt.Errorf("%w: window sum", ErrOverflow)
		}
		if w.ring == nil {
			w.ring = make([]wslot, w.n)
		}
		i := w.slotIndex(b)
		if w.undo != nil {
			w.undo.slots = append(w.undo.slots, undoSlot{i, w.ring[i]})
		}
		w.ring[i] = wslot{num: b, count: delta}
		w.used |= 1 << (uint64(i) & 63)
		w.since |= 1 << (uint64(i) & 63)
		w.started, w.head, w.total = true, b, total
		return true, nil
	case b < w.lo(w.head):
		return false, nil
	default:
		if w.ring == nil { // decoded with no buckets
			w.ring = make([]wslot, w.n)
		}
		i := w.slotIndex(b)
		sl := &w.ring[i]
		cur := int64(0)
		if sl.num == b {
			cur = sl.count
		}
		v, err := AddInt64(cur, delta)
		if err != nil {
			return false, fmt.Errorf("%w: window bucket", ErrOverflow)
		}
		total := w.total.addInt64(delta)
		if !sumMoveOK(w.total, total) {
			return false, fmt.Errorf("%w: window sum", ErrOverflow)
		}
		if w.undo != nil {
			w.undo.slots = append(w.undo.slots, undoSlot{i, *sl})
		}
		*sl = wslot{num: b, count: v}
		w.used |= 1 << (uint64(i) & 63)
		w.since |= 1 << (uint64(i) & 63)
		w.total = total
		return true, nil
	}
}

// Peek reads what an add at t (unix ns) reads first, the window's fields
// and the slot of t's bucket, and returns that slot's bucket number. It
// changes nothing: a caller about to add to many windows peeks at them
// all first, so that their cache misses overlap rather than come one
// after another.
func (w *Window) Peek(t int64) int64 {
	if w.ring == nil || w.g == 0 {
		return w.head
	}
	return w.ring[w.slotIndex(t/w.g)].num
}

// keptAt returns the sum of the buckets that stay in the window when b
// becomes its head (b > head, or the window not started).
func (w *Window) keptAt(b int64) i128 {
	var kept i128
	if w.started {
		newLo, oldLo := w.lo(b), w.lo(w.head)
		switch {
		case newLo > w.head:
			// Everything left the window.
		case newLo-oldLo <= w.head-newLo:
			kept = w.total.sub(w.sumRange(oldLo, newLo-1))
		default:
			kept = w.sumRange(newLo, w.head)
		}
	}
	return kept
}

// AddCheck predicts, without writing, whether a sequence of TryAdds to
// one window records each hit without an error: what lets the engine
// apply an atomic batch without recording its undo. Lateness is checked
// exactly (the head the adds move); overflow exactly for the first add
// (the computations of TryAdd), and for the later ones against a bound:
// a slot's count is its count now or a delta, plus the deltas added to
// it since, and the sum is the sum of the slots in the window, so none
// passes the sum of every slot's |count| now (or |sum|, if larger) plus
// the |delta|s added since; when that fits an int64, no add overflows.
// A false answer may be wrong (the caller then applies with an undo), a
// true one may not.
type AddCheck struct {
	w       *Window
	started bool
	head    int64  // the newest bucket after the adds checked
	n       int    // adds checked (that write)
	abs     uint64 // sum of their |delta|, saturated
	bound   uint64 // set at the second add, saturated
}

// CheckAdds starts c on w as it is now. Nothing may write w before the
// adds c checks.
func (w *Window) CheckAdds(c *AddCheck) {
	*c = AddCheck{w: w, started: w.started, head: w.head}
}

// Add reports whether TryAdd(t, delta), after the adds c checked, returns
// (true, nil), or with drop, whether Add(t, delta) returns nil (a hit
// older than the window is then dropped, not an error).
func (c *AddCheck) Add(t time.Time, delta int64, drop bool) bool {
	w := c.w
	b, ok := w.bucketOf(t)
	if !ok {
		return false
	}
	newHead := !c.started || b > c.head
	if !newHead && b < w.lo(c.head) {
		return drop // nothing written
	}
	c.abs = addSat(c.abs, absU64(delta))
	if newHead {
		c.started, c.head = true, b
	}
	if c.n++; c.n == 1 {
		if newHead {
			kept := w.keptAt(b)
			return sumMoveOK(kept, kept.addInt64(delta))
		}
		cur := int64(0)
		if w.ring != nil {
			if sl := w.ring[w.slotIndex(b)]; sl.num == b {
				cur = sl.count
			}
		}
		_, err := AddInt64(cur, delta)
		return err == nil && sumMoveOK(w.total, w.total.addInt64(delta))
	}
	if c.n == 2 {
		c.bound = math.MaxUint64
		if w.total.fits() {
			c.bound = absU64(int64(w.total.lo))
		}
		var s uint64
		for _, sl := range w.ring {
			s = addSat(s, absU64(sl.count))
		}
		c.bound = max(c.bound, s)
	}
	return addSat(c.bound, c.abs) <= math.MaxInt64
}

// absU64 is |x| (MinInt64's too).
func absU64(x int64) uint64 {
	if x < 0 {
		return uint64(-x) // -MinInt64 wraps to MinInt64: 1<<63 as a uint64
	}
	return uint64(x)
}

// addSat is a+b, saturated to MaxUint64.
func addSat(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint64
}

// visible returns the buckets [a, b] of the window of now that the ring
// holds, and false if there are none.
func (w *Window) visible(now time.Time) (a, b int64, ok bool) {
	c, ok := w.bucketOf(now)
	if !ok || !w.started {
		return 0, 0, false
	}
	a, b = max(w.lo(c), w.lo(w.head)), min(c, w.head)
	return a, b, a <= b
}

// Sum returns the sum of the buckets in the window of now (see Window),
// saturated to the int64 range.
func (w *Window) Sum(now time.Time) int64 {
	a, b, ok := w.visible(now)
	if !ok {
		return 0
	}
	lh := w.lo(w.head)
	if a == lh && b == w.head {
		return w.total.clamp() // the usual case: now is in the head's bucket
	}
	// Walk the shorter of [a, b] and its complement in [lh, head].
	if b-a+1 <= (w.head-lh+1)/2 {
		return w.sumRange(a, b).clamp()
	}
	return w.total.sub(w.sumRange(lh, a-1)).sub(w.sumRange(b+1, w.head)).clamp()
}

// Buckets returns the buckets of the window of now that have a non-zero
// count, oldest first (buckets without hits, or whose hits cancel out, are
// left out).
func (w *Window) Buckets(now time.Time) []Bucket {
	a, b, ok := w.visible(now)
	if !ok || w.ring == nil {
		return nil
	}
	var out []Bucket
	for x := a; x <= b; x++ {
		if sl := w.ring[w.slotIndex(x)]; sl.num == x && sl.count != 0 {
			out = append(out, Bucket{Start: time.Unix(0, x*w.g).UTC(), Count: sl.count})
		}
	}
	return out
}

// Clone returns a deep copy of w.
func (w *Window) Clone() *Window {
	c := *w
	c.ring = slices.Clone(w.ring)
	c.undo = nil
	c.based, c.since = false, 0 // a base is stored for w, not for its copy
	return &c
}

// WindowUndo can put a window back as it was when BeginUndo was called:
// it keeps the head, the sum and the old content of each slot a TryAdd
// wrote since (one slot an add), not a copy of the ring. The engine's
// atomic batches use it to undo the adds to a window when a later op of
// the batch fails. Reusable.
type WindowUndo struct {
	w       *Window
	started bool
	head    int64
	total   i128
	used    uint64
	noRing  bool
	slots   []undoSlot
}

type undoSlot struct {
	i   int64
	old wslot
}

// BeginUndo makes u record w's writes until u.Rollback or u.End. The
// caller serialises access to w, as for any write.
func (w *Window) BeginUndo(u *WindowUndo) {
	*u = WindowUndo{w: w, started: w.started, head: w.head, total: w.total, used: w.used, noRing: w.ring == nil, slots: u.slots[:0]}
	w.undo = u
}

// Rollback puts the window back as it was at BeginUndo and ends the
// recording.
func (u *WindowUndo) Rollback() {
	w := u.w
	if w == nil {
		return
	}
	for i := len(u.slots) - 1; i >= 0; i-- {
		w.ring[u.slots[i].i] = u.slots[i].old
	}
	w.started, w.head, w.total, w.used = u.started, u.head, u.total, u.used
	if u.noRing {
		w.ring = nil
	}
	u.End()
}

// End ends the recording; the window keeps its writes.
func (u *WindowUndo) End() {
	if u.w != nil && u.w.undo == u {
		u.w.undo = nil
	}
	u.w = nil
	u.slots = u.slots[:0]
}

const (
	windowFixed   byte = 1 << 0
	windowStarted byte = 1 << 1
)

// MarshalBinary encodes w as: format byte 0x41, flags (bit 0 fixed, bit 1
// head set), uvarint granularity and span in nanoseconds, and when the head
// is set: zigzag varint head bucket, uvarint count of non-zero buckets in
// the head's window, and per bucket, oldest first, the uvarint distance
// head-bucket and the zigzag varint count. Windows with the same spec, head
// and buckets have equal encodings.
func (w *Window) MarshalBinary() ([]byte, error) {
	return w.AppendBinary(make([]byte, 0, 64))
}

// AppendBinary appends the encoding of MarshalBinary to b (the engine's
// flush encodes every changed window into one buffer).
func (w *Window) AppendBinary(b []byte) ([]byte, error) {
	if w.g == 0 {
		return nil, fmt.Errorf("%w: zero Window, use NewWindow", ErrInvalid)
	}
	var flags byte
	if w.fixed {
		flags |= windowFixed
	}
	if w.started {
		flags |= windowStarted
	}
	b = append(b, formatWindow, flags)
	b = binary.AppendUvarint(b, uint64(w.g))
	b = binary.AppendUvarint(b, uint64(w.n*w.g))
	if !w.started {
		return b, nil
	}
	b = binary.AppendVarint(b, w.head)
	if w.ring == nil {
		return append(b, 0), nil // no bucket
	}
	// One pass over the head's window, oldest first, slot after slot
	// (no division a bucket): the buckets go after room for their count,
	// which is written, and the buckets moved, once known.
	lh := w.lo(w.head)
	at := len(b)
	b = append(b, 0) // the count, one byte up to 127 buckets
	n := 0
	first := w.slotIndex(lh)
	if w.n <= 64 {
		b, n = w.appendMasked(b, w.used, false)
	} else {
		i := first
		for x := lh; x <= w.head; x++ {
			if sl := &w.ring[i]; sl.num == x && sl.count != 0 {
				b = binary.AppendUvarint(b, uint64(w.head-x))
				b = binary.AppendVarint(b, sl.count)
				n++
			}
			if i++; i == w.n {
				i = 0
			}
		}
	}
	if n < 0x80 {
		b[at] = byte(n)
		return b, nil
	}
	var cnt [binary.MaxVarintLen64]byte
	k := binary.PutUvarint(cnt[:], uint64(n))
	b = append(b, cnt[1:k]...) // room for the longer count
	copy(b[at+k:], b[at+1:len(b)-(k-1)])
	copy(b[at:], cnt[:k])
	return b, nil
}

// UnmarshalBinary replaces w with the decoded window. Input that is not a
// valid encoding (unknown flags, an invalid spec, a head outside the
// representable range, buckets outside the head's window or out of order,
// zero counts, trailing bytes, ...) returns an error wrapping ErrCorrupt and
// leaves w unchanged. Besides what the input length allows, it allocates the
// ring of the encoded spec, at most 16 * MaxWindowBuckets bytes; an
// encoded spec above MaxWindowBuckets is refused before anything is allocated.
func (w *Window) UnmarshalBinary(data []byte) error {
	d, err := newDecoder("window", data, formatWindow)
	if err != nil {
		return err
	}
	flags, err := d.byte()
	if err != nil {
		return err
	}
	if flags&^(windowFixed|windowStarted) != 0 {
		return d.errorf("unknown flags %#02x", flags)
	}
	g, err := d.uvarint()
	if err != nil {
		return err
	}
	span, err := d.uvarint()
	if err != nil {
		return err
	}
	if g > math.MaxInt64 || span > math.MaxInt64 {
		return d.errorf("duration overflows int64")
	}
	spec := WindowSpec{Granularity: time.Duration(g), Span: time.Duration(span), Fixed: flags&windowFixed != 0}
	if err := spec.Validate(); err != nil {
		if errors.Is(err, ErrTooManyBuckets) { // a valid encoding of a window above today's bound
			return fmt.Errorf("%w: window: %w", ErrCorrupt, err)
		}
		return d.errorf("%v", err)
	}
	out := newWindow(spec)
	if flags&windowStarted != 0 {
		if out.head, err = d.varint(); err != nil {
			return err
		}
		if out.head < out.minB || out.head > out.maxB {
			return d.errorf("head bucket %d outside the representable range", out.head)
		}
		out.started = true
		if _, err := out.decodeBuckets(d, out.head, false, func(x, count int64) {
			if out.ring == nil {
				out.ring = make([]wslot, out.n)
			}
			i := out.slotIndex(x)
			out.ring[i] = wslot{num: x, count: count}
			out.used |= 1 << (uint64(i) & 63)
			out.total = out.total.addInt64(count)
		}); err != nil {
			return err
		}
	}
	if err := d.end(); err != nil {
		return err
	}
	*w = *out
	return nil
}

// Touch reads what AppendBinary reads (the window's fields and its
// written slots) and returns a value of it, so that a caller about to
// encode many windows can load them first in a loop whose loads do not
// wait on each other: the cache misses of several windows then overlap,
// where the encoding takes them one after the other. It changes nothing.
func (w *Window) Touch() int64 {
	if w.ring == nil {
		return w.head
	}
	s := w.head
	m := w.used
	if w.DeltaOK() {
		m = w.since // what AppendDelta reads
	}
	if w.n > 64 {
		return s + w.ring[0].num
	}
	for m != 0 {
		i := bits.TrailingZeros64(m)
		m &= m - 1
		s += w.ring[i].num
	}
	return s
}

// TouchAll is Touch of each of ws, in two steps: the fields of all
// (one cache line a window: see Window), then their slots. A step's
// loads do not wait on each other, so a caller that reads many windows
// has the misses of all of ws in flight at once, where Touch of each in
// turn has the slots of each wait for its fields, and the walk of its
// slot mask for them too. It changes nothing.
func TouchAll(ws []*Window) int64 {
	var s int64
	for _, w := range ws {
		s += w.head
	}
	for _, w := range ws {
		s += w.Touch()
	}
	return s
}

// appendMasked appends, oldest first, the buckets of the head's window
// held by the slots set in mask (a window of at most 64 slots; mask is
// used, or since for a delta): each as its distance before the head (one
// byte) and its count (varint), zero counts only when zeros. It returns b
// and how many buckets it appended.
func (w *Window) appendMasked(b []byte, mask uint64, zeros bool) ([]byte, int) {
	lh := w.lo(w.head)
	first := w.slotIndex(lh)
	n := 0
	// The slots from lh's on: first..n-1, then 0..first-1.
	for _, part := range [2]struct{ from, to, x0 int64 }{{first, w.n, lh - first}, {0, first, lh + w.n - first}} {
		m := mask >> uint64(part.from)
		if part.to < 64 {
			m &= 1<<uint64(part.to-part.from) - 1
		}
		for m != 0 {
			i := part.from + int64(bits.TrailingZeros64(m))
			m &= m - 1
			x := part.x0 + i // the bucket slot i holds if it is in the window
			if x > w.head {
				break
			}
			if sl := &w.ring[i]; sl.num == x && (zeros || sl.count != 0) {
				// The distance is below 64: one byte. So is the zigzag
				// count of a bucket of -64..63 hits.
				if z := uint64(sl.count<<1) ^ uint64(sl.count>>63); z < 0x80 {
					b = append(b, byte(w.head-x), byte(z))
				} else {
					b = binary.AppendUvarint(append(b, byte(w.head-x)), z)
				}
				n++
			}
		}
	}
	return b, n
}
