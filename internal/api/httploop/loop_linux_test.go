//go:build linux

package httploop

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/shed"
)

// testHandler answers like the API: JSON bodies, a status chosen by the
// path, a header of its own, bodies echoed, and answers that exercise
// net/http's framing (no Content-Type: sniffed; Connection: close set by
// the handler; 204; nothing written at all).
func testHandler(calls, mark *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		body, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/counters/echo/increment":
			w.Header().Set("Content-Type", "application/json")
			w.Header().Add("X-Multi", "a")
			w.Header().Add("X-Multi", "b")
			fmt.Fprintf(w, `{"method":%q,"uri":%q,"host":%q,"len":%d,"body":%q,"ua":%q,"close":%v}`+"\n",
				r.Method, r.RequestURI, r.Host, r.ContentLength, body, r.Header.Get("User-Agent"), r.Close)
		case "/counters/sniff":
			w.Write([]byte("<html>hello</html>"))
		case "/counters/close/increment":
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusTooManyRequests)
			w.Write([]byte(`{"status":"error"}`))
		case "/counters/nocontent":
			mark.Store(calls.Load())
			w.WriteHeader(http.StatusNoContent)
		case "/counters/nothing":
		case "/counters/teapot":
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(418)
			w.Write([]byte("short and stout\n"))
		default:
			http.Error(w, "not here", http.StatusNotFound)
		}
	})
}

type testFront struct {
	addr  string
	front *Front
	hs    *http.Server
	calls atomic.Int64
	mark  atomic.Int64 // calls when /counters/nocontent was last run
}

// startFront serves testHandler on a Front with one loop (loops: 0 for
// plain net/http) and returns its address.
func startFront(t *testing.T, loops int, edit func(*Options)) *testFront {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tf := &testFront{addr: ln.Addr().String()}
	h := testHandler(&tf.calls, &tf.mark)
	tf.hs = &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	o := Options{Loops: loops, Handler: h, Server: tf.hs, MaxBody: 1 << 16,
		TCPConn: func(c net.Conn) *net.TCPConn { tc, _ := c.(*net.TCPConn); return tc }}
	if edit != nil {
		edit(&o)
	}
	f, err := New(ln, o)
	if err != nil {
		t.Fatal(err)
	}
	tf.front = f
	go tf.hs.Serve(f)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		f.Shutdown(ctx)
		tf.hs.Shutdown(ctx)
	})
	return tf
}

// exchangeRaw writes raw to a new connection and reads n answers.
func exchangeRaw(t *testing.T, addr, raw string, n int) ([]*http.Response, [][]byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var rs []*http.Response
	var bodies [][]byte
	for i := 0; i < n; i++ {
		r, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer %d of %q: %v", i, raw, err)
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Fatal(err)
		}
		rs, bodies = append(rs, r), append(bodies, b)
	}
	return rs, bodies
}

