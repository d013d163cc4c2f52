package rollup

import (
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/counterd/counterd/internal/counter"
)

// TestSeriesModel drives a count State with random increments, time jumps
// (within a minute to over a month), flushes and restarts (head round
// trips), and checks every query against a model: a map from minute to
// its sum. Retentions are long, so every granularity answers from itself.
func TestSeriesModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		spec := longSpec()
		st := newMemStore()
		s := NewState(spec, false)
		now := ns(t0) + rapid.Int64Range(0, int64(time.Hour)).Draw(rt, "start")
		model := map[int64]int64{} // minute bucket -> sum
		gen := uint64(0)
		steps := rapid.IntRange(1, 60).Draw(rt, "steps")
		for range steps {
			switch rapid.IntRange(0, 9).Draw(rt, "op") {
			case 0, 1, 2, 3:
				d := rapid.Int64Range(-5, 100).Draw(rt, "delta")
				s.Add(now, d)
				model[Minute.Bucket(now)] += d
			case 4:
				now += rapid.Int64Range(0, int64(90*time.Second)).Draw(rt, "small")
			case 5:
				now += rapid.Int64Range(0, int64(40*24*time.Hour)).Draw(rt, "large")
			case 6:
				gen++
				st.flush(rt, s, gen)
			case 7:
				gen++
				head := st.flush(rt, s, gen)
				var err error
				if s, err = UnmarshalHead(spec, false, head); err != nil || s == nil {
					rt.Fatalf("restart: %v", err)
				}
			case 8, 9:
				checkSeries(rt, s, st, model, now)
			}
		}
		checkSeries(rt, s, st, model, now)
	})
}

func checkSeries(t *rapid.T, s *State, st Store, model map[int64]int64, now int64) {
	g := Granularity(rapid.IntRange(0, 3).Draw(t, "g"))
	span := rapid.Int64Range(1, int64(70*24*time.Hour)).Draw(t, "span")
	from := now - rapid.Int64Range(0, int64(80*24*time.Hour)).Draw(t, "back")
	to := from + span
	if g == Minute && to-from > (MaxSeriesBuckets-1)*nsMinute {
		to = from + (MaxSeriesBuckets-1)*nsMinute
	}
	v := s.CountsView()
	got, err := v.Series(st, g, from, to, now)
	if err != nil {
		t.Fatalf("Series(%s): %v", g, err)
	}
	if got.Source != g {
		t.Fatalf("source %s for %s", got.Source, g)
	}
	want := make([]int64, len(got.Values))
	var total int64
	for m, c := range model {
		st := Minute.Start(m)
		if st < got.From.UnixNano() || st >= got.To.UnixNano() {
			continue
		}
		want[g.Bucket(st)-g.Bucket(got.From.UnixNano())] += c
		total += c
	}
	for i := range want {
		if want[i] != got.Values[i] {
			t.Fatalf("%s bucket %d (%v): %d, want %d", g, i, got.Start(i), got.Values[i], want[i])
		}
	}
	if got.Total != total {
		t.Fatalf("total %d, want %d", got.Total, total)
	}
	if !got.From.Equal(time.Unix(0, g.Start(g.Bucket(from))).UTC()) || got.Start(len(want)-1).After(time.Unix(0, to)) {
		t.Fatalf("range [%v, %v) for [%v, %v)", got.From, got.To, time.Unix(0, from).UTC(), time.Unix(0, to).UTC())
	}
}

