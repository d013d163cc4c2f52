package counter

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// t0 is a minute boundary; at(s) is s seconds after it.
var t0 = time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func mustWindow(t fataler, spec WindowSpec) *Window {
	t.Helper()
	w, err := NewWindow(spec)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestWindowSpecValidate(t *testing.T) {
	tests := []struct {
		name    string
		spec    WindowSpec
		ok      bool
		buckets int
	}{
		{"seed 1s x 300", WindowSpec{time.Second, 300 * time.Second, false}, true, 300},
		{"engine default", WindowSpec{time.Minute, time.Hour, false}, true, 60},
		{"fixed single bucket", WindowSpec{time.Minute, time.Minute, true}, true, 1},
		{"smallest granularity", WindowSpec{time.Millisecond, time.Millisecond, false}, true, 1},
		{"most buckets", WindowSpec{time.Second, time.Hour, false}, true, 3600},
		{"too many buckets", WindowSpec{time.Second, time.Hour + time.Second, false}, false, 3601},
		{"1ms over 100s (1.6 MB ring)", WindowSpec{time.Millisecond, 100 * time.Second, false}, false, 100000},
		{"granularity below 1ms", WindowSpec{time.Millisecond - 1, time.Second, false}, false, 1000},
		{"zero granularity", WindowSpec{0, time.Second, false}, false, 0},
		{"negative granularity", WindowSpec{-time.Second, time.Second, false}, false, 0},
		{"zero span", WindowSpec{time.Second, 0, false}, false, 0},
		{"negative span", WindowSpec{time.Second, -time.Minute, false}, false, -60},
		{"span not a multiple", WindowSpec{time.Second, 1500 * time.Millisecond, false}, false, 1},
		{"span below granularity", WindowSpec{time.Minute, time.Second, true}, false, 0},
		{"zero spec", WindowSpec{}, false, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.spec.Validate()
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrInvalid)) {
				t.Fatalf("Validate() = %v, want ok=%v", err, tc.ok)
			}
			if got := tc.spec.Buckets(); got != tc.buckets {
				t.Fatalf("Buckets() = %d, want %d", got, tc.buckets)
			}
			w, err := NewWindow(tc.spec)
			if tc.ok != (err == nil) || (err == nil && w.Spec() != tc.spec) {
				t.Fatalf("NewWindow: %v, %v", w, err)
			}
		})
	}
}

type wop struct {
	at    float64 // seconds after t0
	delta int64   // an Add when query is false
	query bool    // a Sum(at) that must equal want
	want  int64
	kept  bool // for an Add: whether TryAdd must record it
}

func add(s float64, d int64) wop    { return wop{at: s, delta: d, kept: true} }
func late(s float64, d int64) wop   { return wop{at: s, delta: d, kept: false} }
func sum(s float64, want int64) wop { return wop{at: s, query: true, want: want} }

func runWindow(t *testing.T, w *Window, ops []wop) {
	t.Helper()
	for i, op := range ops {
		if op.query {
			if got := w.Sum(at(op.at)); got != op.want {
				t.Fatalf("op %d: Sum(%vs) = %d, want %d", i, op.at, got, op.want)
			}
			// Sum survives an encoding round trip.
			d := new(Window)
			if err := d.UnmarshalBinary(mustMarshal(t, w)); err != nil {
				t.Fatal(err)
			}
			if got := d.Sum(at(op.at)); got != op.want {
				t.Fatalf("op %d: after a round trip Sum(%vs) = %d, want %d", i, op.at, got, op.want)
			}
			continue
		}
		kept, err := w.TryAdd(at(op.at), op.delta)
		if err != nil || kept != op.kept {
			t.Fatalf("op %d: TryAdd(%vs, %d) = %v, %v; want %v", i, op.at, op.delta, kept, err, op.kept)
		}
	}
}

