package counter

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"
	"time"
	"unsafe"

	"pgregory.net/rapid"
)

// marshalTwoPass is MarshalBinary as it was before AppendBinary: the
// buckets counted in a first pass over the head's window, then written,
// each slot found by its bucket number. The encoding must not change
// (windows are on disk and sent to peers).
func marshalTwoPass(w *Window) []byte {
	var flags byte
	if w.Spec().Fixed {
		flags |= windowFixed
	}
	if w.started {
		flags |= windowStarted
	}
	b := []byte{formatWindow, flags}
	b = binary.AppendUvarint(b, uint64(w.Spec().Granularity))
	b = binary.AppendUvarint(b, uint64(w.Spec().Span))
	if !w.started {
		return b
	}
	b = binary.AppendVarint(b, w.head)
	lh := w.lo(w.head)
	n := 0
	if w.ring != nil {
		for x := lh; x <= w.head; x++ {
			if sl := w.ring[w.slotIndex(x)]; sl.num == x && sl.count != 0 {
				n++
			}
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	if n == 0 {
		return b
	}
	for x := lh; x <= w.head; x++ {
		if sl := w.ring[w.slotIndex(x)]; sl.num == x && sl.count != 0 {
			b = binary.AppendUvarint(b, uint64(w.head-x))
			b = binary.AppendVarint(b, sl.count)
		}
	}
	return b
}

// TestWindowAppendBinary: AppendBinary (and MarshalBinary) encode random
// windows, up to the most buckets a window holds (counts of one, two and
// more varint bytes; windows of up to 64 buckets read only the slots
// written), exactly as the two-pass encoder did, after any prefix, also
// decoded windows and clones after further adds.
// (Touch and TouchAll, which the engine's flush calls before encoding,
// are called on the windows here too: they must change nothing.)
func TestWindowAppendBinary(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.SampledFrom([]int{1, 2, 7, 60, 63, 64, 65, 127, 128, 129, 200, MaxWindowBuckets}).Draw(t, "buckets")
		spec := WindowSpec{Granularity: time.Second, Span: time.Duration(n) * time.Second, Fixed: rapid.Bool().Draw(t, "fixed")}
		w := mustWindow(t, spec)
		base := rapid.Int64Range(-1e6, 1e6).Draw(t, "base")
		for range rapid.IntRange(0, 3*n).Draw(t, "adds") {
			ts := time.Unix(base+rapid.Int64Range(0, int64(2*n)).Draw(t, "step"), 0)
			w.TryAdd(ts, rapid.Int64Range(-3, 3).Draw(t, "delta"))
		}
		want := marshalTwoPass(w)
		w.Touch() // reads only: the window encodes as before
		got, err := w.MarshalBinary()
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("MarshalBinary = %x, %v; want %x", got, err, want)
		}
		// A decoded copy (its slots marked as written by the decoder)
		// encodes the same, before and after the same further adds.
		d := new(Window)
		if err := d.UnmarshalBinary(want); err != nil {
			t.Fatal(err)
		}
		TouchAll([]*Window{d, w})
		for range rapid.IntRange(0, n).Draw(t, "more") {
			ts := time.Unix(base+rapid.Int64Range(0, int64(3*n)).Draw(t, "more-step"), 0)
			delta := rapid.Int64Range(-3, 3).Draw(t, "more-delta")
			w2 := w.Clone()
			w2.TryAdd(ts, delta)
			d.TryAdd(ts, delta)
			w = w2
		}
		want = marshalTwoPass(w)
		if got := mustMarshal(t, d); !bytes.Equal(got, want) || !bytes.Equal(mustMarshal(t, w), want) {
			t.Fatalf("after more adds: decoded copy %x, original %x, want %x", got, mustMarshal(t, w), want)
		}
		prefix := []byte("prefix")
		got, err = w.AppendBinary(prefix)
		if err != nil || !bytes.Equal(got, append([]byte("prefix"), want...)) {
			t.Fatalf("AppendBinary after a prefix = %x, %v; want the prefix and %x", got, err, want)
		}
	})
}

