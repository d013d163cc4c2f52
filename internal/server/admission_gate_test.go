package server

import (
	"bufio"
	"net/http"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/shed"
)

// TestAdmissionGate: while the node is overloaded, a client with its
// --max-busy-conns-per-client requests in hand (here one) has its other
// connections wait unread (their requests reach the HTTP server one at a
// time, in turn), another client is served meanwhile, and a connection
// handed a turn with nothing to read (an idle one) gives it back, so its
// client's next request on any connection is served.
func TestAdmissionGate(t *testing.T) {
	entered, unblock := make(chan string, 4), make(chan struct{})
	a, addr := gatedServer(t, 10*time.Second, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/fast" {
			entered <- r.URL.Path
			<-unblock
		}
		w.Write([]byte("ok"))
	})
	flood := shed.ClientKey(netip.MustParseAddr("127.0.0.1"))
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		for end := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("%s: not reached in 5s (held %d, waiting %d)", what, a.gate.Held(flood), a.gate.Waiting())
			}
		}
	}
	expect := func(path string) {
		t.Helper()
		select {
		case got := <-entered:
			if got != path {
				t.Fatalf("the server got %s, want %s", got, path)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s never reached the server", path)
		}
	}

	ca, cb := dialFrom(t, addr, "127.0.0.1"), dialFrom(t, addr, "127.0.0.1")
	ca.send(post("/a1"))
	expect("/a1")
	cb.send(post("/b1"))
	waitUntil("the flood's second request waits for its turn", func() bool { return a.gate.Waiting() == 1 })

	other := dialFrom(t, addr, "127.0.0.2")
	other.send(post("/fast"))
	if resp := other.answer(); resp.StatusCode != 200 {
		t.Fatalf("another client while the flood waits: %d", resp.StatusCode)
	}
	select {
	case p := <-entered:
		t.Fatalf("%s reached the server while its client had its request in hand", p)
	default:
	}

	unblock <- struct{}{} // /a1 answered: its turn passes to /b1
	if resp := ca.answer(); resp.StatusCode != 200 {
		t.Fatalf("/a1: %d", resp.StatusCode)
	}
	expect("/b1")
	// ca, answered, waits unread for its next turn behind /b1. A
	// request sent meanwhile whose body comes later is read when ca gets
	// its turn, the rest of it in the poller.
	waitUntil("the answered connection parks", func() bool { return a.gate.Waiting() == 1 })
	split := post("/fast")
	ca.send(split[:len(split)-4])
	unblock <- struct{}{}
	if resp := cb.answer(); resp.StatusCode != 200 {
		t.Fatalf("/b1: %d", resp.StatusCode)
	}
	time.Sleep(20 * time.Millisecond)
	ca.send(split[len(split)-4:])
	if resp := ca.answer(); resp.StatusCode != 200 {
		t.Fatalf("a request whose body came after its turn: %d", resp.StatusCode)
	}

	// A connection handed its turn with nothing to read (idle) gives it
	// back.
	ca.send(post("/a2"))
	expect("/a2")
	cb.send(post("/b2"))
	waitUntil("/b2 waits for its turn", func() bool { return a.gate.Waiting() == 1 })
	unblock <- struct{}{}
	if resp := ca.answer(); resp.StatusCode != 200 {
		t.Fatalf("/a2: %d", resp.StatusCode)
	}
	expect("/b2")
	waitUntil("ca parks behind /b2", func() bool { return a.gate.Waiting() == 1 })
	unblock <- struct{}{}
	if resp := cb.answer(); resp.StatusCode != 200 {
		t.Fatalf("/b2: %d", resp.StatusCode)
	}
	waitUntil("an idle connection holds no turn", func() bool { return a.gate.Waiting() == 0 && a.gate.Held(flood) == 0 })
	for _, c := range []*wireConn{ca, cb, ca} {
		c.send(post("/fast"))
		if resp := c.answer(); resp.StatusCode != 200 {
			t.Fatalf("after its turns: %d", resp.StatusCode)
		}
	}
	waitUntil("every turn given back", func() bool { return a.gate.Held(flood) == 0 })
}

