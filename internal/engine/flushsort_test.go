package engine

import (
	"bytes"
	"testing"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
	"pgregory.net/rapid"
)

// TestSortedKV: a flush's counters go into its batch in key order, each
// with its value or as a deletion, and the buffer is reused across
// flushes.
func TestSortedKV(t *testing.T) {
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var kv sortedKV
	rapid.Check(t, func(rt *rapid.T) {
		// Any bytes, or few values (zeros too) so that keys share their
		// first 16 bytes (the sort's integer prefixes) or differ only by
		// a zero at the end.
		shared := rapid.Custom(func(rt *rapid.T) []byte {
			k := []byte("crecent:u1234567890")[:rapid.IntRange(0, 19).Draw(rt, "prefix")]
			return append(k, rapid.SliceOfN(rapid.ByteRange(0, 2), 0, 4).Draw(rt, "suffix")...)
		}).Filter(func(k []byte) bool { return len(k) > 0 })
		key := rapid.OneOf(rapid.SliceOfN(rapid.Byte(), 1, 20), shared)
		keys := rapid.SliceOfDistinct(key, func(k []byte) string { return string(k) }).Draw(rt, "keys")
		kv.reset()
		want := map[string][]byte{}
		dels := map[string]bool{}
		for i, k := range keys {
			if i%5 == 4 {
				kv.add(k, nil, true)
				dels[string(k)] = true
				continue
			}
			v := rapid.SliceOfN(rapid.Byte(), 0, 30).Draw(rt, "v")
			kv.add(k, v, false)
			want[string(k)] = v
		}
		b := db.NewBatch()
		defer b.Close()
		kv.writeSorted(b)
		var prev []byte
		n := 0
		for r := b.Reader(); ; n++ {
			kind, k, v, ok, err := r.Next()
			if err != nil {
				rt.Fatal(err)
			}
			if !ok {
				break
			}
			if n > 0 && bytes.Compare(prev, k) >= 0 {
				rt.Fatalf("key %q after %q", k, prev)
			}
			prev = append(prev[:0], k...)
			switch kind {
			case pebble.InternalKeyKindDelete:
				if !dels[string(k)] {
					rt.Fatalf("%q deleted, was set", k)
				}
			case pebble.InternalKeyKindSet:
				if w, ok := want[string(k)]; !ok || !bytes.Equal(w, v) {
					rt.Fatalf("%q = %q, want %q (%v)", k, v, w, ok)
				}
			default:
				rt.Fatalf("kind %v", kind)
			}
		}
		if n != len(keys) {
			rt.Fatalf("%d keys in the batch, %d added", n, len(keys))
		}
	})
}
