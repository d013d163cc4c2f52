package server

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/shed"
)

// limitServer serves 200 behind a limitListener with a cap of perClient
// connections per address, refusals paced by pace, at most rejecting of
// them answered beyond the cap at once (0: maxRejecting).
func limitServer(t *testing.T, perClient int, pace *shed.Pacer, reject func(net.Conn), rejecting int) (string, *limitListener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ll := newLimitListener(ln, 1000, shed.NewConnCounter(perClient, nil), pace, reject, nil)
	if rejecting > 0 {
		ll.maxRejecting = int64(rejecting)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ll)
	t.Cleanup(func() { hs.Close() })
	return ln.Addr().String(), ll
}

// getOnce opens a connection from d, sends one GET and returns the
// status (0: closed without an answer) and the Retry-After header.
func getOnce(t *testing.T, d *net.Dialer, addr string) (int, string, net.Conn) {
	t.Helper()
	st, ra, c, err := tryGet(d, addr)
	if err != nil {
		t.Fatal(err)
	}
	return st, ra, c
}

// tryGet is getOnce for a goroutine that may outlive its test (which
// must not fail it then): a failed dial is its error.
func tryGet(d *net.Dialer, addr string) (int, string, net.Conn, error) {
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return 0, "", nil, err
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		return 0, "", c, nil
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, "", c, nil
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After"), c, nil
}

// TestLimitListenerPacesRefusals: a client over its connection cap that
// reconnects as soon as it is refused (a flood's reconnect loop) gets
// its 503s at no more than the pacing rate, not as fast as it can
// reconnect, while another address is served at once.
func TestLimitListenerPacesRefusals(t *testing.T) {
	const rate = 20.0 // refusals a second; burst 2
	addr, _ := limitServer(t, 1, shed.NewPacer(rate, 300*time.Millisecond), rejectHTTP, 0)
	local, other := servedAndOther(t, addr)
	start := time.Now()
	refused := 0
	for time.Since(start) < time.Second {
		st, ra, c := getOnce(t, local, addr)
		c.Close()
		if st != 503 || ra == "" {
			t.Fatalf("connection over the cap: status %d, Retry-After %q; want 503 with Retry-After", st, ra)
		}
		refused++
	}
	elapsed := time.Since(start).Seconds()
	// The burst, the rate over the time, and the last refusal's pause.
	if most := 2 + int(rate*elapsed) + 2; refused > most {
		t.Fatalf("%d refusals in %.2fs; paced at %.0f/s (burst 2) there are at most %d", refused, elapsed, rate, most)
	}
	// The pacing holds only the refused connections: another address is
	// served at once, even while one of the flood's is held.
	go func() { // may outlive the test, whose server then refuses it
		if _, _, c, err := tryGet(local, addr); err == nil {
			c.Close()
		}
	}()
	t0 := time.Now()
	st, _, c := getOnce(t, other, addr)
	c.Close()
	if st != 200 {
		t.Fatalf("another address while the flood is paced: status %d", st)
	}
	if d := time.Since(t0); d > 200*time.Millisecond {
		t.Fatalf("another address waited %v while the flood was paced", d)
	}
}

// TestLimitListenerBoundsRefusals: refused connections held for their
// pause take a slot of the listener, at most the per-client cap of them
// per address, and at most maxRejecting more are held beyond the
// listener's cap; past those a refused connection is closed unanswered.
// Accept never waits for them: a new connection of another address is
// served at once while they are held.
func TestLimitListenerBoundsRefusals(t *testing.T) {
	// One refusal a second (burst 1): every refusal after the first is
	// held for up to a second.
	addr, ll := limitServer(t, 1, shed.NewPacer(1, time.Second), rejectHTTP, 2)
	local, other := servedAndOther(t, addr)
	const n = 8
	var wg sync.WaitGroup
	statuses := make(chan int, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, _, c := getOnce(t, local, addr)
			c.Close()
			statuses <- st
		}()
	}
	var mostHeld, mostBeyond int64
	for end := time.Now().Add(400 * time.Millisecond); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		mostHeld = max(mostHeld, ll.n.Load()-1) // less the served connection
		mostBeyond = max(mostBeyond, ll.rejecting.Load())
	}
	t0 := time.Now()
	st, _, c := getOnce(t, other, addr)
	c.Close()
	if st != 200 {
		t.Fatalf("another address while refusals are held: status %d", st)
	}
	if d := time.Since(t0); d > 300*time.Millisecond {
		t.Fatalf("another address waited %v for its connection while refusals were held", d)
	}
	wg.Wait()
	close(statuses)
	answered, closed := 0, 0
	for st := range statuses {
		switch st {
		case 503:
			answered++
		case 0:
			closed++
		default:
			t.Fatalf("a refused connection got status %d, want 503 or none", st)
		}
	}
	if mostHeld > 1 || mostBeyond > 2 {
		t.Fatalf("held %d refusals in slots (cap 1) and %d beyond the cap (bound 2)", mostHeld, mostBeyond)
	}
	// At most the burst, the one in a slot and the two beyond the cap are
	// answered in the pause; the others were closed.
	if answered < 1 || closed < 1 || answered > 1+1+2+1 {
		t.Fatalf("%d refusals answered, %d closed unanswered", answered, closed)
	}
}

