//go:build linux

package resp

import (
	"bufio"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/engine"
)

// TestEventLoopServesPlainTCP checks that with EventLoops a plain TCP
// connection is moved onto a loop (not left on a goroutine), is served
// there, and is closed by Close.
func TestEventLoopServesPlainTCP(t *testing.T) {
	cfg := engine.DefaultConfig()
	cfg.InMemory = true
	cfg.NodeID = "test"
	eng, err := engine.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	s := New(engine.Local(eng), Options{EventLoops: 1})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	c, err := net.Dial("tcp", ln.Addr().String())
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
	cfg := engine.DefaultConfig()
	cfg.InMemory = true
	cfg.NodeID = "test"
	eng, err := engine.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	clk := eng.CoarseClock()
	if clk == nil {
		t.Fatal("the engine has no coarse clock")
	}
	s := New(engine.Local(eng), Options{EventLoops: 1})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	defer func() {
		s.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
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