// TestAdmissionGateStaleTurn: a request that waited for its client's
// turn past --max-queue-wait is refused on the spot (503, Retry-After),
// on a connection that stays usable; a fresh one is served.
func TestAdmissionGateStaleTurn(t *testing.T) {
	entered, unblock := make(chan struct{}, 1), make(chan struct{})
	var served atomic.Int64
	a, addr := gatedServer(t, 30*time.Millisecond, func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		if r.URL.Path == "/block" {
			entered <- struct{}{}
			<-unblock
		}
		w.Write([]byte("ok"))
	})

	holder, late := dialFrom(t, addr, "127.0.0.1"), dialFrom(t, addr, "127.0.0.1")
	holder.send(post("/block"))
	<-entered
	late.send(post("/late"))
	for end := time.Now().Add(5 * time.Second); a.gate.Waiting() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the second request never waited for its turn")
		}
	}
	time.Sleep(100 * time.Millisecond) // past --max-queue-wait
	close(unblock)
	if resp := holder.answer(); resp.StatusCode != 200 {
		t.Fatalf("holder: %d", resp.StatusCode)
	}
	resp := late.answer()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || resp.Close {
		t.Fatalf("a request that waited its turn past the bound: %d %v close=%v", resp.StatusCode, resp.Header, resp.Close)
	}
	if got := a.fair.ShedBy(shed.CauseStale); got != 1 {
		t.Fatalf("stale refusals counted: %d, want 1", got)
	}
	late.send(post("/fresh"))
	if resp := late.answer(); resp.StatusCode != 200 {
		t.Fatalf("a fresh request after the refusal: %d", resp.StatusCode)
	}
	if got := served.Load(); got != 2 {
		t.Fatalf("the HTTP server served %d requests, want 2 (the refused one never reached it)", got)
	}
}

// TestBusyCap: --max-busy-conns-per-client defaults to a client's share
// of the queue, so a client within that share of connections never
// waits for a turn (the share rule's promise); -1 is no gate.
func TestBusyCap(t *testing.T) {
	fair := shed.NewFair(shed.FairConfig{MaxLimit: 16, MaxQueue: 40})
	for _, c := range []struct{ v, want int }{{0, 10}, {-1, 0}, {5, 5}} {
		if got := busyCap(c.v, fair); got != c.want {
			t.Errorf("busyCap(%d) = %d, want %d", c.v, got, c.want)
		}
	}
	if shed.NewGate(busyCap(-1, fair), nil) != nil {
		t.Error("-1 made a gate")
	}
}

// gatedServer serves h behind an admission whose gate gives each client
// one request in hand and always finds the node overloaded, with a queue
// wait bound of maxWait; it returns the admission and the address.
func gatedServer(t *testing.T, maxWait time.Duration, h http.HandlerFunc) (*admission, string) {
	t.Helper()
	a := &admission{
		fair: shed.NewFair(shed.FairConfig{MaxLimit: 8, MinLimit: 8, MaxWait: maxWait}),
		idle: time.Minute,
	}
	a.gate = shed.NewGate(1, func() bool { return true }) // overloaded throughout
	return a, serveAdmission(t, a, h)
}

