package rollup

import (
	"errors"
	"math/bits"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/counterd/counterd/internal/counter"
)

func TestDecompose(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := rapid.Int64Range(0, 100000).Draw(t, "a")
		b := a + rapid.Int64Range(-1, 2000).Draw(t, "len")
		L := rapid.IntRange(0, 10).Draw(t, "L")
		blocks := Decompose(a, b, L)
		next := a
		for _, blk := range blocks {
			size := int64(1) << blk.Level
			if blk.Level > L || blk.Index<<blk.Level != next {
				t.Fatalf("block %+v does not start at %d", blk, next)
			}
			next += size
		}
		if next != max(a, b+1) {
			t.Fatalf("blocks end at %d, want %d", next, b+1)
		}
		if n := b - a + 1; n > 0 {
			bound := 2*L + int(n>>L) + 1
			if len(blocks) > bound {
				t.Fatalf("%d blocks for %d units, bound %d", len(blocks), n, bound)
			}
		}
	})
}

// uniquesModel is a sketch State over days (or hours) with the items of
// each unit remembered, so that any union can be built directly.
type uniquesModel struct {
	spec  *Spec
	s     *State
	st    *memStore
	items map[Granularity]map[int64][]uint64 // unit -> index -> hashes
	gen   uint64
}

func (m *uniquesModel) add(now int64, x uint64) {
	m.s.AddHash(now, x)
	for _, unit := range []Granularity{Hour, Day} {
		if m.spec.SketchRetention(unit) > 0 {
			m.items[unit][unit.Bucket(now)] = append(m.items[unit][unit.Bucket(now)], x)
		}
	}
}

// direct is the sketch of the items of units [a, b].
func (m *uniquesModel) direct(unit Granularity, a, b int64) *counter.HLL {
	h := m.spec.newSketch()
	for idx, xs := range m.items[unit] {
		if idx >= a && idx <= b {
			for _, x := range xs {
				h.AddHash(x)
			}
		}
	}
	return h
}

// TestUniquesModel checks that Uniques answers exactly the sketch of the
// items of the last n units (same registers, so the same count), through
// random gaps, flushes, restarts and purges, and that it merges few
// sketches.
func TestUniquesModel(t *testing.T) {
	const day = 24 * time.Hour
	rapid.Check(t, func(t *rapid.T) {
		spec := &Spec{UniqueHours: 72 * time.Hour, UniqueDays: 300 * day, Precision: 10}
		m := &uniquesModel{spec: spec, s: NewState(spec, true), st: newMemStore(),
			items: map[Granularity]map[int64][]uint64{Hour: {}, Day: {}}}
		now := ns(t0)
		var x uint64
		for range rapid.IntRange(1, 80).Draw(t, "steps") {
			switch rapid.IntRange(0, 9).Draw(t, "op") {
			case 0, 1, 2:
				for range rapid.IntRange(1, 40).Draw(t, "items") {
					x++
					m.add(now, mix(x))
				}
			case 3:
				now += rapid.Int64Range(0, 3*nsHour).Draw(t, "small")
			case 4:
				now += rapid.Int64Range(0, 40*nsDay).Draw(t, "large")
			case 5:
				m.gen++
				m.st.flush(t, m.s, m.gen)
			case 6:
				m.gen++
				head := m.st.flush(t, m.s, m.gen)
				var err error
				if m.s, err = UnmarshalHead(spec, true, head); err != nil || m.s == nil {
					t.Fatalf("restart: %v", err)
				}
			case 7:
				m.st.purge(spec.Horizons(now))
			default:
				unit := []Granularity{Hour, Day}[rapid.IntRange(0, 1).Draw(t, "unit")]
				checkUniques(t, m, unit, now)
			}
		}
		checkUniques(t, m, Day, now)
	})
}