// TestConformance sends the same bytes to net/http alone and to a
// loop, served and malformed requests alike, and requires the same
// status, headers (but Date) and body. The loop must have answered the
// served ones itself.
func TestConformance(t *testing.T) {
	plain := startFront(t, 0, nil)
	looped := startFront(t, 1, nil)
	const host = "Host: 127.0.0.1\r\n"
	for _, tc := range []struct {
		name, raw string
		answers   int
		served    bool // the loop answers every request itself
	}{
		{"echo", "POST /counters/echo/increment HTTP/1.1\r\n" + host + "User-Agent: t\r\nContent-Length: 11\r\n\r\n{\"delta\":1}", 1, true},
		{"echo query", "POST /counters/echo/increment?x=1&y HTTP/1.1\r\n" + host + "Content-Length: 0\r\n\r\n", 1, true},
		{"no body", "POST /counters/echo/increment HTTP/1.1\r\n" + host + "\r\n", 1, true},
		{"sniffed type", "GET /counters/sniff HTTP/1.1\r\n" + host + "\r\n", 1, true},
		{"handler closes", "POST /counters/close/increment HTTP/1.1\r\n" + host + "Content-Length: 0\r\n\r\n", 1, true},
		{"client closes", "POST /counters/echo/increment HTTP/1.1\r\n" + host + "Connection: close\r\nContent-Length: 0\r\n\r\n", 1, true},
		{"204", "GET /counters/nocontent HTTP/1.1\r\n" + host + "\r\n", 1, true},
		{"empty 200", "GET /counters/nothing HTTP/1.1\r\n" + host + "\r\n", 1, true},
		{"status without text", "GET /counters/teapot HTTP/1.1\r\n" + host + "\r\n", 1, true},
		{"404 error", "GET /counters/missing HTTP/1.1\r\n" + host + "\r\n", 1, true},
		{"pipelined", strings.Repeat("GET /counters/nothing HTTP/1.1\r\n"+host+"\r\n", 3), 3, true},
		{"not a hot route", "GET /other HTTP/1.1\r\n" + host + "\r\n", 1, false},
		{"chunked", "POST /counters/echo/increment HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 1, false},
		{"HTTP/1.0", "GET /counters/nothing HTTP/1.0\r\n\r\n", 1, false},
		{"no Host", "GET /counters/nothing HTTP/1.1\r\n\r\n", 1, false},
		{"bad Host", "GET /counters/nothing HTTP/1.1\r\nHost: a b\r\n\r\n", 1, false},
		{"bad Content-Length", "POST /counters/echo/increment HTTP/1.1\r\n" + host + "Content-Length: x\r\n\r\n", 1, false},
		{"two Content-Lengths", "POST /counters/echo/increment HTTP/1.1\r\n" + host + "Content-Length: 1\r\nContent-Length: 2\r\n\r\nab", 1, false},
		{"garbage", "GARBAGE\r\n\r\n", 1, false},
		{"bad header name", "GET /counters/nothing HTTP/1.1\r\n" + host + "Bad Name: x\r\n\r\n", 1, false},
		{"percent in path", "GET /counters/a%20b HTTP/1.1\r\n" + host + "\r\n", 1, false},
		{"dot segment", "GET /counters/../x HTTP/1.1\r\n" + host + "\r\n", 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, hb := looped.front.Served(), looped.front.HandedOver()
			want, wantBodies := exchangeRaw(t, plain.addr, tc.raw, tc.answers)
			got, gotBodies := exchangeRaw(t, looped.addr, tc.raw, tc.answers)
			for i := range want {
				if got[i].StatusCode != want[i].StatusCode {
					t.Errorf("answer %d: status %d, net/http %d", i, got[i].StatusCode, want[i].StatusCode)
				}
				if !bytes.Equal(gotBodies[i], wantBodies[i]) {
					t.Errorf("answer %d: body %q, net/http %q", i, gotBodies[i], wantBodies[i])
				}
				got[i].Header.Del("Date")
				want[i].Header.Del("Date")
				if fmt.Sprint(got[i].Header) != fmt.Sprint(want[i].Header) {
					t.Errorf("answer %d: headers %v, net/http %v", i, got[i].Header, want[i].Header)
				}
				if got[i].Close != want[i].Close || got[i].ContentLength != want[i].ContentLength {
					t.Errorf("answer %d: close %v length %d, net/http %v %d", i, got[i].Close, got[i].ContentLength, want[i].Close, want[i].ContentLength)
				}
			}
			served := looped.front.Served() - before
			if tc.served && served != int64(tc.answers) {
				t.Errorf("the loop answered %d of %d", served, tc.answers)
			}
			if !tc.served && (served != 0 || looped.front.HandedOver() == hb) {
				t.Errorf("not handed over: %d answered on the loop", served)
			}
		})
	}
}