// TestSeriesSourceAndRetention checks which granularity answers and that
// buckets past their retention read as zero, also after a purge.
func TestSeriesSourceAndRetention(t *testing.T) {
	const day = 24 * time.Hour
	spec := &Spec{Minute: 2 * time.Hour, Hour: 3 * day, Day: 60 * day}
	st := newMemStore()
	s := NewState(spec, false)
	now := ns(t0)
	// One hit per minute for 5 days.
	for range 5 * 24 * 60 {
		s.Add(now, 1)
		now += nsMinute
	}
	st.flush(t, s, 1)
	now -= nsMinute // the last hit's minute is the current one
	for _, tc := range []struct {
		name     string
		g        Granularity
		from, to int64
		src      Granularity
		total    int64
	}{
		{"last hour of minutes", Minute, now - nsHour + nsMinute, now + nsMinute, Minute, 60},
		// Minutes that ended before the 2h retention read as zero: 121
		// of the 180 are left (the oldest one ends inside the retention).
		{"three hours of minutes", Minute, now - 3*nsHour + nsMinute, now + nsMinute, Minute, 121},
		{"hours from minutes? no: hours", Hour, now - 2*nsDay, now, Hour, 2*24*60 + 1 - 60 + int64(time.Unix(0, now).Minute()) + 1 - 1},
		{"days", Day, ns(t0), now + 1, Day, 5 * 24 * 60},
		{"months from days", Month, ns(t0), now + 1, Day, 5 * 24 * 60},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.CountsView().Series(st, tc.g, tc.from, tc.to, now)
			if err != nil {
				t.Fatal(err)
			}
			if got.Source != tc.src {
				t.Errorf("source %s, want %s", got.Source, tc.src)
			}
			if tc.g != Hour && got.Total != tc.total {
				t.Errorf("total %d, want %d", got.Total, tc.total)
			}
		})
	}
	// Hours over 2 days: every hour full except the current one.
	got, err := s.CountsView().Series(st, Hour, now-2*nsDay+1, now+1, now)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range got.Values {
		want := int64(60)
		if i == len(got.Values)-1 {
			want = int64(time.Unix(0, now).Minute()) + 1
		}
		if v != want {
			t.Fatalf("hour %v: %d, want %d", got.Start(i), v, want)
		}
	}
	// A purge at now changes nothing visible.
	before, _ := s.CountsView().Series(st, Minute, now-5*nsHour, now+1, now)
	st.purge(spec.Horizons(now))
	after, _ := s.CountsView().Series(st, Minute, now-5*nsHour, now+1, now)
	if before.Total != after.Total || before.Total != 121 {
		t.Fatalf("purge changed the visible minutes: %d -> %d", before.Total, after.Total)
	}
	if len(st.chunks[Minute]) > 3 {
		t.Fatalf("%d minute chunks left after a purge with 2h retention", len(st.chunks[Minute]))
	}
	// A granularity above every kept one cannot answer.
	if _, err := NewState(&Spec{Month: 400 * day}, false).CountsView().Series(st, Day, now-nsDay, now, now); !errors.Is(err, ErrInvalid) {
		t.Fatalf("day series with only months kept: %v", err)
	}
	for _, r := range [][2]int64{{now, now}, {now, now - 1}, {minTime - 1, now}, {now - 200000*nsMinute, now}} {
		if _, err := s.CountsView().Series(st, Minute, r[0], r[1], now); !errors.Is(err, ErrInvalid) {
			t.Errorf("range %v: %v", r, err)
		}
	}
}

