package consumer

import (
	"strconv"
	"testing"

	"pgregory.net/rapid"
)

// TestMarkerSetMatchesMap: the segment's set of markers answers, after
// any sequence of adds and resets, across growth, exactly as a
// map[string]struct{} does: add reports a marker new once until the next
// reset, and the set holds as many markers as the map.
func TestMarkerSetMatchesMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var set markerSet
		want := map[string]struct{}{}
		// Few distinct markers of each length, so that most adds repeat.
		gen := rapid.Custom(func(t *rapid.T) string {
			return MarkerID(rapid.SampledFrom([]string{"e", "ev-1", "ev-2", "#x", ""}).Draw(t, "base") + rapid.StringN(0, 2, -1).Draw(t, "suffix"))
		})
		for range rapid.IntRange(0, 4000).Draw(t, "steps") {
			if rapid.IntRange(0, 200).Draw(t, "action") == 0 {
				set.reset()
				clear(want)
				continue
			}
			mk := gen.Draw(t, "marker")
			_, had := want[mk]
			want[mk] = struct{}{}
			if got := set.add(mk); got != !had {
				t.Fatalf("add(%q) = %v, want %v", mk, got, !had)
			}
			if len(set.keys) != len(want) {
				t.Fatalf("set holds %d markers, want %d", len(set.keys), len(want))
			}
		}
		for mk := range want {
			if set.add(mk) {
				t.Fatalf("add(%q) of a marker in the set reported it new", mk)
			}
		}
	})
}

// TestMarkerSetManyDistinct: thousands of distinct markers (the table
// grows several times) are each new once, and again after a reset.
func TestMarkerSetManyDistinct(t *testing.T) {
	var set markerSet
	for round := range 2 {
		for i := range 5000 {
			mk := MarkerID("ev-" + string(rune('a'+i%26)) + "-" + strconv.Itoa(i))
			if !set.add(mk) {
				t.Fatalf("round %d: add(%q) first time: not new", round, mk)
			}
			if set.add(mk) {
				t.Fatalf("round %d: add(%q) second time: new", round, mk)
			}
		}
		if len(set.keys) != 5000 {
			t.Fatalf("round %d: %d markers, want 5000", round, len(set.keys))
		}
		set.reset()
	}
}