// TestKeepAlivePipelining: requests written in one go, and one at a time
// on the same connection, are answered in order on the loop, and the
// connection stays open between them.
func TestKeepAlivePipelining(t *testing.T) {
	tf := startFront(t, 1, nil)
	c, err := net.Dial("tcp", tf.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	req := func(i int) string {
		b := fmt.Sprintf(`{"n":%d}`, i)
		return fmt.Sprintf("POST /counters/echo/increment HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(b), b)
	}
	var all strings.Builder
	for i := 0; i < 50; i++ {
		all.WriteString(req(i))
	}
	// Pipelined, and split at an awkward place (inside a body).
	raw := all.String()
	io.WriteString(c, raw[:len(raw)/2+3])
	time.Sleep(20 * time.Millisecond)
	io.WriteString(c, raw[len(raw)/2+3:])
	for i := 0; i < 50; i++ {
		r, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		b, _ := io.ReadAll(r.Body)
		if want := fmt.Sprintf(`\"n\":%d}`, i); !strings.Contains(string(b), want) {
			t.Fatalf("answer %d out of order: %s", i, b)
		}
	}
	// Keep-alive: one at a time.
	for i := 0; i < 5; i++ {
		io.WriteString(c, req(100+i))
		r, err := http.ReadResponse(br, nil)
		if err != nil || r.Close {
			t.Fatalf("keep-alive answer %d: %v close=%v", i, err, r != nil && r.Close)
		}
		io.Copy(io.Discard, r.Body)
	}
	if got := tf.front.Served(); got != 55 {
		t.Fatalf("loop answered %d requests, want 55", got)
	}
	if tf.front.HandedOver() != 0 {
		t.Fatal("handed over")
	}
}

// TestHandOver: on one connection, a request the loop serves, then one
// it does not (the HTTP server answers it with the bytes the loop read:
// both requests arrive in one write), then a served route again (now the
// HTTP server's); and a connection that starts with a request the loop
// does not serve, then a served one.
func TestHandOver(t *testing.T) {
	tf := startFront(t, 1, nil)
	served := "POST /counters/echo/increment HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
	other := "GET /other HTTP/1.1\r\nHost: x\r\n\r\n"
	chunked := "POST /counters/echo/increment HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
	for _, seq := range [][]string{{served, other, served}, {other, served}, {chunked, served}, {served, chunked, served}} {
		rs, bodies := exchangeRaw(t, tf.addr, strings.Join(seq, ""), len(seq))
		for i, r := range rs {
			want := http.StatusOK
			if seq[i] == other {
				want = http.StatusNotFound
			}
			if r.StatusCode != want {
				t.Fatalf("%q: answer %d: %d %s", seq, i, r.StatusCode, bodies[i])
			}
			if seq[i] != other && !bytes.Contains(bodies[i], []byte(`"body":"{}"`)) {
				t.Fatalf("%q: answer %d: %s", seq, i, bodies[i])
			}
		}
	}
	if tf.front.HandedOver() != 4 {
		t.Fatalf("handed over %d connections, want 4", tf.front.HandedOver())
	}
	if tf.front.Served() != 2 {
		t.Fatalf("loop answered %d, want 2 (the first request of two connections)", tf.front.Served())
	}
}

// TestShutdownDrains: Shutdown answers a request whose bytes are still
// arriving (with Connection: close), closes idle connections, and
// returns once the loop has none.
func TestShutdownDrains(t *testing.T) {
	tf := startFront(t, 1, nil)
	idle, err := net.Dial("tcp", tf.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	busy, err := net.Dial("tcp", tf.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busy.SetDeadline(time.Now().Add(10 * time.Second))
	idle.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(busy, "POST /counters/echo/increment HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\n{}")
	l := tf.front.loops[0]
	waitFor(t, func() bool {
		partial := 0
		onLoop(t, l, func() {
			for _, c := range l.conns {
				if c.r < c.w {
					partial++
				}
			}
		})
		return l.connsOnLoop() == 2 && partial == 1
	})
	done := make(chan error, 1)
	go func() { done <- tf.front.Shutdown(context.Background()) }()
	// The idle connection is closed.
	if n, err := idle.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("idle connection: read %d, %v; want EOF", n, err)
	}
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned (%v) while a request was in progress", err)
	case <-time.After(50 * time.Millisecond):
	}
	io.WriteString(busy, "{}")
	br := bufio.NewReader(busy)
	r, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.StatusCode != 200 || !r.Close {
		t.Fatalf("answer during shutdown: %d close=%v", r.StatusCode, r.Close)
	}
	if b, _ := io.ReadAll(r.Body); !bytes.Contains(b, []byte(`"body":"{}{}"`)) {
		t.Fatalf("answer during shutdown: %s", b)
	}
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("connection still open after its answer")
	}
}

// TestFairBetweenClients: a client with many connections, each with a
// pipelined batch, is read at most its budget per round, so another
// client's request is answered in the first rounds, before the flood's
// backlog is worked off.
func TestFairBetweenClients(t *testing.T) {
	tf := startFront(t, 1, nil)
	const conns, depth = 40, 50
	req := "GET /counters/nothing HTTP/1.1\r\nHost: x\r\n\r\n"
	batch := strings.Repeat(req, depth)
	flood, other := floodAndOther(t, tf, conns)
	// Hold the loop while every byte arrives, so that one round sees it all.
	var before int64
	onLoop(t, tf.front.loops[0], func() {
		for _, c := range flood {
			io.WriteString(c, batch)
		}
		io.WriteString(other, "GET /counters/nocontent HTTP/1.1\r\nHost: x\r\n\r\n")
		time.Sleep(50 * time.Millisecond) // loopback delivery
		before = tf.calls.Load()
	})
	other.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := http.ReadResponse(bufio.NewReader(other), nil); err != nil {
		t.Fatal(err)
	}
	// Answered after at most two rounds of the flood's budget (the
	// flood's first connections may come first in the round).
	if n := tf.mark.Load() - before - 1; n > 2*loopClientBudget+depth {
		t.Fatalf("the other client waited for %d requests of the flood (budget %d a round)", n, loopClientBudget)
	}
	for _, c := range flood {
		c.SetDeadline(time.Now().Add(20 * time.Second))
		br := bufio.NewReader(c)
		for i := 0; i < depth; i++ {
			r, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("flood answer %d: %v", i, err)
			}
			io.Copy(io.Discard, r.Body)
		}
	}
}