func TestWindowSliding(t *testing.T) {
	spec := WindowSpec{Granularity: time.Second, Span: 10 * time.Second}
	tests := []struct {
		name string
		ops  []wop
	}{
		{"empty", []wop{sum(0, 0), sum(1e6, 0)}},
		{
			"bucket boundaries",
			[]wop{
				add(0, 1), add(0.999, 1), add(1, 1),
				sum(0.5, 2), sum(1, 3), sum(9.999, 3),
				sum(10, 1), // bucket 0 leaves: the window is (10-10, 10] = buckets 1..10
				sum(10.999, 1), sum(11, 0),
			},
		},
		{"many hits in one bucket", append(repeat(add(5.25, 1), 1000), sum(5.25, 1000), sum(5.999, 1000), sum(14.999, 1000), sum(15, 0))},
		{
			"sum over exactly the window",
			append(everySecond(0, 20), sum(19, 10), sum(19.5, 10), sum(20, 9), sum(29, 0), sum(28.5, 1)),
		},
		{
			"gap longer than the window zeroes everything",
			append(everySecond(0, 5), add(100, 7), sum(100, 7), sum(14, 0), sum(4, 0), sum(109, 7), sum(110, 0)),
		},
		{"gap of exactly the window", []wop{add(0, 1), add(10, 1), sum(10, 1)}},
		{"gap just inside the window", []wop{add(0, 1), add(9.9, 1), sum(9.9, 2), sum(10, 1)}},
		{
			"late hits inside the window count, older ones are dropped",
			[]wop{add(20, 1), add(15, 1), add(11, 1), late(10.999, 1), late(0, 5), add(20.5, 1), sum(20, 4), sum(21, 3)},
		},
		{
			"reader behind the newest write",
			[]wop{add(5, 1), add(8, 2), sum(6, 1), sum(8, 3), sum(4, 0), sum(14, 3), sum(15, 2)},
		},
		{"negative deltas", []wop{add(1, 5), add(2, -3), sum(2, 2), sum(11, -3), add(3, -2), sum(3, 0)}},
		{
			"before the epoch",
			[]wop{add(-t0Secs()-1.5, 1), add(-t0Secs()-0.5, 1), sum(-t0Secs()-0.5, 2), sum(-t0Secs()+8.4, 1)},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			runWindow(t, mustWindow(t, spec), tc.ops)
		})
	}
}

func t0Secs() float64 { return float64(t0.Unix()) }

func repeat(op wop, n int) []wop {
	out := make([]wop, n)
	for i := range out {
		out[i] = op
	}
	return out
}

func everySecond(from, to int) []wop {
	var out []wop
	for s := from; s < to; s++ {
		out = append(out, add(float64(s), 1))
	}
	return out
}

func TestWindowFixed(t *testing.T) {
	tests := []struct {
		name string
		spec WindowSpec
		ops  []wop
	}{
		{
			"resets at the boundary",
			WindowSpec{time.Second, time.Minute, true},
			[]wop{
				add(0, 1), add(30, 1), add(59.9, 3), sum(59.9, 5), sum(30, 2),
				sum(60, 0), add(60, 1), sum(60, 1), sum(119.999, 1), sum(120, 0),
			},
		},
		{
			"twice the budget across a boundary",
			// 10 hits at the end of one window and 10 at the start of the
			// next: each window sees 10, a 2s interval sees 20.
			WindowSpec{time.Second, time.Minute, true},
			// Once the next window has started, the previous one is gone.
			append(append(append(repeat(add(59, 1), 10), sum(59, 10)), repeat(add(60, 1), 10)...), sum(60, 10), sum(59, 0)),
		},
		{
			"late hits in the current window count, earlier windows are gone",
			WindowSpec{time.Second, time.Minute, true},
			[]wop{add(65, 1), add(61, 1), add(60, 1), late(59.9, 1), late(0, 1), sum(65, 3), sum(62, 2)},
		},
		{
			"granularity equal to span",
			WindowSpec{time.Minute, time.Minute, true},
			[]wop{add(0, 2), add(59, 3), sum(59, 5), late(-1, 1), add(61, 1), sum(61, 1), sum(200, 0)},
		},
		{
			"gap of many windows",
			WindowSpec{time.Second, 10 * time.Second, true},
			append(everySecond(0, 10), sum(9, 10), add(1000, 1), sum(1000, 1), sum(9, 0)),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			runWindow(t, mustWindow(t, tc.spec), tc.ops)
		})
	}
}

// TestWindowHitCounter is the seed's hit counter: granularity 1s, span 300s;
// hit(t) records a hit and getHits(t) counts the hits in (t-300, t].
func TestWindowHitCounter(t *testing.T) {
	w := mustWindow(t, WindowSpec{Granularity: time.Second, Span: 300 * time.Second})
	hit := func(s int) {
		if err := w.Add(at(float64(s)), 1); err != nil {
			t.Fatal(err)
		}
	}
	getHits := func(s int) int64 { return w.Sum(at(float64(s))) }
	hit(1)
	hit(2)
	hit(3)
	if got := getHits(4); got != 3 {
		t.Fatalf("getHits(4) = %d, want 3", got)
	}
	hit(300)
	if got := getHits(300); got != 4 {
		t.Fatalf("getHits(300) = %d, want 4", got)
	}
	if got := getHits(301); got != 3 {
		t.Fatalf("getHits(301) = %d, want 3", got)
	}
	if got := getHits(600); got != 0 {
		t.Fatalf("getHits(600) = %d, want 0", got)
	}
	if got := getHits(599); got != 1 {
		t.Fatalf("getHits(599) = %d, want 1", got)
	}
}