// TestWindowUndo: after random adds, BeginUndo, more adds (into old and
// new buckets, moving the head, some too old, some overflowing) and
// Rollback, the window encodes and sums as it did at BeginUndo, also from
// an empty window or one decoded without a ring; with End the adds stay;
// a clone records nothing; an undo is reusable.
func TestWindowUndo(t *testing.T) {
	var u WindowUndo
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.SampledFrom([]int{1, 5, 60}).Draw(t, "buckets")
		spec := WindowSpec{Granularity: time.Second, Span: time.Duration(n) * time.Second, Fixed: rapid.Bool().Draw(t, "fixed")}
		w := mustWindow(t, spec)
		base := rapid.Int64Range(-1e6, 1e6).Draw(t, "base")
		add := func(label string) {
			ts := time.Unix(base+rapid.Int64Range(0, int64(3*n)).Draw(t, label), 0)
			d := rapid.SampledFrom([]int64{-2, 1, 3, math.MaxInt64, math.MinInt64}).Draw(t, label+"-delta")
			w.TryAdd(ts, d)
		}
		for range rapid.IntRange(0, 2*n).Draw(t, "before") {
			add("before")
		}
		if rapid.Bool().Draw(t, "decoded") { // a decoded window may have no ring
			d := new(Window)
			if err := d.UnmarshalBinary(mustMarshal(t, w)); err != nil {
				t.Fatal(err)
			}
			w = d
		}
		want := mustMarshal(t, w)
		at := time.Unix(base+int64(3*n), 0)
		wantSum := w.Sum(at)
		w.BeginUndo(&u)
		c := w.Clone()
		for range rapid.IntRange(1, 2*n).Draw(t, "during") {
			add("during")
		}
		during := mustMarshal(t, w)
		if rapid.Bool().Draw(t, "keep") {
			u.End()
			if got := mustMarshal(t, w); !bytes.Equal(got, during) {
				t.Fatalf("End changed the window: %x, want %x", got, during)
			}
			return
		}
		u.Rollback()
		if got := mustMarshal(t, w); !bytes.Equal(got, want) {
			t.Fatalf("after Rollback: %x, want %x (before the adds)", got, want)
		}
		if got := w.Sum(at); got != wantSum {
			t.Fatalf("after Rollback Sum = %d, want %d", got, wantSum)
		}
		if w.undo != nil || c.undo != nil {
			t.Fatal("still recording after Rollback, or a clone records")
		}
		add("after") // no longer recorded
		if len(u.slots) != 0 {
			t.Fatalf("%d slots recorded after Rollback", len(u.slots))
		}
	})
}

// TestWindowLayout: a Window is 128 bytes (a size class whose objects
// start on a cache line) and what a flush reads of it (Touch, DeltaOK,
// AppendDelta) is in its first 64 bytes, one cache line.
func TestWindowLayout(t *testing.T) {
	var w Window
	if s := unsafe.Sizeof(w); s != 128 {
		t.Errorf("a Window is %d bytes, want 128", s)
	}
	for name, end := range map[string]uintptr{
		"ring":    unsafe.Offsetof(w.ring) + unsafe.Sizeof(w.ring),
		"head":    unsafe.Offsetof(w.head) + unsafe.Sizeof(w.head),
		"since":   unsafe.Offsetof(w.since) + unsafe.Sizeof(w.since),
		"used":    unsafe.Offsetof(w.used) + unsafe.Sizeof(w.used),
		"n":       unsafe.Offsetof(w.n) + unsafe.Sizeof(w.n),
		"started": unsafe.Offsetof(w.started) + unsafe.Sizeof(w.started),
		"based":   unsafe.Offsetof(w.based) + unsafe.Sizeof(w.based),
		"fixed":   unsafe.Offsetof(w.fixed) + unsafe.Sizeof(w.fixed),
	} {
		if end > 64 {
			t.Errorf("Window.%s ends at byte %d, past the first cache line", name, end)
		}
	}
}
