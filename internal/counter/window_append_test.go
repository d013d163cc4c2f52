package counter

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// marshalTwoPass is MarshalBinary as it was before AppendBinary: the
// buckets counted in a first pass over the head's window, then written,
// each slot found by its bucket number. The encoding must not change
// (windows are on disk and sent to peers).
func marshalTwoPass(w *Window) []byte {
	var flags byte
	if w.spec.Fixed {
		flags |= windowFixed
	}
	if w.started {
		flags |= windowStarted
	}
	b := []byte{formatWindow, flags}
	b = binary.AppendUvarint(b, uint64(w.spec.Granularity))
	b = binary.AppendUvarint(b, uint64(w.spec.Span))
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
// more varint bytes), exactly as the two-pass encoder did, after any
// prefix; CopyTo makes an equal, independent copy, over a reused ring.
func TestWindowAppendBinary(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.SampledFrom([]int{1, 2, 60, 127, 128, 129, 200, MaxWindowBuckets}).Draw(t, "buckets")
		spec := WindowSpec{Granularity: time.Second, Span: time.Duration(n) * time.Second, Fixed: rapid.Bool().Draw(t, "fixed")}
		w := mustWindow(t, spec)
		base := rapid.Int64Range(-1e6, 1e6).Draw(t, "base")
		for range rapid.IntRange(0, 3*n).Draw(t, "adds") {
			ts := time.Unix(base+rapid.Int64Range(0, int64(2*n)).Draw(t, "step"), 0)
			w.TryAdd(ts, rapid.Int64Range(-3, 3).Draw(t, "delta"))
		}
		want := marshalTwoPass(w)
		got, err := w.MarshalBinary()
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("MarshalBinary = %x, %v; want %x", got, err, want)
		}
		prefix := []byte("prefix")
		got, err = w.AppendBinary(prefix)
		if err != nil || !bytes.Equal(got, append([]byte("prefix"), want...)) {
			t.Fatalf("AppendBinary after a prefix = %x, %v; want the prefix and %x", got, err, want)
		}
		// A destination with a ring of another size, and one reused.
		dst := mustWindow(t, WindowSpec{Granularity: time.Second, Span: time.Duration(rapid.IntRange(1, 300).Draw(t, "dst")) * time.Second})
		dst.TryAdd(time.Unix(base, 0), 5)
		w.CopyTo(dst)
		if c, _ := dst.MarshalBinary(); !bytes.Equal(c, want) {
			t.Fatalf("CopyTo: %x, want %x", c, want)
		}
		w.TryAdd(time.Unix(base+int64(2*n)+1, 0), 1) // the copy is independent
		if c, _ := dst.MarshalBinary(); !bytes.Equal(c, want) {
			t.Fatalf("CopyTo: the copy changed with the original: %x, want %x", c, want)
		}
	})
}