// TestWindowHitCounterModel compares the hit counter with the definition:
// with hits at whole seconds, Sum(t) counts the recorded hits in (t-300, t],
// and a hit older than 300s before the newest one is dropped.
func TestWindowHitCounterModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		fixed := rapid.Bool().Draw(t, "fixed")
		w := mustWindow(t, WindowSpec{Granularity: time.Second, Span: 300 * time.Second, Fixed: fixed})
		var hits []int // recorded hits, in seconds
		head, started := 0, false
		now := 0
		for range rapid.IntRange(1, 200).Draw(t, "ops") {
			now += rapid.IntRange(0, 120).Draw(t, "advance")
			if rapid.IntRange(0, 3).Draw(t, "kind") > 0 {
				s := now - rapid.IntRange(0, 400).Draw(t, "lateness")*rapid.IntRange(0, 1).Draw(t, "late")
				var want bool
				switch {
				case !started || s > head:
					want = true
				case fixed:
					want = floorDivInt(s, 300) == floorDivInt(head, 300)
				default:
					want = s > head-300
				}
				got, err := w.TryAdd(at(float64(s)), 1)
				if err != nil || got != want {
					t.Fatalf("hit(%d) with newest %d: recorded %v (%v), want %v", s, head, got, err, want)
				}
				if want {
					hits = append(hits, s)
					if !started || s > head {
						head, started = s, true
					}
				}
				continue
			}
			q := now + rapid.IntRange(-50, 50).Draw(t, "query offset")
			var want int64
			for _, s := range hits {
				in := s > q-300 && s <= q
				if fixed {
					in = floorDivInt(s, 300) == floorDivInt(q, 300) && s <= q
				}
				// Hits before the newest one's window were reset.
				if fixed && floorDivInt(s, 300) != floorDivInt(head, 300) || !fixed && s <= head-300 {
					in = false
				}
				if in {
					want++
				}
			}
			if got := w.Sum(at(float64(q))); got != want {
				t.Fatalf("getHits(%d) = %d, want %d (newest hit %d)", q, got, want, head)
			}
		}
	})
}

func floorDivInt(a, b int) int {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// TestWindowModel checks Window against a brute-force model (a list of
// recorded hits) for random specs, times and deltas, including late, old
// and out-of-range-of-the-window hits and reads behind the newest write.
func TestWindowModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		g := rapid.SampledFrom([]time.Duration{time.Millisecond, time.Second, 7 * time.Second}).Draw(t, "granularity")
		n := rapid.IntRange(1, 12).Draw(t, "buckets")
		spec := WindowSpec{Granularity: g, Span: time.Duration(n) * g, Fixed: rapid.Bool().Draw(t, "fixed")}
		w := mustWindow(t, spec)
		type ev struct{ b, d int64 }
		var evs []ev
		model := newWindow(spec) // only for lo() and bucketOf()
		var head int64
		started := false
		base := rapid.Int64Range(-1e4, 1e4).Draw(t, "base")
		for range rapid.IntRange(1, 80).Draw(t, "ops") {
			ts := time.Unix(0, (base+rapid.Int64Range(0, int64(3*n)).Draw(t, "step"))*int64(g)+rapid.Int64Range(0, int64(g)-1).Draw(t, "offset"))
			base += rapid.Int64Range(0, int64(n)).Draw(t, "advance")
			b, _ := model.bucketOf(ts)
			if rapid.Bool().Draw(t, "add") {
				d := rapid.Int64Range(-5, 5).Draw(t, "delta")
				want := !started || b > head || b >= model.lo(head)
				got, err := w.TryAdd(ts, d)
				if err != nil || got != want {
					t.Fatalf("TryAdd(bucket %d) = %v, %v; want %v (head %d)", b, got, err, want, head)
				}
				if want {
					evs = append(evs, ev{b, d})
					if !started || b > head {
						head, started = b, true
					}
				}
				continue
			}
			var want int64
			counts := map[int64]int64{}
			for _, e := range evs {
				if e.b >= model.lo(b) && e.b <= b && e.b >= model.lo(head) {
					want += e.d
					counts[e.b] += e.d
				}
			}
			if got := w.Sum(ts); got != want {
				t.Fatalf("Sum(bucket %d) = %d, want %d (head %d)", b, got, want, head)
			}
			var wantBuckets []Bucket
			for x := b - int64(3*n); x <= b; x++ {
				if c := counts[x]; c != 0 {
					wantBuckets = append(wantBuckets, Bucket{Start: time.Unix(0, x*int64(g)).UTC(), Count: c})
				}
			}
			if got := w.Buckets(ts); !slices.Equal(got, wantBuckets) {
				t.Fatalf("Buckets(bucket %d) = %v, want %v", b, got, wantBuckets)
			}
			d := new(Window)
			if err := d.UnmarshalBinary(mustMarshal(t, w)); err != nil {
				t.Fatal(err)
			}
			if got := d.Sum(ts); got != want {
				t.Fatalf("after a round trip Sum = %d, want %d", got, want)
			}
		}
	})
}