func TestStateEdges(t *testing.T) {
	spec := longSpec()
	st := newMemStore()
	s := NewState(spec, false)
	now := ns(t0)
	s.Add(now, math.MaxInt64)
	s.Add(now, 1) // saturates
	s.Add(now-int64(48*time.Hour), 5)
	got, err := s.CountsView().Series(st, Minute, now, now+nsMinute, now)
	if err != nil || got.Values[0] != math.MaxInt64 {
		t.Fatalf("saturation: %v %v", got, err)
	}
	// The clock going back: a time in the open chunk counts in its own
	// bucket, an older one in the newest bucket.
	s2 := NewState(spec, false)
	s2.Add(now, 1)
	s2.Add(now-int64(48*time.Hour), 5)
	if got, _ := s2.CountsView().Series(st, Minute, now, now+1, now); got.Total != 6 {
		t.Fatalf("clock back, minutes: %d", got.Total)
	}
	if got, _ := s2.CountsView().Series(st, Day, now-3*nsDay, now+1, now); got.Total != 6 || got.Values[1] != 5 {
		t.Fatalf("clock back, days: %v", got.Values)
	}
	// Total overflow is an error.
	s3 := NewState(spec, false)
	s3.Add(now, math.MaxInt64)
	s3.Add(now+nsMinute, math.MaxInt64)
	if _, err := s3.CountsView().Series(st, Minute, now, now+2*nsMinute, now+nsMinute); !errors.Is(err, counter.ErrOverflow) {
		t.Fatalf("total overflow: %v", err)
	}
	// Add allocates nothing within a bucket.
	if a := testing.AllocsPerRun(1000, func() { s2.Add(now, 1) }); a != 0 {
		t.Fatalf("Add allocates %v times", a)
	}
	// Spec changes.
	if s2.SetSpec(&Spec{UniqueDays: 24 * time.Hour}) {
		t.Fatal("a count state survived a spec without count buckets")
	}
	if NewState(&Spec{Minute: time.Hour}, true) != nil || NewState(&Spec{UniqueDays: 48 * time.Hour}, false) != nil {
		t.Fatal("state for a spec that keeps nothing of its sort")
	}
	s4 := NewState(&Spec{Minute: time.Hour, Hour: 48 * time.Hour}, false)
	s4.Add(now, 3)
	if !s4.SetSpec(&Spec{Hour: 48 * time.Hour}) || s4.counts[Minute] != nil || s4.counts[Hour].vals[22] != 3 {
		t.Fatal("SetSpec did not keep the hours and drop the minutes")
	}
	// noStore hides stored chunks.
	st2 := newMemStore()
	s5 := NewState(spec, false)
	s5.Add(now, 7)
	s5.Add(now+2*nsHour, 1) // closes the chunks of minutes
	st2.flush(t, s5, 1)
	s6 := NewState(spec, false)
	s6.SetNoStore(true)
	s6.Add(now+2*nsHour, 1)
	if got, _ := s6.CountsView().Series(st2, Minute, now, now+3*nsHour, now+2*nsHour); got.Total != 1 {
		t.Fatalf("noStore read stored data: %d", got.Total)
	}
}

// TestCommitted checks that closed items stay until their flush commits,
// and are written again when a flush fails.
func TestCommitted(t *testing.T) {
	s := NewState(longSpec(), false)
	now := ns(t0) - 10*nsHour // no day boundary in the next hours
	s.Add(now, 1)
	s.Add(now+nsHour, 1) // closes the minute chunk
	if s.Closed() != 1 {
		t.Fatalf("closed %d", s.Closed())
	}
	f1, _ := s.TakeFlush(1) // fails: not committed
	s.Add(now+2*nsHour, 1)  // closes another
	f2, _ := s.TakeFlush(2)
	if len(f1.Chunks) != 1 || len(f2.Chunks) != 2 {
		t.Fatalf("chunks per flush %d, %d", len(f1.Chunks), len(f2.Chunks))
	}
	s.Add(now+3*nsHour, 1)
	s.Committed(2)
	if s.Closed() != 1 {
		t.Fatalf("after commit %d closed, want the one closed since", s.Closed())
	}
}

func TestHeadCodec(t *testing.T) {
	spec := DefaultSpec()
	s := NewState(&spec, false)
	now := ns(t0)
	for i := range 100 {
		s.Add(now+int64(i)*nsMinute*7, int64(i-50))
	}
	head, err := s.MarshalHead()
	if err != nil {
		t.Fatal(err)
	}
	back, err := UnmarshalHead(&spec, false, head)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := back.MarshalHead()
	if string(again) != string(head) {
		t.Fatal("head does not round-trip")
	}
	k := NewState(&spec, true)
	for i := range 3000 {
		k.AddHash(now+int64(i)*nsMinute, mix(uint64(i)))
	}
	head, _ = k.MarshalHead()
	kb, err := UnmarshalHead(&spec, true, head)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := kb.MarshalHead(); string(again) != string(head) {
		t.Fatal("sketch head does not round-trip")
	}
	if x, err := UnmarshalHead(&Spec{Minute: time.Hour}, true, head); err != nil || x != nil {
		t.Fatalf("head under a spec that keeps nothing: %v %v", x, err)
	}
	for i := range head {
		if _, err := UnmarshalHead(&spec, true, head[:i]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated head at %d: %v", i, err)
		}
	}
}

