package shed

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"
)

var (
	clientA = netip.MustParseAddr("10.0.0.1")
	clientB = netip.MustParseAddr("10.0.0.2")
)

// waitQueued polls until n requests wait in f.
func waitQueued(t *testing.T, f *Fair, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		f.mu.Lock()
		q := f.queued
		f.mu.Unlock()
		if q == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d queued, want %d", q, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestFairRoundRobin: with the only slot busy, client A queues three
// requests and then B one; B is served second, before A's later ones.
func TestFairRoundRobin(t *testing.T) {
	f := NewFair(FairConfig{MaxLimit: 1, MinLimit: 1, MaxClientQueue: 8, MaxWait: time.Minute})
	ok, at := f.Acquire(clientA, 0)
	if !ok {
		t.Fatal("first request shed")
	}
	order := make(chan string, 4)
	var wg sync.WaitGroup
	enqueue := func(name string, c netip.Addr, queuedBefore int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, at := f.Acquire(c, 0)
			if !ok {
				order <- name + " shed"
				return
			}
			order <- name
			f.Release(at)
		}()
		waitQueued(t, f, queuedBefore+1)
	}
	enqueue("a1", clientA, 0)
	enqueue("a2", clientA, 1)
	enqueue("a3", clientA, 2)
	enqueue("b1", clientB, 3)
	f.Release(at)
	wg.Wait()
	close(order)
	var got []string
	for s := range order {
		got = append(got, s)
	}
	want := []string{"a1", "b1", "a2", "a3"}
	for i := range want {
		if i >= len(got) || got[i] != want[i] {
			t.Fatalf("served %v, want %v", got, want)
		}
	}
	if f.Running() != 0 {
		t.Fatalf("%d slots still held", f.Running())
	}
}

// TestFairSheds: a full client queue sheds that client's next request at
// once but not another client's; a request that already waited MaxWait
// is shed without queueing; a queued one is shed after MaxWait.
func TestFairSheds(t *testing.T) {
	f := NewFair(FairConfig{MaxLimit: 1, MinLimit: 1, MaxClientQueue: 1, MaxWait: 300 * time.Millisecond})
	var shed atomic.Int64
	f.OnShed = func() { shed.Add(1) }
	ok, at := f.Acquire(clientA, 0)
	if !ok {
		t.Fatal("first request shed")
	}
	res := make(chan bool, 2)
	go func() { ok, _ := f.Acquire(clientA, 0); res <- ok }()
	waitQueued(t, f, 1)
	start := time.Now()
	if ok, _ := f.Acquire(clientA, 0); ok || time.Since(start) > 100*time.Millisecond {
		t.Fatalf("over A's queue: admitted %v after %v", ok, time.Since(start))
	}
	if ok, _ := f.Acquire(clientB, time.Second); ok {
		t.Fatal("a request that already waited MaxWait was admitted")
	}
	go func() { ok, _ := f.Acquire(clientB, 0); res <- ok }()
	// Nothing is released: both queued requests time out.
	if <-res || <-res {
		t.Fatal("a queued request was admitted without a free slot")
	}
	if time.Since(start) < 250*time.Millisecond {
		t.Fatalf("queued requests shed after %v, before MaxWait", time.Since(start))
	}
	if shed.Load() != 4 || f.Shed() != 4 {
		t.Fatalf("shed %d (%d), want 4", shed.Load(), f.Shed())
	}
	f.Release(at)
	if f.Running() != 0 || len(f.clients) != 0 || len(f.ring) != 0 {
		t.Fatalf("left running %d, clients %d, ring %d", f.Running(), len(f.clients), len(f.ring))
	}
}