func TestWindowBuckets(t *testing.T) {
	w := mustWindow(t, WindowSpec{Granularity: time.Minute, Span: 5 * time.Minute})
	for _, op := range []struct {
		s float64
		d int64
	}{{0, 1}, {30, 1}, {61, 4}, {190, 2}, {200, -2}, {299, 9}} {
		if err := w.Add(at(op.s), op.d); err != nil {
			t.Fatal(err)
		}
	}
	want := []Bucket{{t0, 2}, {t0.Add(time.Minute), 4}, {t0.Add(4 * time.Minute), 9}} // minute 3 nets to zero
	if got := w.Buckets(at(299)); !slices.Equal(got, want) {
		t.Fatalf("Buckets = %v, want %v", got, want)
	}
	if got := w.Buckets(at(300)); !slices.Equal(got, want[1:]) {
		t.Fatalf("Buckets a minute later = %v, want %v", got, want[1:])
	}
	if got := w.Buckets(at(70)); !slices.Equal(got, want[:2]) {
		t.Fatalf("Buckets behind the head = %v, want %v", got, want[:2])
	}
	if w.Buckets(at(1e6)) != nil || w.Buckets(time.Time{}) != nil {
		t.Fatal("Buckets far ahead or out of range should be empty")
	}
	for _, b := range w.Buckets(at(299)) {
		if b.Start.Location() != time.UTC || b.Start.UnixNano()%int64(time.Minute) != 0 {
			t.Fatalf("bucket start %v is not a UTC minute", b.Start)
		}
	}
}

func TestWindowOverflow(t *testing.T) {
	spec := WindowSpec{Granularity: time.Second, Span: 3 * time.Second}
	t.Run("bucket", func(t *testing.T) {
		w := mustWindow(t, spec)
		_ = w.Add(at(0), math.MinInt64)
		_ = w.Add(at(1), math.MaxInt64) // sum -1
		before := mustMarshal(t, w)
		if err := w.Add(at(0), -1); !errors.Is(err, ErrOverflow) {
			t.Fatalf("bucket overflow: %v", err)
		}
		if !bytes.Equal(before, mustMarshal(t, w)) || w.Sum(at(1)) != -1 {
			t.Fatal("failed Add changed the window")
		}
	})
	t.Run("sum", func(t *testing.T) {
		w := mustWindow(t, spec)
		_ = w.Add(at(0), math.MaxInt64)
		before := mustMarshal(t, w)
		for _, s := range []float64{0, 1, 2} {
			if err := w.Add(at(s), 1); !errors.Is(err, ErrOverflow) {
				t.Fatalf("sum overflow at %vs: %v", s, err)
			}
		}
		if !bytes.Equal(before, mustMarshal(t, w)) {
			t.Fatal("failed Add changed the window (or moved its head)")
		}
		if err := w.Add(at(3), 1); err != nil || w.Sum(at(3)) != 1 {
			t.Fatalf("after the big bucket left: %v, sum %d", err, w.Sum(at(3)))
		}
	})
	t.Run("sliding out of a negative bucket saturates", func(t *testing.T) {
		w := mustWindow(t, spec)
		_ = w.Add(at(0), -10)
		_ = w.Add(at(1), math.MaxInt64)
		_ = w.Add(at(2), 10) // sum max
		if w.Sum(at(2)) != math.MaxInt64 || w.Sum(at(3)) != math.MaxInt64 {
			t.Fatal("want a saturated sum once -10 slid out")
		}
		if err := w.Add(at(3), 1); !errors.Is(err, ErrOverflow) {
			t.Fatalf("Add away from zero: %v", err)
		}
		if err := w.Add(at(3), -20); err != nil || w.Sum(at(3)) != math.MaxInt64-10 {
			t.Fatalf("Add towards zero: %v, sum %d", err, w.Sum(at(3)))
		}
	})
}

