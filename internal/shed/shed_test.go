package shed

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestAcquireSheds(t *testing.T) {
	l := New(Config{MaxInflight: 2, MaxQueue: 1, MaxWait: 50 * time.Millisecond})
	var shedBy []string
	l.OnShed = func(fe string) { shedBy = append(shedBy, fe) }
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if err := l.Acquire(ctx, "http"); err != nil {
			t.Fatalf("slot %d: %v", i, err)
		}
	}
	// One waits in the queue and is admitted when a slot frees.
	admitted := make(chan error, 1)
	go func() { admitted <- l.Acquire(ctx, "http") }()
	for l.queued.Load() != 1 {
		time.Sleep(time.Millisecond)
	}
	// The queue is full: the next is shed at once.
	start := time.Now()
	if err := l.Acquire(ctx, "resp"); !errors.Is(err, ErrOverloaded) || time.Since(start) > 10*time.Millisecond {
		t.Fatalf("over the queue: %v after %v", err, time.Since(start))
	}
	l.Release()
	if err := <-admitted; err != nil {
		t.Fatalf("queued request: %v", err)
	}
	// All slots busy again, nothing releases: the queued one waits MaxWait.
	start = time.Now()
	if err := l.Acquire(ctx, "grpc"); !errors.Is(err, ErrOverloaded) || time.Since(start) < 40*time.Millisecond {
		t.Fatalf("queue timeout: %v after %v", err, time.Since(start))
	}
	if l.Shed() != 2 || len(shedBy) != 2 || shedBy[0] != "resp" || shedBy[1] != "grpc" {
		t.Fatalf("shed %d %v", l.Shed(), shedBy)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := l.Acquire(cctx, "http"); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: %v", err)
	}
}

func TestDisabledAdmitsAll(t *testing.T) {
	l := New(Config{Disabled: true, MaxInflight: 1})
	for i := 0; i < 100; i++ {
		if err := l.Acquire(context.Background(), "http"); err != nil {
			t.Fatal(err)
		}
	}
}

// TestInflightBound: whatever the arrivals, no more than MaxInflight hold
// a slot at once, and every admitted request gets its slot back.
func TestInflightBound(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		most := rapid.IntRange(1, 8).Draw(t, "max")
		n := rapid.IntRange(1, 64).Draw(t, "n")
		l := New(Config{MaxInflight: most, MaxQueue: rapid.IntRange(-1, 8).Draw(t, "queue"), MaxWait: time.Millisecond})
		var mu sync.Mutex
		cur, peak := 0, 0
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if l.Acquire(context.Background(), "http") != nil {
					return
				}
				mu.Lock()
				cur++
				peak = max(peak, cur)
				mu.Unlock()
				time.Sleep(100 * time.Microsecond)
				mu.Lock()
				cur--
				mu.Unlock()
				l.Release()
			}()
		}
		wg.Wait()
		if peak > most || l.Inflight() != 0 {
			t.Fatalf("peak %d with MaxInflight %d, %d slots still held", peak, most, l.Inflight())
		}
	})
}

// BenchmarkAcquireRelease is the cost the limiter adds to every admitted
// request (the RESP front end pays it per command).
func BenchmarkAcquireRelease(b *testing.B) {
	l := New(Config{})
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := l.Acquire(ctx, "bench"); err != nil {
				b.Fatal(err)
			}
			l.Release()
		}
	})
}
