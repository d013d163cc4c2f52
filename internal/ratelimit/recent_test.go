package ratelimit

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestRecorderRingProperty: after any number of checks with any
// capacity, Recent returns the newest min(checks, capacity, max) in
// descending sequence, each with the key it was checked with.
func TestRecorderRingProperty(t *testing.T) {
	l := newLimiter(t, newFakeClock().Now)
	lim := Limit{Algorithm: FixedWindow, Limit: 1 << 40, Period: time.Second}
	rapid.Check(t, func(rt *rapid.T) {
		capacity := rapid.IntRange(1, 20).Draw(rt, "capacity")
		checks := rapid.IntRange(0, 60).Draw(rt, "checks")
		max := rapid.IntRange(0, 25).Draw(rt, "max")
		rec := NewRecorder(l, capacity)
		for i := range checks {
			if _, err := rec.CheckMultiContext(t.Context(), []Hit{{Key: "k" + strconv.Itoa(i+1), Limit: lim, Cost: 1}}, nil); err != nil {
				rt.Fatal(err)
			}
		}
		got, total := rec.Recent(max)
		want := min(checks, capacity)
		if max > 0 {
			want = min(want, max)
		}
		if total != uint64(checks) || len(got) != want {
			rt.Fatalf("total %d, %d decisions; want %d, %d", total, len(got), checks, want)
		}
		for i, d := range got {
			seq := uint64(checks - i)
			if d.Seq != seq || d.Key != "k"+strconv.FormatUint(seq, 10) {
				rt.Fatalf("decision %d: seq %d key %q, want seq %d", i, d.Seq, d.Key, seq)
			}
		}
	})
}

// TestRecorderConcurrent: concurrent checks and reads (run with -race)
// leave a ring whose entries are distinct and newest first.
func TestRecorderConcurrent(t *testing.T) {
	l := newLimiter(t, nil)
	rec := NewRecorder(l, 16)
	lim := Limit{Algorithm: TokenBucket, Limit: 1000, Period: time.Second}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				if _, err := rec.CheckMultiContext(t.Context(), []Hit{{Key: "g" + strconv.Itoa(g), Limit: lim, Cost: 1}}, nil); err != nil {
					t.Error(err)
					return
				}
				if i%20 == 0 {
					rec.Recent(0)
				}
			}
		}()
	}
	wg.Wait()
	got, total := rec.Recent(0)
	if total != 800 || len(got) != 16 {
		t.Fatalf("total %d, %d decisions", total, len(got))
	}
	for i := 1; i < len(got); i++ {
		if got[i].Seq >= got[i-1].Seq {
			t.Fatalf("not newest first: %d after %d", got[i].Seq, got[i-1].Seq)
		}
	}
}

// TestRecorderCopiesKeys: RL.CHECK's key aliases the connection's read
// buffer, which the next command overwrites; the ring keeps its own copy.
func TestRecorderCopiesKeys(t *testing.T) {
	rec := NewRecorder(newLimiter(t, newFakeClock().Now), 4)
	buf := []byte("user:alice")
	if _, err := rec.CheckArgs([][]byte{buf, []byte("10"), []byte("1000")}); err != nil {
		t.Fatal(err)
	}
	copy(buf, "XXXXXXXXXX")
	got, _ := rec.Recent(0)
	if len(got) != 1 || got[0].Key != "user:alice" {
		t.Fatalf("after the buffer was reused: %+v", got)
	}
}

// BenchmarkRecorder is the cost of recording: the same parallel checks
// (64Ki keys, one sliding window) on the Limiter alone and through a
// Recorder of DefaultRecentDecisions; compare the two ns/op of one run.
func BenchmarkRecorder(b *testing.B) {
	keys := benchKeys(1 << 16)
	lim := Limit{Algorithm: SlidingWindow, Limit: 1 << 40, Period: time.Minute}
	l := newLimiter(b, nil)
	for _, tc := range []struct {
		name string
		c    Checker
	}{{"limiter", l}, {"recorder", NewRecorder(l, DefaultRecentDecisions)}} {
		b.Run(tc.name, func(b *testing.B) {
			var seq atomic.Uint64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := seq.Add(1 << 20)
				hits := []Hit{{Limit: lim, Cost: 1}}
				for pb.Next() {
					hits[0].Key = keys[i&(1<<16-1)]
					i++
					if _, err := tc.c.CheckMultiContext(context.Background(), hits, nil); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// TestRecorderNoAlloc: once its slots are warm, recording allocates
// nothing, on the RESP path as on the others.
func TestRecorderNoAlloc(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	rec := NewRecorder(newLimiter(t, nil), 4)
	args := [][]byte{[]byte("user:00000001"), []byte("1000000000"), []byte("60000")}
	hits := []Hit{{Key: "user:2", Limit: Limit{Name: "n", Algorithm: TokenBucket, Limit: 1e9, Period: time.Second}, Cost: 1}}
	for range 8 { // warm every slot
		_, _ = rec.CheckArgs(args)
	}
	if n := testing.AllocsPerRun(200, func() {
		if _, err := rec.CheckArgs(args); err != nil {
			t.Fatal(err)
		}
		if _, err := rec.CheckArgsContext(t.Context(), args); err != nil {
			t.Fatal(err)
		}
		if _, err := rec.CheckMultiContext(context.Background(), hits, nil); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("%v allocations per check pair", n)
	}
}
