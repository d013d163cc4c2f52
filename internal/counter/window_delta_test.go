package counter

import (
	"bytes"
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestWindowDeltaFlush plays a store that flushes a window as the engine
// does (the whole encoding and MarkBase unless DeltaOK, else AppendDelta
// beside the last whole one) between random adds (old, new and too old
// buckets, overflows, heads moved past the window), undone batches,
// failed flushes (DropBase, nothing stored) and windows replaced by a
// clone or a decoded copy: after every flush, the stored base decoded
// with the stored delta applied encodes exactly as the window's full
// encoding (MarshalBinary: an incremental flush reads back as a full
// one) and sums the same at every time of its window.
func TestWindowDeltaFlush(t *testing.T) {
	var u WindowUndo
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.SampledFrom([]int{1, 2, 5, 60, 63, 64, 65, 200}).Draw(t, "buckets")
		spec := WindowSpec{Granularity: time.Second, Span: time.Duration(n) * time.Second, Fixed: rapid.Bool().Draw(t, "fixed")}
		w := mustWindow(t, spec)
		base := rapid.Int64Range(-1e6, 1e6).Draw(t, "base")
		var full, delta []byte // what the store holds
		deltas := 0
		add := func() {
			ts := time.Unix(base+rapid.Int64Range(0, int64(3*n)).Draw(t, "at"), 0)
			d := rapid.SampledFrom([]int64{-2, -1, 1, 1, 1, 3, math.MaxInt64, math.MinInt64}).Draw(t, "delta")
			w.TryAdd(ts, d)
		}
		for range rapid.IntRange(1, 40).Draw(t, "steps") {
			switch rapid.IntRange(0, 9).Draw(t, "step") {
			case 0, 1, 2, 3:
				for range rapid.IntRange(1, 4).Draw(t, "adds") {
					add()
				}
			case 4: // a batch undone
				w.BeginUndo(&u)
				add()
				add()
				u.Rollback()
			case 5: // a failed flush: nothing stored
				w.DropBase()
			case 6: // replaced by a copy: a new window to the store
				if rapid.Bool().Draw(t, "decoded") {
					d := new(Window)
					if err := d.UnmarshalBinary(mustMarshal(t, w)); err != nil {
						t.Fatal(err)
					}
					w = d
				} else {
					w = w.Clone()
				}
			default: // a flush
				if w.DeltaOK() {
					delta = w.AppendDelta([]byte("prefix"))[len("prefix"):]
					deltas++
				} else {
					full, delta = mustMarshal(t, w), nil
					w.MarkBase()
				}
				got := new(Window)
				if err := got.UnmarshalBinary(full); err != nil {
					t.Fatal(err)
				}
				if delta != nil {
					if err := got.ApplyDelta(delta); err != nil {
						t.Fatalf("ApplyDelta(%x) over %x: %v", delta, full, err)
					}
				}
				want := mustMarshal(t, w)
				if enc := mustMarshal(t, got); !bytes.Equal(enc, want) {
					t.Fatalf("base %x with delta %x encodes %x, want %x", full, delta, enc, want)
				}
				for k := range int64(2*n + 2) {
					at := time.Unix(base+k*3/2, 0)
					if g, x := got.Sum(at), w.Sum(at); g != x {
						t.Fatalf("Sum(%v) of base %x with delta %x = %d, want %d", at, full, delta, g, x)
					}
				}
			}
		}
		if n > 64 && deltas > 0 {
			t.Fatalf("%d deltas for a window of %d buckets", deltas, n)
		}
	})
}

// TestWindowDeltaSmall: a window of 60 buckets with its base stored
// takes a delta of the one bucket written since (8 bytes), until more
// than a quarter of its slots were written since.
func TestWindowDeltaSmall(t *testing.T) {
	w := mustWindow(t, WindowSpec{Granularity: time.Minute, Span: time.Hour})
	t0 := time.Unix(1_700_000_000, 0)
	for k := range 50 {
		w.Add(t0.Add(time.Duration(k)*time.Minute), 1)
	}
	if w.DeltaOK() {
		t.Fatal("DeltaOK before MarkBase")
	}
	w.MarkBase()
	w.Add(t0.Add(49*time.Minute), 2)
	if !w.DeltaOK() {
		t.Fatal("not DeltaOK after one add")
	}
	if d := w.AppendDelta(nil); len(d) != 1+4+1+2 { // format, head, count, one bucket
		t.Fatalf("delta %x: %d bytes", d, len(d))
	}
	for k := range 15 {
		w.Add(t0.Add(time.Duration(k)*time.Minute), 1)
	}
	if w.DeltaOK() {
		t.Fatal("DeltaOK with 16 of 60 slots written since the base")
	}
	w.MarkBase()
	if !w.DeltaOK() {
		t.Fatal("not DeltaOK after MarkBase")
	}
	w.DropBase()
	if w.DeltaOK() {
		t.Fatal("DeltaOK after DropBase")
	}
}

// FuzzWindowApplyDelta: any input either fails with the window unchanged
// or gives a window whose encoding decodes to one that encodes the same.
func FuzzWindowApplyDelta(f *testing.F) {
	w := mustWindow(f, WindowSpec{Granularity: time.Second, Span: 8 * time.Second})
	for k := range 6 {
		w.Add(time.Unix(int64(100+k), 0), int64(k+1))
	}
	base := mustMarshal(f, w)
	w.MarkBase()
	w.Add(time.Unix(109, 0), 5)
	w.Add(time.Unix(103, 0), -4)
	f.Add(w.AppendDelta(nil))
	f.Add([]byte{formatWindowDelta, 0, 0})
	f.Add([]byte{formatWindowDelta, 0xd0, 0x01, 2, 3, 2, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		w := new(Window)
		if err := w.UnmarshalBinary(base); err != nil {
			t.Fatal(err)
		}
		if err := w.ApplyDelta(data); err != nil {
			if got := mustMarshal(t, w); !bytes.Equal(got, base) {
				t.Fatalf("failed ApplyDelta changed the window: %x, want %x", got, base)
			}
			return
		}
		enc := mustMarshal(t, w)
		d := new(Window)
		if err := d.UnmarshalBinary(enc); err != nil {
			t.Fatalf("encoding %x of an applied delta does not decode: %v", enc, err)
		}
		if got := mustMarshal(t, d); !bytes.Equal(got, enc) {
			t.Fatalf("re-encoded %x, want %x", got, enc)
		}
	})
}