// onLoop runs f while the loop is held between rounds (its state may be
// read then).
func onLoop(t *testing.T, l *loop, f func()) {
	t.Helper()
	hold := make(chan struct{})
	l.mu.Lock()
	l.hold = hold
	l.mu.Unlock()
	l.p.Wake()
	waitFor(t, func() bool { l.mu.Lock(); defer l.mu.Unlock(); return l.holding })
	defer close(hold)
	f()
}

func waitFor(t *testing.T, f func() bool) {
	t.Helper()
	for i := 0; i < 500; i++ {
		if f() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("condition not reached")
}

// TestShedAndPace: a request of a client with
// more connections than its share of the queue that waited MaxWait in its
// socket is answered the shed answer, and its connection is left unread
// for the pause Pace gives (its next request waits in the socket, then is
// answered); a client with one connection is served all the same.
func TestShedAndPace(t *testing.T) {
	fair := shed.NewFair(shed.FairConfig{MaxClientQueue: 1, MaxWait: time.Nanosecond})
	shedAnswer := []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 1\r\n\r\n")
	var paces atomic.Int64
	tf := startFront(t, 1, func(o *Options) {
		o.Fair = fair
		o.ShedAnswer = func(shed.Verdict, bool) []byte { return shedAnswer }
		o.Pace = func(shed.Key) time.Duration { paces.Add(1); return 100 * time.Millisecond }
	})
	var flood []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", tf.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		flood = append(flood, c)
	}
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	other, err := d.Dial("tcp", tf.addr)
	if err != nil {
		t.Skipf("127.0.0.2 not usable: %v", err)
	}
	defer other.Close()
	other.SetDeadline(time.Now().Add(10 * time.Second))
	l := tf.front.loops[0]
	waitFor(t, func() bool { return l.connsOnLoop() == 3 })
	req := "GET /counters/nothing HTTP/1.1\r\nHost: x\r\n\r\n"
	br := bufio.NewReader(flood[0])
	io.WriteString(flood[0], req)
	r, err := http.ReadResponse(br, nil)
	if err != nil || r.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("flood request: %v %v", r, err)
	}
	paused := false
	onLoop(t, l, func() {
		for _, c := range l.paused {
			paused = paused || (c.pauseEnd != 0 && l.conns[c.fd] == c)
		}
	})
	if !paused || paces.Load() != 1 {
		t.Fatalf("shed connection not paused (%d paces)", paces.Load())
	}
	io.WriteString(flood[0], req) // read once the pause ends
	if r, err := http.ReadResponse(br, nil); err != nil || r.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("request sent during the pause: %v %v", r, err)
	}
	io.WriteString(other, req)
	if r, err := http.ReadResponse(bufio.NewReader(other), nil); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("a client within its share: %v %v", r, err)
	}
	if tf.front.Shed() != 2 {
		t.Fatalf("%d shed, want 2", tf.front.Shed())
	}
}

