package engine

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestSortLockKeys: sortLockKeys orders keys as slices.Sort does, for
// keys as acquireAllIn makes them (a lock order in the high half, the
// index in the low, increasing), short (a comparison sort) and long (the
// radix sort), with lock orders that share a shard or a whole key's high
// half and ones that differ in every byte; the spare it returns is the
// other buffer, not the sorted one.
func TestSortLockKeys(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 3000).Draw(t, "n")
		shards := rapid.IntRange(1, 256).Draw(t, "shards")
		idxBits := rapid.IntRange(0, 24).Draw(t, "idxBits")
		keys := make([]uint64, n)
		for i := range keys {
			sh := uint64(rapid.IntRange(0, shards-1).Draw(t, "shard"))
			idx := uint64(rapid.Uint32().Draw(t, "idx")) & (1<<idxBits - 1)
			keys[i] = (sh<<24|idx)<<32 | uint64(i)
		}
		want := slices.Sorted(slices.Values(keys))
		spare := make([]uint64, rapid.IntRange(0, 10).Draw(t, "spare"))
		got, other := sortLockKeys(keys, spare)
		if !slices.Equal(got, want) {
			t.Fatalf("sorted %d keys: got %x, want %x", n, got, want)
		}
		if len(got) > 0 && len(other) > 0 && &other[0] == &got[0] {
			t.Fatal("the spare is the sorted buffer")
		}
	})
}
