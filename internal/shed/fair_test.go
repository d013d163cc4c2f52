package shed

import (
	"context"
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
	var first Ticket
	if f.Acquire(&first, clientA, 0) != Admitted {
		t.Fatal("first request shed")
	}
	order := make(chan string, 4)
	var wg sync.WaitGroup
	enqueue := func(name string, c netip.Addr, queuedBefore int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var tk Ticket
			if f.Acquire(&tk, c, 0) != Admitted {
				order <- name + " shed"
				return
			}
			order <- name
			f.Release(&tk)
		}()
		waitQueued(t, f, queuedBefore+1)
	}
	enqueue("a1", clientA, 0)
	enqueue("a2", clientA, 1)
	enqueue("a3", clientA, 2)
	enqueue("b1", clientB, 3)
	f.Release(&first)
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
	var shed, shedClient atomic.Int64
	f.OnShed = func(v Verdict) {
		shed.Add(1)
		if v == ShedClient {
			shedClient.Add(1)
		}
	}
	var first Ticket
	if f.Acquire(&first, clientA, 0) != Admitted {
		t.Fatal("first request shed")
	}
	res := make(chan Verdict, 2)
	go func() { var tk Ticket; res <- f.Acquire(&tk, clientA, 0) }()
	waitQueued(t, f, 1)
	start := time.Now()
	var tk Ticket
	if v := f.Acquire(&tk, clientA, 0); v != ShedClient || time.Since(start) > 100*time.Millisecond {
		t.Fatalf("over A's queue: %v after %v, want shed as client", v, time.Since(start))
	}
	if v := f.Acquire(&tk, clientB, time.Second); v != ShedOverload {
		t.Fatalf("a request that already waited MaxWait while all slots were busy: %v, want shed as overload", v)
	}
	go func() { var tk Ticket; res <- f.Acquire(&tk, clientB, 0) }()
	// Nothing is released: both queued requests time out.
	if v1, v2 := <-res, <-res; v1 != ShedOverload || v2 != ShedOverload {
		t.Fatalf("queued requests without a free slot: %v %v, want shed as overload", v1, v2)
	}
	if time.Since(start) < 250*time.Millisecond {
		t.Fatalf("queued requests shed after %v, before MaxWait", time.Since(start))
	}
	if shed.Load() != 4 || f.Shed() != 4 || shedClient.Load() != 1 {
		t.Fatalf("shed %d (%d), %d as client, want 4 and 1", shed.Load(), f.Shed(), shedClient.Load())
	}
	f.Release(&first)
	// A free slot and nobody queued: admitted whatever it waited before.
	if v := f.Acquire(&tk, clientB, time.Hour); v != Admitted {
		t.Fatalf("a stale request finding a free slot: %v, want admitted", v)
	}
	f.Release(&tk)
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
				var tk Ticket
				if f.Acquire(&tk, netip.AddrFrom4([4]byte{10, 0, 0, byte(c)}), 0) != Admitted {
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
				f.Release(&tk)
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
			var tk Ticket
			if f.Acquire(&tk, clientA, 0) != Admitted {
				b.Fatal("shed")
			}
			f.Release(&tk)
		}
	})
}