func TestWindowInvalid(t *testing.T) {
	var zero Window
	if err := zero.Add(t0, 1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("zero Window Add: %v", err)
	}
	if zero.Sum(t0) != 0 || zero.Buckets(t0) != nil {
		t.Fatal("zero Window is not empty")
	}
	if _, err := zero.MarshalBinary(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("zero Window MarshalBinary: %v", err)
	}
	w := mustWindow(t, WindowSpec{Granularity: time.Millisecond, Span: time.Second})
	for _, ts := range []time.Time{{}, time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC), time.Unix(0, math.MinInt64)} {
		if err := w.Add(ts, 1); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Add(%v): %v, want ErrInvalid", ts, err)
		}
		if w.Sum(ts) != 0 {
			t.Fatalf("Sum(%v) != 0", ts)
		}
	}
	// The extremes that are representable work and encode.
	for _, ts := range []time.Time{time.Unix(0, math.MaxInt64), time.Unix(0, -math.MaxInt64/int64(time.Millisecond)*int64(time.Millisecond))} {
		w := mustWindow(t, WindowSpec{Granularity: time.Millisecond, Span: time.Second})
		if err := w.Add(ts, 1); err != nil || w.Sum(ts) != 1 {
			t.Fatalf("Add(%v): %v, sum %d", ts, err, w.Sum(ts))
		}
		d := new(Window)
		if err := d.UnmarshalBinary(mustMarshal(t, w)); err != nil || d.Sum(ts) != 1 || len(d.Buckets(ts)) != 1 {
			t.Fatalf("round trip at %v: %v", ts, err)
		}
	}
}

func TestWindowCodec(t *testing.T) {
	spec := WindowSpec{Granularity: time.Second, Span: 10 * time.Second}
	fixed := WindowSpec{Granularity: time.Second, Span: 10 * time.Second, Fixed: true}
	tests := []struct {
		name string
		spec WindowSpec
		ops  []wop
		// after decoding, these must hold
		check []wop
	}{
		{"empty", spec, nil, []wop{sum(0, 0), add(-1000, 1), sum(-1000, 1)}},
		{"one bucket", spec, []wop{add(3, 4)}, []wop{sum(3, 4), sum(12, 4), sum(13, 0)}},
		{"full window", spec, everySecond(0, 10), []wop{sum(9, 10), sum(15, 4)}},
		{"wrapped ring", spec, everySecond(0, 25), []wop{sum(24, 10), late(14, 1), add(15, 1), sum(24, 11)}},
		// A head without non-zero buckets still drops hits that are too old.
		{"cancelled hits keep the head", spec, []wop{add(50, 1), add(50, -1)}, []wop{sum(50, 0), late(40, 1), add(41, 2), sum(50, 2)}},
		{"fixed", fixed, []wop{add(5, 1), add(12, 2), add(13, 3)}, []wop{sum(13, 5), late(9, 1), sum(20, 0)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := mustWindow(t, tc.spec)
			runWindow(t, w, tc.ops)
			enc := mustMarshal(t, w)
			d := new(Window)
			if err := d.UnmarshalBinary(enc); err != nil {
				t.Fatal(err)
			}
			if d.Spec() != tc.spec || !bytes.Equal(mustMarshal(t, d), enc) {
				t.Fatal("round trip changed the window")
			}
			c := w.Clone()
			runWindow(t, d, tc.check)
			runWindow(t, c, tc.check)
			if !bytes.Equal(mustMarshal(t, c), mustMarshal(t, d)) {
				t.Fatal("decoded and cloned windows diverged")
			}
			if !bytes.Equal(mustMarshal(t, w), enc) {
				t.Fatal("Clone shares state with the original")
			}
			checkTruncations(t, enc, func() binaryCodec { return new(Window) })
		})
	}
}

