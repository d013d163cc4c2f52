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
	clientA = ClientKey(netip.MustParseAddr("10.0.0.1"))
	clientB = ClientKey(netip.MustParseAddr("10.0.0.2"))
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
	enqueue := func(name string, c Key, queuedBefore int) {
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

// TestFairSheds: a client over its share while another waits is shed at
// once; a stale request or a queued one past MaxWait is shed only while
// its client is over its share; a stale request finding a free slot is
// admitted.
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
	res := make(chan Verdict, 4)
	go func() { var tk Ticket; res <- f.Acquire(&tk, clientA, 0) }()
	waitQueued(t, f, 1)
	go func() { var tk Ticket; res <- f.Acquire(&tk, clientB, time.Second) }() // stale, within B's share: queued
	waitQueued(t, f, 2)
	start := time.Now()
	var tk Ticket
	if v := f.Acquire(&tk, clientA, 0); v != ShedClient || time.Since(start) > 100*time.Millisecond {
		t.Fatalf("over A's share while B waits: %v after %v, want shed as client", v, time.Since(start))
	}
	if v := f.Acquire(&tk, clientB, time.Second); v != ShedOverload || f.ShedBy(CauseStale) != 1 {
		t.Fatalf("a stale request of a client at its share: %v (stale %d), want shed as overload", v, f.ShedBy(CauseStale))
	}
	// Nothing is released for longer than MaxWait: the queued requests,
	// each within its client's share, are not shed for time.
	time.Sleep(400 * time.Millisecond)
	if n := len(res); n != 0 || f.Queued() != 2 {
		t.Fatalf("%d answers, %d queued after MaxWait within their shares, want 0 and 2", n, f.Queued())
	}
	f.Release(&first)
	if v := <-res; v != Admitted {
		t.Fatalf("A's queued request: %v, want admitted", v)
	}
	// (the admitted one holds the slot until the end of the test)
	if shed.Load() != 2 || f.Shed() != 2 || shedClient.Load() != 1 {
		t.Fatalf("shed %d (%d), %d as client, want 2 and 1", shed.Load(), f.Shed(), shedClient.Load())
	}
}