// TestReadBodyTimeout: a connection that sends a whole head and then
// trickles its body is closed once ReadBodyTimeout has passed since its
// head (the HTTP server's body deadline), long before ReadHeaderTimeout;
// a request whose body comes whole is served, and the connection's next
// request is not cut by the earlier body's wait.
func TestReadBodyTimeout(t *testing.T) {
	tf := startFront(t, 1, func(o *Options) {
		o.ReadHeaderTimeout = time.Minute
		o.ReadBodyTimeout = time.Second
	})
	c, err := net.Dial("tcp", tf.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST /counters/echo/increment HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("trickling body: read %d, %v; want the connection closed (EOF)", n, err)
	}
	// A body that takes a while but less than the timeout in two parts,
	// twice on one connection: both served.
	c2, err := net.Dial("tcp", tf.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c2)
	for i := 0; i < 2; i++ {
		io.WriteString(c2, "POST /counters/echo/increment HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{")
		time.Sleep(600 * time.Millisecond)
		io.WriteString(c2, "}")
		r, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		b, _ := io.ReadAll(r.Body)
		if r.StatusCode != 200 || !bytes.Contains(b, []byte(`"body":"{}"`)) {
			t.Fatalf("request %d: %d %s", i, r.StatusCode, b)
		}
	}
	if tf.front.Served() != 2 {
		t.Fatalf("loop answered %d, want 2", tf.front.Served())
	}
}

// TestAdmissionQueue: requests on a loop take the Fair's slots as the
// HTTP server's do. With the only slot held elsewhere (a request on the
// HTTP server), a loop request waits in the Fair's queue, unanswered,
// and is served once that slot is released; a flood of one client on
// more connections than the queue holds is refused beyond it (the
// Fair's causes counted) while another client's request is served; and
// every slot is given back.
func TestAdmissionQueue(t *testing.T) {
	fair := shed.NewFair(shed.FairConfig{MaxLimit: 1, MinLimit: 1, MaxQueue: 2, MaxClientQueue: 1, MaxWait: time.Minute})
	shedAnswer := []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 1\r\n\r\n")
	var onShed atomic.Int64
	tf := startFront(t, 1, func(o *Options) {
		o.Fair = fair
		o.ShedAnswer = func(shed.Verdict, bool) []byte { return shedAnswer }
		o.OnShed = func(shed.Verdict) { onShed.Add(1) }
	})
	l := tf.front.loops[0]
	dial := func(ip net.IP) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}}
		c, err := d.Dial("tcp", tf.addr)
		if err != nil {
			t.Skipf("%v not usable: %v", ip, err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(20 * time.Second))
		return c
	}
	req := "GET /counters/nothing HTTP/1.1\r\nHost: x\r\n\r\n"

	// The only slot is held by a request elsewhere.
	var elsewhere shed.Ticket
	if fair.Acquire(&elsewhere, shed.ClientKey(netip.MustParseAddr("10.9.9.9")), 0) != shed.Admitted {
		t.Fatal("slot not taken")
	}
	one := dial(net.IPv4(127, 0, 0, 2))
	waitFor(t, func() bool { return l.connsOnLoop() == 1 })
	io.WriteString(one, req)
	waitFor(t, func() bool { return fair.Queued() == 1 })
	if tf.calls.Load() != 0 {
		t.Fatal("request run without a slot")
	}
	fair.Release(&elsewhere)
	if r, err := http.ReadResponse(bufio.NewReader(one), nil); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("queued request after the release: %v %v", r, err)
	}
	waitFor(t, func() bool { return fair.Running() == 0 })

	// A flood on 6 connections, one request each, and another client's
	// request, all read in one round: one runs, two queue (the other
	// client's among them, pushing out the flood's), the rest are shed.
	var flood []net.Conn
	for i := 0; i < 6; i++ {
		flood = append(flood, dial(net.IPv4(127, 0, 0, 1)))
	}
	other := dial(net.IPv4(127, 0, 0, 3))
	waitFor(t, func() bool { return l.connsOnLoop() == 8 })
	onLoop(t, l, func() {
		for _, c := range flood {
			io.WriteString(c, req)
		}
		io.WriteString(other, req)
		time.Sleep(50 * time.Millisecond) // loopback delivery
	})
	if r, err := http.ReadResponse(bufio.NewReader(other), nil); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("the other client: %v %v", r, err)
	}
	ok, refused := 0, 0
	for _, c := range flood {
		r, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		switch r.StatusCode {
		case http.StatusOK:
			ok++
		case http.StatusServiceUnavailable:
			refused++
		default:
			t.Fatalf("flood: %d", r.StatusCode)
		}
	}
	if ok == 0 || refused < 3 || int64(refused) != onShed.Load() || fair.Shed() != uint64(refused) {
		t.Fatalf("flood: %d served, %d refused; %d counted, the Fair shed %d", ok, refused, onShed.Load(), fair.Shed())
	}
	waitFor(t, func() bool { return fair.Running() == 0 && fair.Queued() == 0 })
}