func TestWindowCodecErrors(t *testing.T) {
	hdr := []byte{formatWindow, windowStarted, 0x80, 0x94, 0xeb, 0xdc, 0x03, 0x80, 0xc8, 0xaf, 0xa0, 0x25} // 1s, 10s
	with := func(tail ...byte) []byte { return append(slices.Clone(hdr), tail...) }
	tests := []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"wrong format", []byte{formatHLL, 0, 1, 1}},
		{"unknown flag", append([]byte{formatWindow, 4}, hdr[2:]...)},
		{"invalid spec", []byte{formatWindow, 0, 1, 1}},
		{"span not a multiple", []byte{formatWindow, 0, 0x80, 0x94, 0xeb, 0xdc, 0x03, 0x81, 0xc8, 0xaf, 0xa0, 0x25}},
		{"duration overflow", []byte{formatWindow, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 1}},
		{"started without head", with()},
		{"head out of range", with(0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0)},
		{"more buckets than the window", with(100, 11)},
		{"bucket outside the window", with(100, 1, 10, 2)},
		{"buckets out of order", with(100, 2, 1, 2, 3, 2)},
		{"duplicate bucket", with(100, 2, 1, 2, 1, 2)},
		{"zero count", with(100, 1, 0, 0)},
		{"count beyond input", with(100, 3, 0, 2)},
		{"not started but buckets", []byte{formatWindow, 0, 0x80, 0x94, 0xeb, 0xdc, 0x03, 0x80, 0xc8, 0xaf, 0xa0, 0x25, 0}},
	}
	good := mustWindow(t, WindowSpec{Granularity: time.Second, Span: 10 * time.Second})
	_ = good.Add(at(1), 3)
	enc := mustMarshal(t, good)
	if !bytes.Equal(enc[:len(hdr)], hdr) {
		t.Fatalf("test header %x does not match the encoder's %x", hdr, enc[:len(hdr)])
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := good.Clone()
			if err := w.UnmarshalBinary(tc.in); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("UnmarshalBinary(%x) = %v, want ErrCorrupt", tc.in, err)
			}
			if !bytes.Equal(enc, mustMarshal(t, w)) {
				t.Fatal("failed UnmarshalBinary changed the receiver")
			}
		})
	}
}

func FuzzWindowUnmarshal(f *testing.F) {
	for _, spec := range []WindowSpec{
		{time.Second, 10 * time.Second, false},
		{time.Second, 10 * time.Second, true},
		{time.Millisecond, 5 * time.Millisecond, false},
	} {
		w := mustWindow(f, spec)
		f.Add(mustMarshal(f, w))
		_ = w.Add(at(1), 5)
		_ = w.Add(at(3), -2)
		_ = w.Add(at(9), math.MaxInt64)
		f.Add(mustMarshal(f, w))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		w, ok := checkDecode(t, data, func() *Window { return new(Window) }, func() *Window {
			w := mustWindow(t, WindowSpec{Granularity: time.Minute, Span: time.Hour})
			_ = w.Add(t0, 1)
			return w
		}, true)
		if !ok || !w.started {
			return
		}
		// At the head, Sum is the saturated sum of Buckets.
		now := time.Unix(0, w.head*w.g)
		var s i128
		bs := w.Buckets(now)
		for i, b := range bs {
			s = s.addInt64(b.Count)
			if i > 0 && !bs[i-1].Start.Before(b.Start) {
				t.Fatal("Buckets are not oldest first")
			}
		}
		if got := w.Sum(now); got != s.clamp() {
			t.Fatalf("Sum(head) = %d, sum of Buckets %d", got, s.clamp())
		}
		// The window keeps working: a hit at the head is recorded unless
		// it would overflow.
		if kept, err := w.TryAdd(now, 1); err == nil && !kept {
			t.Fatal("hit at the head was dropped")
		}
	})
}

// TestWindowUnmarshalOversized: a stored window above MaxWindowBuckets (an
// attacker's 1ms over 100s, written before the bound existed or by a peer)
// is refused with ErrCorrupt before its 1.6 MB ring is allocated.
func TestWindowUnmarshalOversized(t *testing.T) {
	b := []byte{formatWindow, windowStarted}
	b = binary.AppendUvarint(b, uint64(time.Millisecond))
	b = binary.AppendUvarint(b, uint64(100*time.Second))
	b = binary.AppendVarint(b, 1_700_000_000_000) // head bucket
	b = binary.AppendUvarint(b, 1)                // one bucket
	b = binary.AppendUvarint(b, 0)
	b = binary.AppendVarint(b, 1)
	var w Window
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := w.UnmarshalBinary(b)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "at most 3600") {
		t.Fatalf("UnmarshalBinary(1ms/100s) = %v, want ErrCorrupt naming the bound", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 64<<10 {
		t.Fatalf("refusing the window allocated %d bytes", got)
	}
}