func FuzzUnmarshalHead(f *testing.F) {
	spec := DefaultSpec()
	s := NewState(&spec, false)
	s.Add(ns(t0), 5)
	h, _ := s.MarshalHead()
	f.Add(h, false)
	k := NewState(&spec, true)
	k.AddHash(ns(t0), 1)
	k.AddHash(ns(t0)+nsDay, 2)
	h, _ = k.MarshalHead()
	f.Add(h, true)
	f.Add(MarshalChunk([]int64{1, -2, 3}), false)
	f.Fuzz(func(t *testing.T, data []byte, sketches bool) {
		if st, err := UnmarshalHead(&spec, sketches, data); err == nil && st != nil {
			// A decoded state works and encodes.
			st.Add(ns(t0), 1)
			st.AddHash(ns(t0), 7)
			if _, err := st.MarshalHead(); err != nil {
				t.Fatal(err)
			}
		}
		for g := Minute; g < numGranularities; g++ {
			if vals, err := DecodeChunk(g, 600000, data, nil); err == nil && len(vals) > 60 {
				t.Fatalf("%d values in a chunk", len(vals))
			}
		}
	})
}

// TestStateUndo: a count State and a sketch State take random adds at
// event times (in the open bucket, late ones, ones that close chunks and
// units) and flushes; then BeginUndo, more adds and Rollback put the State
// back as it was (what a clone taken before shows), and the same adds
// afterwards leave it as they leave that clone; with End the adds stay.
func TestStateUndo(t *testing.T) {
	var u Undo
	rapid.Check(t, func(rt *rapid.T) {
		sketches := rapid.Bool().Draw(rt, "sketches")
		spec := &Spec{Minute: 2 * time.Hour, Hour: 30 * 24 * time.Hour, UniqueHours: 48 * time.Hour, UniqueDays: 30 * 24 * time.Hour, Precision: 10}
		s := NewState(spec, sketches)
		st := newMemStore()
		now := ns(t0)
		gen := uint64(0)
		type step struct {
			t, delta int64
			xs       []uint64
			flush    bool
		}
		draw := func(label string) step {
			now += rapid.Int64Range(0, int64(5*time.Minute)).Draw(rt, label+"-advance")
			return step{
				t:     now - rapid.SampledFrom([]int64{0, 0, int64(time.Minute), int64(3 * time.Hour)}).Draw(rt, label+"-age-max")*rapid.Int64Range(0, 1000).Draw(rt, label+"-age")/1000,
				delta: rapid.Int64Range(-3, 10).Draw(rt, label+"-delta"),
				xs:    rapid.SliceOfN(rapid.Uint64(), 1, 40).Draw(rt, label+"-hashes"),
				flush: rapid.IntRange(0, 4).Draw(rt, label+"-flush") == 0,
			}
		}
		apply := func(s *State, x step, flushes bool) {
			if x.flush && flushes {
				gen++
				st.flush(rt, s, gen)
				return
			}
			if sketches {
				s.AddHashesAt(x.t, now, x.xs)
			} else {
				s.AddAt(x.t, now, x.delta)
			}
		}
		for range rapid.IntRange(0, 30).Draw(rt, "before") {
			apply(s, draw("before"), true)
		}
		want := s.Clone()
		s.BeginUndo(&u)
		nowBefore := now
		for range rapid.IntRange(1, 20).Draw(rt, "during") {
			apply(s, draw("during"), false) // (a batch holds the entry's lock: no flush)
		}
		if rapid.Bool().Draw(rt, "keep") {
			during := s.Clone()
			u.End()
			if !reflect.DeepEqual(s.Clone(), during) {
				rt.Fatal("End changed the state")
			}
			return
		}
		u.Rollback()
		if got := s.Clone(); !reflect.DeepEqual(got, want) {
			rt.Fatalf("after Rollback:\n%+v\nwant %+v", got, want)
		}
		now = nowBefore
		for range rapid.IntRange(1, 20).Draw(rt, "after") {
			x := draw("after")
			apply(s, x, false)
			apply(want, x, false)
		}
		if got := s.Clone(); !reflect.DeepEqual(got, want.Clone()) {
			rt.Fatalf("adds after Rollback:\n%+v\nwant %+v", got, want)
		}
	})
}