// TestFloodWaitsItsTurn: a flooding client (more connections than its
// share of the queue) is read for at most loopFloodBudget requests a
// round; its other connections with input wait unpolled for their turn,
// so that they do not fill every epoll_wait: another client's request,
// arriving behind 256 of the flood's, is answered after at most a few
// budgets of them, and every flood request is answered in the end.
func TestFloodWaitsItsTurn(t *testing.T) {
	fair := shed.NewFair(shed.FairConfig{MaxLimit: 4096, MinLimit: 4096, MaxQueue: 4096, MaxClientQueue: 4, MaxWait: time.Minute})
	tf := startFront(t, 1, func(o *Options) {
		o.Fair = fair
		o.ShedAnswer = func(shed.Verdict, bool) []byte {
			return []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
		}
	})
	const conns = 256
	flood, other := floodAndOther(t, tf, conns)
	l := tf.front.loops[0]
	var before int64
	onLoop(t, l, func() {
		for _, c := range flood {
			io.WriteString(c, "GET /counters/nothing HTTP/1.1\r\nHost: x\r\n\r\n")
		}
		io.WriteString(other, "GET /counters/nocontent HTTP/1.1\r\nHost: x\r\n\r\n")
		time.Sleep(50 * time.Millisecond) // loopback delivery
		before = tf.calls.Load()
	})
	other.SetDeadline(time.Now().Add(10 * time.Second))
	if r, err := http.ReadResponse(bufio.NewReader(other), nil); err != nil || r.StatusCode != http.StatusNoContent {
		t.Fatalf("the other client: %v %v", r, err)
	}
	// The first pass over the ready list takes ceil(257/loopEvents)
	// waits, each reading one budget of the flood.
	if n := tf.mark.Load() - before - 1; n > 4*loopFloodBudget {
		t.Fatalf("the other client waited for %d requests of the flood (budget %d a round)", n, loopFloodBudget)
	}
	for i, c := range flood {
		c.SetDeadline(time.Now().Add(20 * time.Second))
		if r, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || r.StatusCode != http.StatusOK {
			t.Fatalf("flood request %d: %v %v", i, r, err)
		}
	}
}

// floodAndOther connects n flood connections from 127.0.0.1 and one of
// another client from 127.0.0.2 (skipping the test when that address is
// not usable) to tf's single loop, and waits until the loop holds them
// all; they are closed when the test ends.
func floodAndOther(t *testing.T, tf *testFront, n int) (flood []net.Conn, other net.Conn) {
	t.Helper()
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", tf.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		flood = append(flood, c)
	}
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	other, err := d.Dial("tcp", tf.addr)
	if err != nil {
		t.Skipf("127.0.0.2 not usable: %v", err)
	}
	t.Cleanup(func() { other.Close() })
	waitFor(t, func() bool { return tf.front.loops[0].connsOnLoop() == n+1 })
	return flood, other
}

// stalePause sets up a connection (one client, no flood) paused after
// a refusal with another client's request sent during that pause: the
// only slot is held (elsewhere) and another client's request waits in
// the full queue (queued), so the first request is refused (queue full)
// and its connection paused for 4 x maxWait; the second is sent during
// the pause.
type stalePause struct {
	fair      *shed.Fair
	l         *loop
	c         net.Conn
	br        *bufio.Reader
	elsewhere shed.Ticket
	queued    *shed.Pending
	latency   atomic.Int64
}

const (
	stalePauseWait = 50 * time.Millisecond
	stalePauseReq  = "GET /counters/nothing HTTP/1.1\r\nHost: x\r\n\r\n"
)