func checkUniques(t *rapid.T, m *uniquesModel, unit Granularity, now int64) {
	v, ok := m.s.SketchView(unit)
	if !ok {
		t.Fatalf("no %s view", unit)
	}
	n := rapid.IntRange(1, v.MaxUnits()).Draw(t, "n")
	m.st.reads = 0
	est, err := v.Uniques(m.st, n, now)
	if err != nil {
		t.Fatal(err)
	}
	u := unit.Bucket(now)
	want := m.direct(unit, u-int64(n)+1, u)
	if est.Value != want.Count() || est.Precision != want.Precision() {
		t.Fatalf("last %d %ss: %d (p%d), want %d (p%d)", n, unit, est.Value, est.Precision, want.Count(), want.Precision())
	}
	L := levels(unit)
	if bound := 2*L + n>>L + 1; m.st.reads > bound {
		t.Fatalf("last %d %ss read %d stored sketches, bound %d", n, unit, m.st.reads, bound)
	}
	if est.Merged > m.st.reads+1+len(v.mem) {
		t.Fatalf("merged %d", est.Merged)
	}
	if !est.From.Equal(time.Unix(0, unit.Start(u-int64(n)+1)).UTC()) || !est.To.Equal(time.Unix(0, unit.Start(u+1)).UTC()) {
		t.Fatalf("range [%v, %v)", est.From, est.To)
	}
}

// TestUniques365 builds a year of daily sketches and checks the query
// bound the issue asks for: last-365-days merges at most 2*log2(365)+2.
func TestUniques365(t *testing.T) {
	spec := &Spec{UniqueDays: 400 * 24 * time.Hour, Precision: 12}
	s, st := NewState(spec, true), newMemStore()
	now := ns(t0)
	x := uint64(0)
	for d := range 400 {
		for range 50 {
			x++
			s.AddHash(now, mix(x))
		}
		now += nsDay
		if d%7 == 0 {
			st.flush(t, s, uint64(d+1))
		}
	}
	st.flush(t, s, 1000)
	v, _ := s.SketchView(Day)
	st.reads = 0
	est, err := v.Uniques(st, 365, now)
	if err != nil {
		t.Fatal(err)
	}
	if limit := 2*bits.Len(365) + 2; est.Merged > limit {
		t.Fatalf("merged %d sketches, limit %d", est.Merged, limit)
	}
	want := float64(50 * 364) // today is empty
	if rel := (float64(est.Value) - want) / want; rel > 4*est.StdError || rel < -4*est.StdError {
		t.Fatalf("estimate %d for %v (std error %.4f)", est.Value, want, est.StdError)
	}
	lo, hi := est.Bounds(1.96)
	if lo > est.Value || hi < est.Value || lo == hi {
		t.Fatalf("bounds %d..%d around %d", lo, hi, est.Value)
	}
	t.Logf("last 365 days: %d (true %v), %d sketches merged, %d stored reads", est.Value, want, est.Merged, st.reads)
	for _, n := range []int{0, 401} {
		if _, err := v.Uniques(st, n, now); !errors.Is(err, ErrInvalid) {
			t.Errorf("n=%d: %v", n, err)
		}
	}
}

func TestSparkline(t *testing.T) {
	for _, tc := range []struct {
		in   []int64
		want string
	}{
		{nil, ""},
		{[]int64{0, 0, 0}, "▁▁▁"},
		{[]int64{0, 7}, "▁█"},
		{[]int64{1, 2, 3, 4, 5, 6, 7, 8}, "▁▂▃▄▅▆▇█"},
		{[]int64{-5, 0, 5}, "▁▅█"},
	} {
		if got := Sparkline(tc.in); got != tc.want {
			t.Errorf("Sparkline(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
	vals := make([]int64, 43200)
	for i := range vals {
		vals[i] = int64(i % 1440)
	}
	ds := Downsample(vals, 80)
	if len(ds) > 80 || len(ds) < 70 {
		t.Fatalf("downsampled to %d", len(ds))
	}
	var a, b int64
	for _, v := range vals {
		a += v
	}
	for _, v := range ds {
		b += v
	}
	if a != b || strings.Count(Sparkline(ds), "") != len(ds)+1 {
		t.Fatalf("downsample lost counts: %d != %d", a, b)
	}
}
