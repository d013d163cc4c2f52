package rollup

import (
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestAddHashesAtIsAddHashAt: AddHashesAt of a list leaves a sketch State
// (hours and days kept, events on time, late into closed units, and past
// retention) equal to AddHashAt of each hash in turn, and reports a change
// exactly when one of those does.
func TestAddHashesAtIsAddHashAt(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		spec := &Spec{
			UniqueHours: time.Duration(rapid.IntRange(0, 3).Draw(t, "hours")) * 24 * time.Hour,
			UniqueDays:  time.Duration(rapid.IntRange(0, 3).Draw(t, "days")) * 24 * time.Hour,
		}
		if spec.UniqueHours == 0 && spec.UniqueDays == 0 {
			spec.UniqueDays = 48 * time.Hour
		}
		if err := spec.Validate(); err != nil {
			t.Skip(err)
		}
		s := NewState(spec, true)
		now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC).UnixNano()
		pool := rapid.SliceOfN(rapid.Uint64(), 1, 100).Draw(t, "pool")
		hash := rapid.SampledFrom(pool)
		for range rapid.IntRange(1, 30).Draw(t, "ops") {
			now += int64(rapid.IntRange(0, 3*3600).Draw(t, "advance")) * int64(time.Second)
			at := now - int64(rapid.IntRange(0, 5*24*3600).Draw(t, "age"))*int64(time.Second)
			xs := rapid.SliceOfN(hash, 0, 150).Draw(t, "xs")
			want := s.Clone()
			wantChanged := false
			for _, x := range xs {
				if want.AddHashAt(at, now, x) {
					wantChanged = true
				}
			}
			if changed := s.AddHashesAt(at, now, xs); changed != wantChanged {
				t.Fatalf("AddHashesAt of %d hashes at %v: changed %v, AddHashAt each %v", len(xs), time.Unix(0, at).UTC(), changed, wantChanged)
			}
			if !reflect.DeepEqual(s, want) {
				t.Fatalf("AddHashesAt of %d hashes at %v: state %+v, AddHashAt each %+v", len(xs), time.Unix(0, at).UTC(), s, want)
			}
		}
	})
}