func newStalePause(t *testing.T) *stalePause {
	t.Helper()
	sp := &stalePause{fair: shed.NewFair(shed.FairConfig{MaxLimit: 1, MinLimit: 1, MaxQueue: 1, MaxClientQueue: 1, MaxWait: stalePauseWait})}
	tf := startFront(t, 1, func(o *Options) {
		o.Fair = sp.fair
		o.ShedAnswer = func(shed.Verdict, bool) []byte {
			return []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 1\r\n\r\n")
		}
		o.Pace = func(shed.Key) time.Duration { return 4 * stalePauseWait }
		o.Latency = func(d time.Duration, _ bool) { sp.latency.Store(int64(d)) }
	})
	sp.l = tf.front.loops[0]
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	c, err := d.Dial("tcp", tf.addr)
	if err != nil {
		t.Skipf("127.0.0.2 not usable: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(5 * time.Second))
	sp.c, sp.br = c, bufio.NewReader(c)
	waitFor(t, func() bool { return sp.l.connsOnLoop() == 1 })
	sp.fair.Acquire(&sp.elsewhere, shed.ClientKey(netip.MustParseAddr("10.9.9.9")), 0)
	var queued shed.Ticket
	if _, sp.queued = sp.fair.AcquireAsync(&queued, shed.ClientKey(netip.MustParseAddr("10.9.9.8")), 0, false, func() {}); sp.queued == nil {
		t.Fatal("not queued")
	}
	io.WriteString(c, stalePauseReq)
	if r, err := http.ReadResponse(sp.br, nil); err != nil || r.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("with the queue full: %v %v", r, err)
	}
	io.WriteString(c, stalePauseReq) // during the pause
	return sp
}

// answerStale reads the answer to the request sent during the pause:
// a 503, counted as stale (the n-th).
func (sp *stalePause) answerStale(t *testing.T, n uint64) {
	t.Helper()
	sp.c.SetReadDeadline(time.Now().Add(2 * time.Second))
	r, err := http.ReadResponse(sp.br, nil)
	sp.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if err == nil && r.StatusCode == http.StatusOK && time.Duration(sp.latency.Load()) < stalePauseWait {
		t.Skipf("no receive time from the kernel for the request sent during the pause (latency %v)", time.Duration(sp.latency.Load()))
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() && sp.fair.Queued() == 1 && sp.fair.ShedBy(shed.CauseStale) == n-1 {
		// Read with no receive time from the kernel (the read's time
		// instead): not stale, it waits for the slot still held.
		t.Skip("no receive time from the kernel for the request sent during the pause (queued for the held slot)")
	}
	if err != nil || r.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a request sent during the pause: %v %v (want 503)", r, err)
	}
	if got := sp.fair.ShedBy(shed.CauseStale); got != n {
		t.Fatalf("%d shed as stale, want %d", got, n)
	}
}

// TestStaleAfterPause: a request sent during its connection's pause
// after a shed answer (Options.Pace), read once the pause ends having
// waited MaxWait, is refused as stale though its client is no flood (one
// connection) and a slot is free by then, as on the HTTP server
// (shed.Fair.Stale); but with the slot free the connection is not
// paused again for that refusal: its next request, sent at once after
// the answer, is served. (Paused again, that request would be sent
// during the new pause and refused as stale in turn, and so on: a
// flood's connections refused only for their pauses while the slots
// stood free.)
func TestStaleAfterPause(t *testing.T) {
	sp := newStalePause(t)
	sp.queued.Cancel()
	sp.fair.Release(&sp.elsewhere) // a slot free long before the pause ends
	sp.answerStale(t, 1)
	io.WriteString(sp.c, stalePauseReq)
	if r, err := http.ReadResponse(sp.br, nil); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("the request sent right after the stale refusal: %v %v (want 200, not paused again)", r, err)
	}
	if got := sp.fair.ShedBy(shed.CauseStale); got != 1 {
		t.Fatalf("%d shed as stale, want 1", got)
	}
}

// TestStaleAfterPauseBusy: the same refusal while the node has no slot
// free pauses the connection again, as any refusal of a client refused
// too often: its client's excess costs one refusal a pause.
func TestStaleAfterPauseBusy(t *testing.T) {
	sp := newStalePause(t)
	sp.queued.Cancel() // the only slot stays held
	sp.answerStale(t, 1)
	paused := func() bool {
		found := false
		onLoop(t, sp.l, func() {
			for _, c := range sp.l.paused {
				found = found || (c.pauseEnd != 0 && sp.l.conns[c.fd] == c)
			}
		})
		return found
	}
	waitFor(t, paused)
	io.WriteString(sp.c, stalePauseReq) // during the new pause
	sp.fair.Release(&sp.elsewhere)
	sp.answerStale(t, 2)
}
