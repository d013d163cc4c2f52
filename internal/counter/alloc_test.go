package counter

import (
	"encoding/binary"
	"testing"
	"time"
)

// TestAddAllocs pins the allocation behaviour the benchmarks report: the hot
// Add paths do not allocate once a counter has reached its steady state.
func TestAddAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	s := NewSharded(4)
	pn := NewPN()
	_ = pn.Add("local", 1)
	h, _ := NewHLL(10)
	buf := make([]byte, 8)
	for i := range uint64(10000) {
		binary.LittleEndian.PutUint64(buf, i)
		h.Add(buf)
	}
	w, _ := NewWindow(WindowSpec{Granularity: time.Second, Span: time.Minute})
	_ = w.Add(t0, 1)
	hash := NewHash()
	deltas := []FieldDelta{{Name: "a", Delta: 1}, {Name: "b", Delta: 2}}
	_, _ = hash.Add(deltas)
	now := t0
	var i uint64
	tests := []struct {
		name string
		max  float64
		fn   func()
	}{
		{"Sharded.Add", 0, func() { _ = s.Add(1, 1) }},
		{"PN.Add existing replica", 0, func() { _ = pn.Add("local", -1) }},
		{"PN.Value", 0, func() { _ = pn.Value() }},
		{"HLL.Add dense", 0, func() { i++; binary.LittleEndian.PutUint64(buf, i); h.Add(buf) }},
		{"HLL.Count", 0, func() { _ = h.Count() }},
		{"Window.Add", 0, func() { now = now.Add(300 * time.Millisecond); _ = w.Add(now, 1) }},
		{"Window.Sum", 0, func() { _ = w.Sum(now) }},
		{"Hash.Add (the result slice)", 1, func() { _, _ = hash.Add(deltas) }},
	}
	for _, tc := range tests {
		if got := testing.AllocsPerRun(200, tc.fn); got > tc.max {
			t.Errorf("%s: %v allocations, want at most %v", tc.name, got, tc.max)
		}
	}
}
