//go:build linux

package resp

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/auth"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/shed"
)

// TestEventLoopServesPlainTCP checks that with EventLoops a plain TCP
// connection is moved onto a loop (not left on a goroutine), is served
// there, and is closed by Close.
func TestEventLoopServesPlainTCP(t *testing.T) {
	eng := memEngine(t)
	s := New(engine.Local(eng), Options{EventLoops: 1})
	addr, done := serveLoopback(t, s)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("*2\r\n$4\r\nINCR\r\n$1\r\nk\r\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != ":1\r\n" {
		t.Fatalf("INCR reply %q, %v", line, err)
	}
	s.mu.Lock()
	n, onLoop := len(s.clients), 0
	for cl := range s.clients {
		if _, ok := cl.nc.(*fdConn); ok {
			onLoop++
		}
	}
	s.mu.Unlock()
	if n != 1 || onLoop != 1 {
		t.Fatalf("%d clients, %d on an event loop; want 1 and 1", n, onLoop)
	}
	s.Close()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("connection still open after Close")
	}
}

// TestEventLoopDrivesClock: the loop hands its clock readings to the
// engine's coarse clock, so a stream of unpipelined commands does not
// start the clock's ticker (each of which would otherwise read the
// clock), and a TTL still expires on time.
func TestEventLoopDrivesClock(t *testing.T) {
	eng := memEngine(t)
	clk := eng.CoarseClock()
	if clk == nil {
		t.Fatal("the engine has no coarse clock")
	}
	s := New(engine.Local(eng), Options{EventLoops: 1})
	addr, done := serveLoopback(t, s)
	defer func() {
		s.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	rd := bufio.NewReader(c)
	roundTrip := func(req, want string) {
		t.Helper()
		if _, err := c.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		line, err := rd.ReadString('\n')
		if err != nil || line != want {
			t.Fatalf("%q: reply %q, %v; want %q", req, line, err, want)
		}
	}
	const n = 2000
	ticking := 0
	for i := 1; i <= n; i++ {
		roundTrip("*2\r\n$4\r\nINCR\r\n$1\r\nk\r\n", fmt.Sprintf(":%d\r\n", i))
		if clk.Ticking() {
			ticking++
		}
	}
	// The engine's own goroutines (its janitor, every second) may start
	// the ticker for a few milliseconds; the commands must not.
	if ticking > n/2 {
		t.Errorf("the clock's ticker ran after %d of %d loop commands", ticking, n)
	}
	// After an idle spell the first round's commands see the time of the
	// round, not the clock's last reading before the spell.
	roundTrip("*3\r\n$7\r\nPEXPIRE\r\n$1\r\nk\r\n$3\r\n100\r\n", ":1\r\n")
	time.Sleep(150 * time.Millisecond)
	roundTrip("*2\r\n$6\r\nEXISTS\r\n$1\r\nk\r\n", ":0\r\n")
}

// TestEventLoopSharesByUser: a loop's rounds are shared by client as
// admission keys them: connections from one address are one client until
// they authenticate, then one client per user, and a user's connections
// share one budget (the share moves when AUTH changes the user).
func TestEventLoopSharesByUser(t *testing.T) {
	eng := memEngine(t)
	const tokA, tokB = "token-of-user-a-0123456789", "token-of-user-b-0123456789"
	table, err := auth.Parse(strings.NewReader(fmt.Sprintf("users:\n  a:\n    tokens: [%s]\n    grants: {\"*\": write}\n  b:\n    tokens: [%s]\n    grants: {\"*\": write}\n",
		auth.Hash([]byte(tokA)), auth.Hash([]byte(tokB)))))
	if err != nil {
		t.Fatal(err)
	}
	s := New(engine.Local(eng), Options{EventLoops: 1, Auth: auth.NewStore(table)})
	addr, _ := serveLoopback(t, s)
	send := func(c net.Conn, rd *bufio.Reader, args ...string) string {
		t.Helper()
		var b strings.Builder
		fmt.Fprintf(&b, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
		if _, err := c.Write([]byte(b.String())); err != nil {
			t.Fatal(err)
		}
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		return line
	}
	type conn struct {
		c  net.Conn
		rd *bufio.Reader
	}
	var conns []conn
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		conns = append(conns, conn{c, bufio.NewReader(c)})
	}
	for _, c := range conns {
		if line := send(c.c, c.rd, "INCR", "k"); !strings.HasPrefix(line, "-NOAUTH") {
			t.Fatalf("INCR before AUTH: %q", line)
		}
	}
	if got := loopShares(t, s); len(got) != 1 || got["127.0.0.1"] != 3 {
		t.Fatalf("before AUTH: shares %v, want one of 3 connections for 127.0.0.1", got)
	}
	for i, tok := range []string{tokA, tokA, tokB} {
		if line := send(conns[i].c, conns[i].rd, "AUTH", tok); line != "+OK\r\n" {
			t.Fatalf("AUTH: %q", line)
		}
	}
	if got := loopShares(t, s); len(got) != 2 || got["user:a"] != 2 || got["user:b"] != 1 {
		t.Fatalf("after AUTH: shares %v, want user:a with 2 connections and user:b with 1", got)
	}
	conns[2].c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := loopShares(t, s)
		if len(got) == 1 && got["user:a"] == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after user b's connection closed: shares %v, want only user:a with 2", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// loopShares returns the connections of each client share of s's first
// event loop, read on the loop's goroutine.
func loopShares(t *testing.T, s *Server) map[string]int {
	t.Helper()
	s.mu.Lock()
	l := s.loops[0]
	s.mu.Unlock()
	got := make(chan map[string]int, 1)
	l.onLoop(func() {
		m := map[string]int{}
		for k, sh := range l.shares {
			m[k.String()] = sh.conns
		}
		got <- m
	})
	select {
	case m := <-got:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("the event loop did not run a call in 10s")
		return nil
	}
}

// TestRefusedConnsPaced: a client over its connection cap that
// reconnects as soon as it is refused gets its "-ERR max number of
// clients from this address reached" at no more than RefusePace's rate,
// not as fast as it reconnects (which spun the accept loop), while its
// served connection keeps working.
func TestRefusedConnsPaced(t *testing.T) {
	eng := memEngine(t)
	const rate = 20.0 // refusals a second; burst 2
	s := New(engine.Local(eng), Options{MaxConns: 100, ClientConns: shed.NewConnCounter(1, nil), RefusePace: shed.NewPacer(rate, 300*time.Millisecond)})
	addr, _ := serveLoopback(t, s)
	served, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer served.Close()
	served.SetDeadline(time.Now().Add(20 * time.Second))
	rd := bufio.NewReader(served)
	incr := func() {
		t.Helper()
		if _, err := served.Write([]byte("*2\r\n$4\r\nINCR\r\n$1\r\nk\r\n")); err != nil {
			t.Fatal(err)
		}
		if line, err := rd.ReadString('\n'); err != nil || line[0] != ':' {
			t.Fatalf("INCR on the served connection: %q, %v", line, err)
		}
	}
	incr()
	start := time.Now()
	refused := 0
	for time.Since(start) < time.Second {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil || line != "-ERR max number of clients from this address reached\r\n" {
			t.Fatalf("connection over the cap: %q, %v", line, err)
		}
		refused++
	}
	elapsed := time.Since(start).Seconds()
	if most := 2 + int(rate*elapsed) + 2; refused > most {
		t.Fatalf("%d refusals in %.2fs; paced at %.0f/s (burst 2) there are at most %d", refused, elapsed, rate, most)
	}
	incr()
}

// memEngine opens an in-memory engine closed at the end of the test.
func memEngine(t *testing.T) *engine.Engine {
	t.Helper()
	cfg := engine.DefaultConfig()
	cfg.InMemory = true
	cfg.NodeID = "test"
	eng, err := engine.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	return eng
}

// serveLoopback runs s on a free loopback port until the end of the test
// (or an earlier Close); done receives Serve's result.
func serveLoopback(t *testing.T, s *Server) (addr string, done <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan error, 1)
	go func() { ch <- s.Serve(ln) }()
	t.Cleanup(func() { s.Close() })
	return ln.Addr().String(), ch
}

// TestEventLoopCoalesce: with Options.Coalesce, a round that served
// many active connections sending one command each is followed by a
// nap, after which what came meanwhile is served with the right replies;
// a lone connection (few active connections) never waits for a nap, nor
// do pipelining connections.
func TestEventLoopCoalesce(t *testing.T) {
	eng := memEngine(t)
	s := New(engine.Local(eng), Options{EventLoops: 1, Coalesce: 200 * time.Microsecond})
	addr, _ := serveLoopback(t, s)
	dial := func() (net.Conn, *bufio.Reader) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(20 * time.Second))
		return c, bufio.NewReader(c)
	}
	incr := func(c net.Conn, rd *bufio.Reader, key string) int {
		t.Helper()
		if _, err := fmt.Fprintf(c, "*2\r\n$4\r\nINCR\r\n$%d\r\n%s\r\n", len(key), key); err != nil {
			t.Fatal(err)
		}
		line, err := rd.ReadString('\n')
		if err != nil || len(line) < 4 || line[0] != ':' {
			t.Fatalf("INCR %s: %q, %v", key, line, err)
		}
		var n int
		fmt.Sscanf(line, ":%d", &n)
		return n
	}
	var l *eventLoop // set once a connection was served (the loop then runs)
	onLoop := func(f func()) {
		t.Helper()
		done := make(chan struct{})
		l.onLoop(func() { f(); close(done) })
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the event loop did not run a call in 10s")
		}
	}
	naps := func() (n uint64) {
		t.Helper()
		onLoop(func() { n = l.naps })
		return n
	}
	// burst has every connection send cmds INCRs of key at once (the loop
	// held meanwhile, so that one round finds them all) and checks the
	// replies.
	burst := func(cs []net.Conn, rds []*bufio.Reader, cmds int) {
		t.Helper()
		held := make(chan struct{})
		l.onLoop(func() {
			close(held)
			time.Sleep(50 * time.Millisecond)
		})
		<-held
		var req []byte
		for range cmds {
			req = append(req, "*2\r\n$4\r\nINCR\r\n$6\r\nshared\r\n"...)
		}
		errs := make(chan error, len(cs))
		for i := range cs {
			go func(c net.Conn, rd *bufio.Reader) {
				if _, err := c.Write(req); err != nil {
					errs <- err
					return
				}
				for range cmds {
					if line, err := rd.ReadString('\n'); err != nil || line[0] != ':' {
						errs <- fmt.Errorf("INCR shared: %q, %v", line, err)
						return
					}
				}
				errs <- nil
			}(cs[i], rds[i])
		}
		for range cs {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}

	lone, lrd := dial()
	for i := 1; i <= 200; i++ {
		if n := incr(lone, lrd, "lone"); n != i {
			t.Fatalf("INCR lone #%d = %d", i, n)
		}
	}
	s.mu.Lock()
	l = s.loops[0]
	s.mu.Unlock()
	if n := naps(); n != 0 {
		t.Fatalf("%d naps serving one connection; want none", n)
	}

	const conns = 2 * coalesceMinActive
	cs := make([]net.Conn, conns)
	rds := make([]*bufio.Reader, conns)
	for i := range cs {
		cs[i], rds[i] = dial()
		if n := incr(cs[i], rds[i], fmt.Sprintf("own%d", i)); n != 1 {
			t.Fatalf("first INCR on connection %d = %d", i, n)
		}
	}
	burst(cs, rds, 1)
	after1 := naps()
	if after1 == 0 {
		t.Fatalf("no nap after a round that served %d connections", conns)
	}
	burst(cs, rds, 4*coalesceMaxDepth)
	if n := naps(); n != after1 {
		t.Fatalf("%d naps after a round of %d pipelining connections; want none", n-after1, conns)
	}
	if n, want := incr(lone, lrd, "shared"), conns*(1+4*coalesceMaxDepth)+1; n != want {
		t.Fatalf("shared = %d; want %d", n, want)
	}
}

// TestCoalesceBounds: New keeps Options.Coalesce within 0..MaxCoalesce.
func TestCoalesceBounds(t *testing.T) {
	for _, c := range []struct{ in, want time.Duration }{
		{-time.Second, 0}, {0, 0}, {20 * time.Microsecond, 20 * time.Microsecond}, {time.Hour, MaxCoalesce},
	} {
		if got := New(nil, Options{Coalesce: c.in}).opts.Coalesce; got != c.want {
			t.Errorf("Coalesce %v: New made it %v, want %v", c.in, got, c.want)
		}
	}
}
