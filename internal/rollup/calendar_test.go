package rollup

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

// TestCalendar checks bucket, chunk and start arithmetic against the time
// package for times around the epoch, leap days and month ends.
func TestCalendar(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	times := []time.Time{
		time.Unix(0, 0).UTC(), time.Unix(-1, 0).UTC(),
		time.Date(2024, 2, 29, 23, 59, 59, 999999999, time.UTC),
		time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1969, 12, 31, 23, 0, 0, 0, time.UTC),
		time.Date(2100, 2, 28, 12, 0, 0, 0, time.UTC),
	}
	for range 2000 {
		times = append(times, time.Unix(0, minTime+int64(rng.Uint64N(uint64(maxTime)-uint64(minTime)))).UTC())
	}
	for _, tm := range times {
		want := map[Granularity]time.Time{
			Minute: tm.Truncate(time.Minute),
			Hour:   tm.Truncate(time.Hour),
			Day:    time.Date(tm.Year(), tm.Month(), tm.Day(), 0, 0, 0, 0, time.UTC),
			Month:  time.Date(tm.Year(), tm.Month(), 1, 0, 0, 0, 0, time.UTC),
		}
		// time.Truncate works on absolute time, which is aligned with the
		// epoch for minutes and hours.
		for g := Minute; g < numGranularities; g++ {
			b := g.Bucket(tm.UnixNano())
			if got := g.Start(b); got != want[g].UnixNano() {
				t.Fatalf("%v %s: start %v, want %v", tm, g, time.Unix(0, got).UTC(), want[g])
			}
			if g.Start(b+1) <= tm.UnixNano() || g.Bucket(g.Start(b+1)) != b+1 || g.Bucket(g.Start(b+1)-1) != b {
				t.Fatalf("%v %s: bucket %d does not end where %d starts", tm, g, b, b+1)
			}
			c, off := g.chunkOf(b)
			if off < 0 || off >= g.chunkLen(c) || g.chunkFirst(c)+int64(off) != b {
				t.Fatalf("%v %s: bucket %d in chunk %d at %d (first %d, len %d)", tm, g, b, c, off, g.chunkFirst(c), g.chunkLen(c))
			}
			if g.chunkFirst(c+1) != g.chunkFirst(c)+int64(g.chunkLen(c)) {
				t.Fatalf("%v %s: chunk %d does not end where %d starts", tm, g, c, c+1)
			}
			if !g.validChunk(c) || !g.validBucket(b) {
				t.Fatalf("%v %s: valid time, invalid chunk or bucket", tm, g)
			}
		}
	}
	if n := Day.chunkLen(Month.Bucket(ns(time.Date(2024, 2, 10, 0, 0, 0, 0, time.UTC)))); n != 29 {
		t.Fatalf("February 2024 has %d days", n)
	}
}

func TestSpecValidate(t *testing.T) {
	const day = 24 * time.Hour
	def := DefaultSpec()
	if err := def.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		spec Spec
		ok   bool
	}{
		{"zero", Spec{}, true},
		{"default", def, true},
		{"negative", Spec{Minute: -time.Hour}, false},
		{"below a bucket", Spec{Hour: time.Minute}, false},
		{"month below 31 days", Spec{Month: 30 * day}, false},
		{"too long", Spec{Day: 200 * 365 * day}, false},
		{"hours above a week", Spec{UniqueHours: 200 * time.Hour}, false},
		{"days above 400", Spec{UniqueDays: 401 * day}, false},
		{"precision 9", Spec{Precision: 9}, false},
		{"precision 16", Spec{Precision: 16}, true},
		{"precision 17", Spec{Precision: 17}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.spec.Validate()
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
				t.Fatalf("Validate = %v", err)
			}
			if !tc.ok {
				return
			}
			b, err := tc.spec.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			var back Spec
			if err := back.UnmarshalBinary(b); err != nil || back != tc.spec {
				t.Fatalf("round trip: %+v %v", back, err)
			}
			for i := range b {
				if err := new(Spec).UnmarshalBinary(b[:i]); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("truncated to %d: %v", i, err)
				}
			}
		})
	}
}

func TestRetentionFormat(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		out  string
	}{
		{"0", 0, "0"}, {"30d", 30 * 24 * time.Hour, "30d"}, {"48h", 48 * time.Hour, "2d"},
		{"90m", 90 * time.Minute, "1h30m0s"}, {"0d", 0, "0"},
	} {
		d, err := ParseRetention(tc.in)
		if err != nil || d != tc.want || FormatRetention(d) != tc.out {
			t.Errorf("%q: %v %v -> %q", tc.in, d, err, FormatRetention(d))
		}
	}
	for _, bad := range []string{"", "d", "-1d", "1.5d", "abc", "-5m", "99999999d"} {
		if _, err := ParseRetention(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	for _, s := range []string{"minute", "hour", "day", "month"} {
		if g, err := ParseGranularity(s); err != nil || g.String() != s {
			t.Errorf("%q: %v %v", s, g, err)
		}
	}
	if _, err := ParseGranularity("week"); !errors.Is(err, ErrInvalid) {
		t.Error("week parsed")
	}
}