// TestFairIOWaitFreesSlot: a request parked in IOWait gives its slot to
// the next request at once, resumes without waiting for one (over the
// limit if need be), and a parked request released meanwhile (its
// connection closed) resumes as a no-op.
func TestFairIOWaitFreesSlot(t *testing.T) {
	f := NewFair(FairConfig{MaxLimit: 1, MinLimit: 1, MaxWait: time.Minute})
	var a, b Ticket
	if f.Acquire(&a, clientA, 0) != Admitted {
		t.Fatal("first request shed")
	}
	ctx := WithTicket(context.Background(), &a)
	p := IOWait(ctx)
	if p == nil || f.Running() != 0 || f.Parked() != 1 || !a.Holding() {
		t.Fatalf("parked: %v, running %d, parked %d", p != nil, f.Running(), f.Parked())
	}
	if IOWait(ctx) != nil {
		t.Fatal("a parked request parked again")
	}
	done := make(chan Verdict, 1)
	go func() { done <- f.Acquire(&b, clientB, 0) }()
	select {
	case v := <-done:
		if v != Admitted {
			t.Fatalf("request while the only slot's holder waits on I/O: %v", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a request waited for the slot of a request parked on I/O")
	}
	p.Resume()
	if f.Running() != 2 || f.Parked() != 0 {
		t.Fatalf("resumed over the limit: running %d, parked %d, want 2 and 0", f.Running(), f.Parked())
	}
	var c Ticket
	go func() { done <- f.Acquire(&c, clientB, 0) }()
	waitQueued(t, f, 1)
	f.Release(&b) // still one running with a limit of one: c waits
	if f.Running() != 1 {
		t.Fatalf("running %d after a release over the limit, want 1", f.Running())
	}
	f.Release(&a)
	if v := <-done; v != Admitted {
		t.Fatalf("queued request: %v", v)
	}
	// Released while parked (its connection closed): Resume is a no-op.
	p = IOWait(WithTicket(context.Background(), &c))
	f.Release(&c)
	p.Resume()
	if f.Running() != 0 || f.Parked() != 0 || c.Holding() {
		t.Fatalf("left running %d, parked %d", f.Running(), f.Parked())
	}
	if IOWait(context.Background()) != nil || IOWait(WithTicket(context.Background(), &Ticket{})) != nil {
		t.Fatal("IOWait without an admitted ticket parked something")
	}
	(*Ticket)(nil).Resume()
}

// TestFairLimitIgnoresIOWaits: a workload whose windows alternate between
// cheap requests and requests that also wait 20 ms for an fsync shrinks
// the limit when the fsync wait holds the slot (what made sync writes
// look like overload), and leaves it alone when the wait is parked in
// IOWait; the same 20 ms spent running (CPU) still shrinks it.
func TestFairLimitIgnoresIOWaits(t *testing.T) {
	type kind int
	const (
		held   kind = iota // the fsync wait holds the slot
		parked             // the fsync wait is in IOWait
		cpu                // the 20 ms are spent running
	)
	run := func(k kind) int {
		clock := time.Unix(0, 0)
		f := NewFair(FairConfig{MaxLimit: 64, MinLimit: 2, Window: time.Nanosecond})
		f.now = func() time.Time { return clock }
		f.limit = 32
		for w := 0; w < 60; w++ {
			slow := w%2 == 1
			for i := 0; i < 10; i++ {
				var tk Ticket
				if f.Acquire(&tk, clientA, 0) != Admitted {
					t.Fatal("shed with a free slot")
				}
				clock = clock.Add(time.Millisecond)
				if slow && i%2 == 0 {
					switch k {
					case held, cpu:
						clock = clock.Add(20 * time.Millisecond)
					case parked:
						p := IOWait(WithTicket(context.Background(), &tk))
						clock = clock.Add(20 * time.Millisecond)
						p.Resume()
					}
				}
				f.Release(&tk)
			}
		}
		return f.Limit()
	}
	if l := run(held); l >= 16 {
		t.Fatalf("fsync waits holding the slot: limit %d, want it shrunk from 32 (the behaviour IOWait removes)", l)
	}
	if l := run(parked); l < 32 {
		t.Fatalf("fsync waits parked in IOWait: limit %d, want it kept at 32 or more", l)
	}
	if l := run(cpu); l >= 16 {
		t.Fatalf("20 ms of running: limit %d, want it shrunk from 32", l)
	}
}

// BenchmarkIOWait is what parking costs a request that waits on I/O.
func BenchmarkIOWait(b *testing.B) {
	f := NewFair(FairConfig{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var tk Ticket
		ctx := WithTicket(context.Background(), &tk)
		for pb.Next() {
			f.Acquire(&tk, clientA, 0)
			IOWait(ctx).Resume()
			f.Release(&tk)
		}
	})
}