// TestFairTimeSheds: a lone client over its share has its excess shed
// after MaxWait (the oldest beyond the share), and keeps its share
// queued.
func TestFairTimeSheds(t *testing.T) {
	f := NewFair(FairConfig{MaxLimit: 1, MinLimit: 1, MaxQueue: 8, MaxClientQueue: 2, MaxWait: 100 * time.Millisecond})
	var first Ticket
	if f.Acquire(&first, clientA, 0) != Admitted {
		t.Fatal("first request shed")
	}
	res := make(chan Verdict, 5)
	for i := range 5 {
		go func() {
			var tk Ticket
			v := f.Acquire(&tk, clientA, 0)
			res <- v
			if v == Admitted {
				f.Release(&tk)
			}
		}()
		waitQueued(t, f, i+1) // alone: the whole queue is A's
	}
	for range 3 {
		if v := <-res; v != ShedOverload {
			t.Fatalf("A's excess past MaxWait: %v, want shed as overload", v)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if f.Queued() != 2 || f.ShedBy(CauseTimeout) != 3 {
		t.Fatalf("queued %d, timeouts %d, want A's share (2) queued and 3 shed", f.Queued(), f.ShedBy(CauseTimeout))
	}
	f.Release(&first)
	for range 2 {
		if v := <-res; v != Admitted {
			t.Fatalf("A's share: %v, want admitted", v)
		}
	}
}

// answer is what request i of a test got.
type answer struct {
	i int
	v Verdict
}

// try makes request i of client, which already waited waited, sends
// what it got to res, and releases its slot if it was admitted.
func try(f *Fair, i int, client Key, waited time.Duration, res chan<- answer) {
	var tk Ticket
	v := f.Acquire(&tk, client, waited)
	res <- answer{i, v}
	if v == Admitted {
		f.Release(&tk)
	}
}

// TestFairLoneClientFillsQueue: a client alone may fill the whole queue
// (only the queue bound sheds it); another client's request then takes
// the place of its newest one; its next is shed as over its share.
func TestFairLoneClientFillsQueue(t *testing.T) {
	f := NewFair(FairConfig{MaxLimit: 1, MinLimit: 1, MaxQueue: 4, MaxClientQueue: 1, MaxWait: time.Hour})
	var first Ticket
	if f.Acquire(&first, clientA, 0) != Admitted {
		t.Fatal("first request shed")
	}
	res := make(chan answer, 8)
	for i := range 4 {
		go try(f, i, clientA, 0, res)
		waitQueued(t, f, i+1)
	}
	var tk Ticket
	if v := f.Acquire(&tk, clientA, 0); v != ShedOverload || f.ShedBy(CauseQueueFull) != 1 {
		t.Fatalf("a lone client past the whole queue: %v, want shed as overload (queue full)", v)
	}
	go try(f, 9, clientB, 0, res)
	if a := <-res; a.i != 3 || a.v != ShedClient {
		t.Fatalf("B into a queue full of A's: answer %+v, want A's newest (3) shed as client", a)
	}
	waitQueued(t, f, 4)
	if v := f.Acquire(&tk, clientA, 0); v != ShedClient {
		t.Fatalf("A over its share while B waits: %v, want shed as client", v)
	}
	f.Release(&first)
	var order []int
	for range 4 {
		a := <-res
		if a.v != Admitted {
			t.Fatalf("queued request %d: %v, want admitted", a.i, a.v)
		}
		order = append(order, a.i)
	}
	if order[0] != 0 || order[1] != 9 {
		t.Fatalf("served %v, want A's oldest then B's", order)
	}
}

// TestFairShareRule (rapid): with every slot busy, arrivals of a few
// clients, fresh or stale, in any order: the queue never exceeds
// MaxQueue; a fresh request of a client alone in the queue is shed only
// when the queue is full; a client with nothing waiting is never shed
// while another client has two or more waiting (it takes the newest's
// place); a request taken out of the queue is always the newest of the
// client with the most waiting; a stale request is shed only when its
// client has its share waiting or the queue is full. Then every queued
// request is answered, every fresh one admitted.
func TestFairShareRule(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		maxQueue := rapid.IntRange(1, 10).Draw(t, "queue")
		share := rapid.IntRange(1, 5).Draw(t, "share")
		f := NewFair(FairConfig{MaxLimit: 1, MinLimit: 1, MaxQueue: maxQueue, MaxClientQueue: share, MaxWait: time.Hour})
		var hold Ticket
		if f.Acquire(&hold, clientA, 0) != Admitted {
			t.Fatal("first request shed")
		}
		res := make(chan answer, 64)
		var waiting [3][]int // the model: request indices waiting, per client, oldest first
		staleReq := map[int]bool{}
		n := rapid.IntRange(1, 40).Draw(t, "n")
		answered := 0
		for i := range n {
			c := rapid.IntRange(0, 2).Draw(t, "client")
			stale := rapid.Bool().Draw(t, "stale")
			waited := time.Duration(0)
			if stale {
				waited = 2 * time.Hour
				staleReq[i] = true
			}
			queued := 0
			longest := 0
			for k := range waiting {
				queued += len(waiting[k])
				if len(waiting[k]) > len(waiting[longest]) {
					longest = k
				}
			}
			mine, others := len(waiting[c]), queued-len(waiting[c])
			key := ClientKey(netip.AddrFrom4([4]byte{10, 0, 0, byte(c)}))
			go try(f, i, key, waited, res)
			// Wait until the request is queued or answered (and a
			// pushed-out one answered).
			deadline := time.Now().Add(10 * time.Second)
			var got []answer
			for {
				select {
				case a := <-res:
					got = append(got, a)
					answered++
					continue
				default:
				}
				if f.Queued()+answered == i+1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("request %d neither queued nor answered", i)
				}
				time.Sleep(100 * time.Microsecond)
			}
			self := -1
			for _, a := range got {
				if a.v == Admitted {
					t.Fatalf("request %d admitted with every slot busy", a.i)
				}
				if a.i == i {
					self = int(a.v)
					continue
				}
				// pushed out: the newest of a longest queue, another client's
				from := -1
				for k, w := range waiting {
					if len(w) == len(waiting[longest]) && len(w) > 0 && w[len(w)-1] == a.i {
						from = k
					}
				}
				if from < 0 || from == c || len(waiting[from]) <= mine+1 || a.v != ShedClient {
					t.Fatalf("request %d pushed out (%v); waiting %v, arrival of client %d with %d", a.i, a.v, waiting, c, mine)
				}
				waiting[from] = waiting[from][:len(waiting[from])-1]
			}
			if self < 0 {
				waiting[c] = append(waiting[c], i)
			} else {
				switch {
				case stale && mine < share && queued < maxQueue:
					t.Fatalf("stale request of a client with %d waiting (share %d) shed, queue not full", mine, share)
				case !stale && others == 0 && queued < maxQueue:
					t.Fatalf("fresh request of a lone client shed with the queue at %d of %d", queued, maxQueue)
				case mine == 0 && len(waiting[longest]) >= 2:
					t.Fatalf("client with nothing waiting shed while another has %d waiting", len(waiting[longest]))
				}
			}
			if q := f.Queued(); q > maxQueue {
				t.Fatalf("%d queued, bound %d", q, maxQueue)
			}
		}
		// Every queued request is answered in turn: admitted, or (one
		// that had waited past MaxWait before it came) shed when its
		// turn comes while its client has more than its share waiting.
		f.Release(&hold)
		left := f.Queued()
		for range left {
			a := <-res
			if a.v != Admitted && !staleReq[a.i] {
				t.Fatalf("queued fresh request %d: %v after the slot was freed, want admitted", a.i, a.v)
			}
		}
	})
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
				if f.Acquire(&tk, ClientKey(netip.AddrFrom4([4]byte{10, 0, 0, byte(c)})), 0) != Admitted {
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

// TestFairBounded: a request of a client its caller found over its part
// of the node (AcquireBounded) is held to MaxWait from its receive time:
// one that already waited MaxWait is shed as stale even with a slot free,
// one that waits in the queue until MaxWait is shed then however few its
// client has queued, and a fresh one is admitted with a slot free. A
// plain Acquire of the same wait, within its client's share, is admitted
// (free slot) or stays queued (the share rule).
func TestFairBounded(t *testing.T) {
	f := NewFair(FairConfig{MaxLimit: 1, MinLimit: 1, MaxQueue: 8, MaxClientQueue: 4, MaxWait: 20 * time.Millisecond})
	var tk Ticket
	if v := f.AcquireBounded(&tk, clientA, time.Second); v != ShedOverload || f.ShedBy(CauseStale) != 1 || tk.Holding() {
		t.Fatalf("bounded request that waited past MaxWait, slot free: %v (stale %d), want shed as stale", v, f.ShedBy(CauseStale))
	}
	if v := f.AcquireBounded(&tk, clientA, 0); v != Admitted {
		t.Fatalf("fresh bounded request, slot free: %v, want admitted", v)
	}
	// The slot is taken: a bounded request queues, alone within its
	// client's share, and is shed when its MaxWait is up.
	if v := f.AcquireBounded(new(Ticket), clientA, 0); v != ShedOverload || f.ShedBy(CauseTimeout) != 1 {
		t.Fatalf("bounded request queued past MaxWait: %v (timeouts %d), want shed as overload", v, f.ShedBy(CauseTimeout))
	}
	// The same wait through Acquire (within the share): it stays queued
	// until the slot is released, then is admitted.
	res := make(chan Verdict, 1)
	go func() {
		var w Ticket
		v := f.Acquire(&w, clientB, time.Second)
		res <- v
		if v == Admitted {
			f.Release(&w)
		}
	}()
	waitQueued(t, f, 1)
	time.Sleep(50 * time.Millisecond) // past MaxWait: still queued
	if f.Queued() != 1 {
		t.Fatalf("a stale request within its share left the queue (%d queued)", f.Queued())
	}
	f.Release(&tk)
	if v := <-res; v != Admitted {
		t.Fatalf("stale request within its share: %v, want admitted once the slot is free", v)
	}
	if f.Shed() != 2 {
		t.Fatalf("shed %d, want 2", f.Shed())
	}
}

// TestFairAcquireAsync: a caller that must not block (an event loop)
// queues like Acquire: with the only slot busy its request is pending,
// round-robin with blocking callers, woken when a Release hands it the
// slot; a pending request of a bounded client is shed at its deadline
// (CauseTimeout), a full queue sheds at once, and Cancel gives back a slot
// handed over meanwhile.
func TestFairAcquireAsync(t *testing.T) {
	f := NewFair(FairConfig{MaxLimit: 1, MinLimit: 1, MaxQueue: 2, MaxClientQueue: 1, MaxWait: time.Minute})
	clock := time.Unix(1000, 0)
	f.now = func() time.Time { return clock }
	var first, a, b, c Ticket
	if v, p := f.AcquireAsync(&first, clientA, 0, false, nil); v != Admitted || p != nil {
		t.Fatalf("free slot: %v, pending %v", v, p != nil)
	}
	var woken atomic.Int32
	wake := func() { woken.Add(1) }
	_, pa := f.AcquireAsync(&a, clientA, 0, false, wake)
	_, pb := f.AcquireAsync(&b, clientB, 0, true, wake)
	if pa == nil || pb == nil || f.Queued() != 2 {
		t.Fatalf("busy slot: pending %v %v, %d queued", pa != nil, pb != nil, f.Queued())
	}
	if _, ok := pa.Poll(); ok {
		t.Fatal("decided before any release")
	}
	// The queue is full (2): a third client's request is shed at once.
	clientC := ClientKey(netip.MustParseAddr("10.0.0.3"))
	if v, p := f.AcquireAsync(&c, clientC, 0, false, wake); p != nil || v == Admitted {
		t.Fatalf("full queue: %v, pending %v", v, p != nil)
	}
	f.Release(&first)
	if woken.Load() != 1 {
		t.Fatalf("woken %d times, want 1", woken.Load())
	}
	if v, ok := pa.Poll(); !ok || v != Admitted || !a.Holding() {
		t.Fatalf("after release: %v %v, holding %v", v, ok, a.Holding())
	}
	// B (bounded) is past its deadline: shed at its next Poll.
	clock = clock.Add(time.Minute)
	before := f.ShedBy(CauseTimeout)
	if v, ok := pb.Poll(); !ok || v != ShedOverload || f.ShedBy(CauseTimeout) != before+1 {
		t.Fatalf("bounded past its deadline: %v %v, timeouts %d", v, ok, f.ShedBy(CauseTimeout)-before)
	}
	// Cancel of a request handed the slot meanwhile releases it.
	_, pc := f.AcquireAsync(&c, clientC, 0, false, wake)
	f.Release(&a)
	pc.Cancel()
	if f.Running() != 0 || f.Queued() != 0 {
		t.Fatalf("after cancel: %d running, %d queued", f.Running(), f.Queued())
	}
	// Cancel of one still queued takes it out.
	var d Ticket
	f.AcquireAsync(&first, clientA, 0, false, nil)
	_, pd := f.AcquireAsync(&d, clientB, 0, false, wake)
	pd.Cancel()
	if f.Queued() != 0 {
		t.Fatalf("%d queued after cancel", f.Queued())
	}
	f.Release(&first)
	if f.Running() != 0 {
		t.Fatalf("%d running", f.Running())
	}
}

// TestFairStale: Stale refuses only a request held back that waited
// MaxWait.
func TestFairStale(t *testing.T) {
	f := NewFair(FairConfig{MaxWait: time.Second})
	if f.Stale(time.Hour, false) || f.Stale(time.Second-1, true) || !f.Stale(time.Second, true) {
		t.Fatal("Stale")
	}
}

// TestFairFree: Free reports a slot free with nobody queued, as the
// slots are taken, handed on to a queued request and given back.
func TestFairFree(t *testing.T) {
	f := NewFair(FairConfig{MaxLimit: 1, MinLimit: 1, MaxWait: time.Second})
	a, b := ClientKey(netip.MustParseAddr("10.0.0.1")), ClientKey(netip.MustParseAddr("10.0.0.2"))
	check := func(what string, want bool) {
		t.Helper()
		if got := f.Free(); got != want {
			t.Fatalf("%s: Free() = %v, want %v", what, got, want)
		}
	}
	check("idle", true)
	var t1, t2 Ticket
	if f.Acquire(&t1, a, 0) != Admitted {
		t.Fatal("not admitted")
	}
	check("the only slot taken", false)
	_, p := f.AcquireAsync(&t2, b, 0, false, func() {})
	if p == nil {
		t.Fatal("not queued")
	}
	check("one queued", false)
	f.Release(&t1) // handed to the queued request
	check("the slot handed on", false)
	if v, ok := p.Poll(); !ok || v != Admitted {
		t.Fatalf("queued request: %v %v", v, ok)
	}
	f.Release(&t2)
	check("given back", true)
}