// feedConn is a net.Conn whose reads return one request each, n times,
// then EOF; writes are dropped.
type feedConn struct {
	net.Conn
	req []byte
	n   int
}

func (f *feedConn) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, io.EOF
	}
	f.n--
	return copy(p, f.req), nil
}
func (f *feedConn) Write(p []byte) (int, error)      { return len(p), nil }
func (f *feedConn) SetReadDeadline(time.Time) error  { return nil }
func (f *feedConn) SetWriteDeadline(time.Time) error { return nil }
func (f *feedConn) Close() error                     { return nil }
func (f *feedConn) RemoteAddr() net.Addr             { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 9), Port: 1} }

// feedAdmitConn is an admitConn of a, client 127.0.0.9, whose reads
// return one increment request each, n times, then EOF.
func feedAdmitConn(a *admission, n int) (*admitConn, *feedConn) {
	fc := &feedConn{req: []byte("POST /counters/a/increment HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n{\"delta\": 1}"), n: n}
	return &admitConn{Conn: fc, a: a, key: shed.ClientKey(netip.MustParseAddr("127.0.0.9"))}, fc
}

// TestAdmissionShedAllocs: refusing a flood's request in front of the
// HTTP server (framing it, the share check, the prebuilt 503) allocates
// nothing, so refusals cost the garbage collector nothing however many
// a flood makes.
func TestAdmissionShedAllocs(t *testing.T) {
	fair := shed.NewFair(shed.FairConfig{MaxLimit: 1, MinLimit: 1, MaxQueue: 1, MaxClientQueue: 1, MaxWait: time.Hour})
	var running shed.Ticket
	if fair.Acquire(&running, shed.ClientKey(netip.MustParseAddr("192.0.2.1")), 0) != shed.Admitted {
		t.Fatal("first request not admitted")
	}
	// Another client waits, filling the queue: every request of the
	// connection below is refused at once (the queue is full).
	waiting := make(chan shed.Verdict)
	go func() {
		var tk shed.Ticket
		v := fair.Acquire(&tk, shed.ClientKey(netip.MustParseAddr("192.0.2.2")), 0)
		if v == shed.Admitted {
			fair.Release(&tk)
		}
		waiting <- v
	}()
	for fair.Queued() == 0 {
		time.Sleep(time.Millisecond)
	}
	var sheds int
	a := &admission{fair: fair, idle: time.Minute, onShed: func(shed.Verdict) { sheds++ }}
	const perRun = 100
	c, fc := feedAdmitConn(a, 0)
	buf := make([]byte, 4096)
	allocs := testing.AllocsPerRun(20, func() {
		fc.n = perRun
		if n, err := c.Read(buf); n != 0 || err != io.EOF {
			t.Fatalf("Read: %d bytes, %v; want every request refused, then EOF", n, err)
		}
	})
	if sheds < 20*perRun {
		t.Fatalf("%d requests refused, want at least %d", sheds, 20*perRun)
	}
	if allocs/perRun > 0.05 {
		t.Fatalf("%.2f allocations per refused request, want none", allocs/perRun)
	}
	fair.Release(&running)
	<-waiting
}

// servedAndOther takes addr's one connection for 127.0.0.1 (served, held
// open until the end of the test) and returns dialers from 127.0.0.1 and
// from 127.0.0.2, another client.
func servedAndOther(t *testing.T, addr string) (local, other *net.Dialer) {
	t.Helper()
	local = &net.Dialer{Timeout: 5 * time.Second}
	st, _, held := getOnce(t, local, addr)
	t.Cleanup(func() { held.Close() })
	if st != 200 {
		t.Fatalf("first connection: status %d", st)
	}
	other = &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	if c, err := other.Dial("tcp", addr); err != nil {
		t.Skipf("cannot connect from 127.0.0.2 (needs a Linux loopback that routes 127/8): %v", err)
	} else {
		c.Close()
	}
	return local, other
}
