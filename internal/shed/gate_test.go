package shed

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func gateKey(s string) Key { return ClientKey(netip.MustParseAddr(s)) }

// TestGateNotOverloaded: without overload a client may have any number
// of requests in hand, and a waiting connection never parks.
func TestGateNotOverloaded(t *testing.T) {
	g := NewGate(2, func() bool { return false })
	k := gateKey("192.0.2.1")
	var w [5]GateWaiter
	for i := range w {
		if g.Wait(k, &w[i]) {
			t.Fatal("Wait parked without overload")
		}
		if ok, parked := g.Take(k, &w[i]); !ok || parked {
			t.Fatal("Take refused or parked")
		}
	}
	if got := g.Held(k); got != 5 {
		t.Fatalf("held %d, want 5", got)
	}
	for range w {
		g.Give(k)
	}
	if got := g.Held(k); got != 0 {
		t.Fatalf("held %d after giving all back, want 0", got)
	}
}

// TestGateTurns: while overloaded, a client's connections beyond Max
// park, and each request given back hands its permit to the oldest
// parked connection; another client is not held up by them.
func TestGateTurns(t *testing.T) {
	var over atomic.Bool
	over.Store(true)
	g := NewGate(2, over.Load)
	flood, other := gateKey("192.0.2.1"), gateKey("192.0.2.2")
	var held [2]GateWaiter
	for i := range held {
		if ok, _ := g.Take(flood, &held[i]); !ok {
			t.Fatal("Take refused")
		}
	}
	// Three more connections of the flood finish a request and wait
	// for the next: all park, in order.
	order := make(chan int, 3)
	var wg sync.WaitGroup
	var parked [3]GateWaiter
	for i := range parked {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !g.Wait(flood, &parked[i]) {
				t.Errorf("connection %d did not park", i)
				return
			}
			order <- i
		}()
		waitFor(t, func() bool { return g.Waiting() == i+1 })
	}
	// Another client is neither parked nor counted against the flood.
	var ow GateWaiter
	if ok, parked := g.Take(other, &ow); g.Wait(other, &ow) || !ok || parked {
		t.Fatal("another client was held by the flood's turns")
	}
	g.Give(other)
	for i := range parked {
		g.Give(flood) // a request of the flood answered
		select {
		case got := <-order:
			if got != i {
				t.Fatalf("permit %d went to connection %d, want the oldest (%d)", i, got, i)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("permit %d handed to nobody", i)
		}
	}
	wg.Wait()
	if got := g.Held(flood); got != 2 {
		t.Fatalf("held %d, want 2 (permits pass on, not multiply)", got)
	}
	// Past the overload, with nobody parked, the flood reads freely.
	over.Store(false)
	var w GateWaiter
	if g.Wait(flood, &w) {
		t.Fatal("parked after the overload ended")
	}
}

// TestGateTakeParksAfterWaiters: a request read by a connection without
// a permit waits behind the connections parked before it.
func TestGateTakeParksAfterWaiters(t *testing.T) {
	g := NewGate(1, func() bool { return true })
	k := gateKey("192.0.2.1")
	var a, b, c GateWaiter
	g.Take(k, &a)
	got := make(chan string, 2)
	go func() { g.Wait(k, &b); got <- "b" }()
	waitFor(t, func() bool { return g.Waiting() == 1 })
	go func() {
		if _, parked := g.Take(k, &c); !parked {
			t.Error("Take behind a parked connection did not park")
		}
		got <- "c"
	}()
	waitFor(t, func() bool { return g.Waiting() == 2 })
	g.Give(k)
	if first := <-got; first != "b" {
		t.Fatalf("%s got the permit first, want b (parked first)", first)
	}
	g.Give(k)
	<-got
	g.Give(k)
	if n := g.Held(k); n != 0 {
		t.Fatalf("held %d, want 0", n)
	}
}

// TestGateCancel: a parked connection that is closed stops waiting
// without a permit, and the next Give goes to the one behind it.
func TestGateCancel(t *testing.T) {
	g := NewGate(1, func() bool { return true })
	k := gateKey("2001:db8::1")
	var a, b, c GateWaiter
	g.Take(k, &a)
	res := make(chan bool, 2)
	go func() { res <- g.Wait(k, &b) }()
	waitFor(t, func() bool { return g.Waiting() == 1 })
	go func() { res <- g.Wait(k, &c) }()
	waitFor(t, func() bool { return g.Waiting() == 2 })
	g.Cancel(&b)
	if <-res {
		t.Fatal("a cancelled wait returned a permit")
	}
	g.Cancel(&b) // not parked any more: nothing
	g.Give(k)
	if !<-res {
		t.Fatal("the permit did not pass to the connection behind the cancelled one")
	}
	if g.Waiting() != 0 || g.Held(k) != 1 {
		t.Fatalf("waiting %d held %d, want 0 and 1", g.Waiting(), g.Held(k))
	}
	g.Give(k)
}