// TestFairBounds: whatever the arrivals, releases and timeouts, no more
// than the limit hold a slot, every call returns, and nothing is left
// held or queued.
func TestFairBounds(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		maxLimit := rapid.IntRange(1, 6).Draw(t, "max")
		f := NewFair(FairConfig{MaxLimit: maxLimit, MinLimit: 1, MaxQueue: rapid.IntRange(1, 8).Draw(t, "queue"),
			MaxClientQueue: rapid.IntRange(1, 4).Draw(t, "clientQueue"), MaxWait: time.Millisecond, Window: time.Microsecond})
		n := rapid.IntRange(1, 48).Draw(t, "n")
		clients := rapid.SliceOfN(rapid.IntRange(0, 3), n, n).Draw(t, "clients")
		var mu sync.Mutex
		cur, peak := 0, 0
		var wg sync.WaitGroup
		for _, c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, at := f.Acquire(netip.AddrFrom4([4]byte{10, 0, 0, byte(c)}), 0)
				if !ok {
					return
				}
				mu.Lock()
				cur++
				peak = max(peak, cur)
				mu.Unlock()
				time.Sleep(50 * time.Microsecond)
				mu.Lock()
				cur--
				mu.Unlock()
				f.Release(at)
			}()
		}
		wg.Wait()
		if peak > maxLimit || f.Running() != 0 || f.queued != 0 || len(f.clients) != 0 || len(f.ring) != 0 {
			t.Fatalf("peak %d (max %d), running %d, queued %d, clients %d, ring %d", peak, maxLimit, f.Running(), f.queued, len(f.clients), len(f.ring))
		}
		if l := f.Limit(); l < 1 || l > maxLimit {
			t.Fatalf("limit %d outside [1, %d]", l, maxLimit)
		}
	})
}

// TestFairLimitAdapts: the limit grows while requests wait and latency
// stays at its baseline, and shrinks when latency rises well above it.
func TestFairLimitAdapts(t *testing.T) {
	f := NewFair(FairConfig{MaxLimit: 64, MinLimit: 2, Window: time.Nanosecond})
	base := time.Now()
	feed := func(rtt time.Duration, windows int) {
		for w := 0; w < windows; w++ {
			f.mu.Lock()
			f.winWait = true
			for i := 0; i < 10; i++ {
				f.sample(base, rtt)
				base = base.Add(time.Millisecond)
			}
			f.mu.Unlock()
		}
	}
	feed(time.Millisecond, 40)
	grown := f.Limit()
	if grown < 16 {
		t.Fatalf("limit %d after 40 windows at the baseline latency, want it grown", grown)
	}
	feed(10*time.Millisecond, 40)
	if l := f.Limit(); l >= grown/2 {
		t.Fatalf("limit %d after 40 windows at 10x the baseline latency (was %d), want it shrunk", l, grown)
	}
}

// TestPacer: a client gets Rate/10 refusals without a pause, then pauses
// that grow with its debt up to MaxPause; another client is not paused.
func TestPacer(t *testing.T) {
	p := NewPacer(100, 500*time.Millisecond)
	for i := 0; i < 10; i++ {
		if d := p.Pause(clientA); d != 0 {
			t.Fatalf("refusal %d within the burst paused %v", i, d)
		}
	}
	var last time.Duration
	for i := 0; i < 100; i++ {
		d := p.Pause(clientA)
		if d <= 0 || d > 500*time.Millisecond || d+5*time.Millisecond < last {
			t.Fatalf("refusal %d beyond the burst: pause %v after %v", i, d, last)
		}
		last = d
	}
	if last != 500*time.Millisecond {
		t.Fatalf("pause %v after a long flood, want MaxPause", last)
	}
	if d := p.Pause(clientB); d != 0 {
		t.Fatalf("another client paused %v", d)
	}
	if d := (*Pacer)(nil).Pause(clientA); d != 0 {
		t.Fatalf("nil pacer paused %v", d)
	}
	if NewPacer(0, time.Second) != nil {
		t.Fatal("rate 0 must turn pacing off")
	}
}

// BenchmarkFairAcquireRelease is what admission adds to a request that
// is not shed.
func BenchmarkFairAcquireRelease(b *testing.B) {
	f := NewFair(FairConfig{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			ok, at := f.Acquire(clientA, 0)
			if !ok {
				b.Fatal("shed")
			}
			f.Release(at)
		}
	})
}