// TestAdmissionStaleAfterPause: a client refused too often has its
// refused connection paused; a request it sent during the pause has
// waited the pause in its socket and, past --max-queue-wait, is refused
// as stale even with a slot free (the admitted requests keep to the
// bound); one sent after the pause is served.
func TestAdmissionStaleAfterPause(t *testing.T) {
	const pause = 200 * time.Millisecond
	a := &admission{
		fair: shed.NewFair(shed.FairConfig{MaxLimit: 1, MinLimit: 1, MaxClientQueue: 1, MaxWait: 30 * time.Millisecond}),
		pace: shed.NewPacer(1, pause), // a burst of one refusal, then pauses
		idle: time.Minute,
	}
	entered, unblock := make(chan struct{}), make(chan struct{})
	addr := serveAdmission(t, a, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			entered <- struct{}{}
			<-unblock
		}
		w.Write([]byte("ok"))
	}))
	holder := dialFrom(t, addr, "127.0.0.3")
	holder.send(post("/block"))
	<-entered // the only slot is taken

	queued := dialFrom(t, addr, "127.0.0.1")
	queued.send(post("/queued")) // the client's one place in the queue
	time.Sleep(50 * time.Millisecond)
	flood := dialFrom(t, addr, "127.0.0.1")
	for i, path := range []string{"/over1", "/over2"} { // over the client's queue
		flood.send(post(path))
		if resp := flood.answer(); resp.StatusCode != 429 && resp.StatusCode != 503 {
			t.Fatalf("refusal %d: %d", i+1, resp.StatusCode)
		}
	}
	// The second refusal paused the connection: this request waits in
	// its socket meanwhile, and the slot is free long before the pause
	// ends.
	stale := a.fair.ShedBy(shed.CauseStale)
	flood.send(post("/during-pause"))
	close(unblock)
	if resp := holder.answer(); resp.StatusCode != 200 {
		t.Fatalf("holder: %d", resp.StatusCode)
	}
	queued.answer() // served, or refused for its wait: the slot is free
	resp := flood.answer()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || resp.Close {
		t.Fatalf("a request sent during the pause: %d %v close=%v", resp.StatusCode, resp.Header, resp.Close)
	}
	if got := a.fair.ShedBy(shed.CauseStale) - stale; got != 1 {
		t.Fatalf("stale refusals counted: %d, want 1", got)
	}
	time.Sleep(2 * pause) // that refusal paused it again
	flood.send(post("/after-pause"))
	if resp := flood.answer(); resp.StatusCode != 200 {
		t.Fatalf("a request sent after the pause: %d", resp.StatusCode)
	}
}

// TestAdmissionBoundsFlood: a request of a client holding more
// connections than its share of the queue (--max-queue-per-client) that
// waited --max-queue-wait in its socket is refused 503 as stale even
// with every slot free (it would be admitted late), before the HTTP
// server sees it; the same wait from a client within its share of
// connections is admitted (the share rule's promise).
func TestAdmissionBoundsFlood(t *testing.T) {
	waitRxStamps(t)
	const maxWait = 20 * time.Millisecond
	fair := shed.NewFair(shed.FairConfig{MaxLimit: 8, MinLimit: 8, MaxClientQueue: 1, MaxWait: maxWait})
	a := &admission{fair: fair}
	conns := shed.NewConnCounter(10, nil)
	flood, light := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	for _, ip := range []netip.Addr{flood, flood, light} {
		if _, ok := conns.TakeIP(ip); !ok {
			t.Fatal("connection refused within the cap")
		}
	}
	buf := make([]byte, 4096)
	for _, tc := range []struct {
		ip       netip.Addr
		admitted bool
	}{{flood, false}, {light, true}} {
		client, server := tcpPair(t)
		c := &admitConn{Conn: server, a: a, key: shed.ClientKey(tc.ip), rx: newRxReader(server), conns: conns, client: tc.ip}
		req := post("/a")
		if _, err := client.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * maxWait) // it waits in its socket past the bound
		stale := fair.ShedBy(shed.CauseStale)
		server.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		n, err := c.Read(buf)
		if tc.admitted {
			if n != len(req) || err != nil || !c.ticket.Holding() {
				t.Fatalf("client within its share: Read %d, %v, holding %v; want its request admitted", n, err, c.ticket.Holding())
			}
			c.Close()
			continue
		}
		if n != 0 || err == nil || c.ticket.Holding() || fair.ShedBy(shed.CauseStale) != stale+1 {
			t.Fatalf("flooding client: Read %d, %v, stale %d; want it refused as stale", n, err, fair.ShedBy(shed.CauseStale)-stale)
		}
		client.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(client), nil)
		if err != nil || resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" {
			t.Fatalf("flooding client's answer: %v, %v; want 503 with Retry-After", resp, err)
		}
		c.Close()
	}
}