// TestGateNil: a nil Gate parks and counts nothing.
func TestGateNil(t *testing.T) {
	var g *Gate
	if NewGate(0, nil) != nil || NewGate(-1, nil) != nil {
		t.Fatal("NewGate(<=0) is not nil")
	}
	var w GateWaiter
	k := gateKey("192.0.2.1")
	if ok, parked := g.Take(k, &w); g.Wait(k, &w) || !ok || parked || g.Waiting() != 0 || g.Held(k) != 0 {
		t.Fatal("nil gate parked or counted")
	}
	g.Give(k)
	g.Cancel(&w)
}

// TestGateConcurrent: many connections of two clients taking turns
// leave no permit held and nobody parked (run with -race).
func TestGateConcurrent(t *testing.T) {
	g := NewGate(3, func() bool { return true })
	keys := []Key{gateKey("192.0.2.1"), gateKey("192.0.2.2")}
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := keys[i%2]
			var w GateWaiter
			for range 200 {
				if !g.Wait(k, &w) {
					if ok, _ := g.Take(k, &w); !ok {
						t.Error("refused without Cancel")
						return
					}
				}
				if n := g.Held(k); n > 3 {
					t.Errorf("client holds %d permits, max 3", n)
					return
				}
				g.Give(k)
			}
		}()
	}
	wg.Wait()
	for _, k := range keys {
		if g.Held(k) != 0 {
			t.Fatalf("%v holds %d permits at the end", k, g.Held(k))
		}
	}
	if g.Waiting() != 0 {
		t.Fatalf("%d parked at the end", g.Waiting())
	}
}

// waitFor polls cond until it holds, failing the test after 5 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(end) {
			t.Fatal("condition not reached in 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestGateQueueModel: the waiters' queue (pushes, pops, cancellations
// leaving holes, compaction) pops the live waiters oldest first, like a
// plain list.
func TestGateQueueModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var c gateClient
		var model []*GateWaiter
		for _, op := range rapid.SliceOfN(rapid.IntRange(0, 2), 1, 300).Draw(t, "ops") {
			switch {
			case op == 0 || len(model) == 0:
				w := &GateWaiter{}
				c.push(w)
				model = append(model, w)
			case op == 1:
				got := c.pop()
				if got != model[0] {
					t.Fatalf("popped a waiter out of order")
				}
				model = model[1:]
			default: // cancel one in the middle, as Gate.Cancel does
				i := rapid.IntRange(0, len(model)-1).Draw(t, "cancel")
				c.remove(model[i])
				model = append(model[:i], model[i+1:]...)
			}
			if c.n != len(model) {
				t.Fatalf("n = %d, want %d", c.n, len(model))
			}
		}
	})
}

// TestGateOver: a client is over its requests in hand with more than Max
// of them (taken while the gate did not park) or with a connection
// parked for a turn; at Max, none parked, it is not.
func TestGateOver(t *testing.T) {
	engaged := false
	g := NewGate(2, func() bool { return engaged })
	var w [4]GateWaiter
	for i := range 2 {
		g.Take(clientA, &w[i])
	}
	if g.Over(clientA) || g.Over(clientB) {
		t.Fatal("a client at Max, nothing parked, is over")
	}
	g.Take(clientA, &w[2]) // not engaged: taken beyond Max
	if !g.Over(clientA) {
		t.Fatal("a client with more than Max in hand is not over")
	}
	g.Give(clientA)
	engaged = true
	parked := make(chan bool)
	go func() { ok, _ := g.Take(clientA, &w[3]); parked <- ok }()
	for g.Waiting() != 1 {
		time.Sleep(time.Millisecond)
	}
	if !g.Over(clientA) {
		t.Fatal("a client with a connection parked is not over")
	}
	g.Give(clientA)
	if !<-parked {
		t.Fatal("the parked connection was not handed the permit")
	}
	var none *Gate
	if none.Over(clientA) {
		t.Fatal("a nil gate found a client over")
	}
}
