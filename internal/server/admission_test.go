package server

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/shed"
)

// FuzzFrameRequest: framing never panics, and a request it frames that
// the HTTP server also parses has exactly the size the server reads.
func FuzzFrameRequest(f *testing.F) {
	for _, s := range []string{
		"POST /counters/a/increment HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\n{\"delta\": 1}",
		"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\ncontent-length: 3\r\nConnection: close\r\n\r\nabc",
		"GET / HTTP/1.0\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
		"HEAD / HTTP/1.1\r\n\r\n",
		"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, ok := frameRequest(b)
		if !ok {
			return
		}
		end := bytes.Index(b, crlfcrlf) + 4
		if fr.total < end {
			t.Fatalf("framed %d bytes, less than the head's %d", fr.total, end)
		}
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(b[:end])))
		if err != nil {
			return // the server answers it 400; shedding it is harmless
		}
		if req.ContentLength < 0 || int64(end)+req.ContentLength != int64(fr.total) {
			t.Fatalf("framed %d bytes; the server reads a %d-byte head and a %d-byte body", fr.total, end, req.ContentLength)
		}
		if req.Method == "HEAD" || req.ProtoMinor != 1 {
			t.Fatalf("framed a %s %s request", req.Method, req.Proto)
		}
	})
}

// admissionServer serves a handler behind a limit listener and
// admission with one slot, a queue of one per client and no pacing.
func admissionServer(t *testing.T, h http.Handler) (addr string, passed *atomic.Int64) {
	t.Helper()
	passed = new(atomic.Int64)
	a := &admission{
		fair:   shed.NewFair(shed.FairConfig{MaxLimit: 1, MinLimit: 1, MaxClientQueue: 1, MaxWait: 10 * time.Second}),
		idle:   time.Minute,
		onPass: func() { passed.Add(1) },
	}
	return serveAdmission(t, a, h), passed
}

// serveAdmission serves h on a loopback listener behind a, until the
// test ends, and returns the address.
func serveAdmission(t *testing.T, a *admission, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ConnContext: a.connContext}
	go hs.Serve(a.wrap(newLimitListener(ln, 100, nil, nil, rejectHTTP, nil)))
	t.Cleanup(func() { hs.Close() })
	return ln.Addr().String()
}

type wireConn struct {
	t  *testing.T
	c  net.Conn
	rd *bufio.Reader
}

func dialFrom(t *testing.T, addr, from string) *wireConn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Skipf("cannot connect from %s (needs a Linux loopback that routes 127/8): %v", from, err)
	}
	t.Cleanup(func() { c.Close() })
	return &wireConn{t: t, c: c, rd: bufio.NewReader(c)}
}

func (w *wireConn) send(req string) {
	w.t.Helper()
	if _, err := w.c.Write([]byte(req)); err != nil {
		w.t.Fatal(err)
	}
}

func (w *wireConn) answer() *http.Response {
	w.t.Helper()
	w.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(w.rd, nil)
	if err != nil {
		w.t.Fatalf("reading the answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp
}

func post(path string, extra ...string) string {
	return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" + strings.Join(extra, "") + "Content-Length: 11\r\n\r\n{\"delta\":1}"
}

// TestAdmissionWire: with the one slot busy, a client's request beyond
// its queue is answered 429 with Retry-After before the HTTP server sees
// it, on a connection that stays usable; health checks are never shed;
// another client's request queues beside the flooding one and both are
// served once the slot is free; Connection: close is honoured; a chunked
// request passes through to the server.
func TestAdmissionWire(t *testing.T) {
	var calls atomic.Int64
	entered, unblock := make(chan struct{}), make(chan struct{})
	addr, passed := admissionServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/block" {
			entered <- struct{}{}
			<-unblock
		}
		w.Write([]byte("ok " + r.URL.Path))
	}))
	holder := dialFrom(t, addr, "")
	holder.send(post("/block"))
	<-entered // the only slot is taken

	queuedA := dialFrom(t, addr, "127.0.0.1")
	queuedA.send(post("/a"))
	queuedB := dialFrom(t, addr, "127.0.0.2")
	queuedB.send(post("/b"))
	time.Sleep(50 * time.Millisecond) // let both reach their queues (nothing observable)

	shedC := dialFrom(t, addr, "127.0.0.1")
	before := calls.Load()
	for i := 0; i < 3; i++ { // each one on the same, kept-alive connection
		shedC.send(post("/c"))
		resp := shedC.answer()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(body), `"too_many_requests"`) || resp.Close {
			t.Fatalf("over the client's queue: %d %v %s", resp.StatusCode, resp.Header, body)
		}
	}
	shedC.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	if resp := shedC.answer(); resp.StatusCode != 200 {
		t.Fatalf("GET /healthz while overloaded: %d", resp.StatusCode)
	}
	closer := dialFrom(t, addr, "127.0.0.1")
	closer.send(post("/d", "Connection: close\r\n"))
	if resp := closer.answer(); resp.StatusCode != 429 || !resp.Close {
		t.Fatalf("shed with Connection: close: %d close=%v", resp.StatusCode, resp.Close)
	}
	closer.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := closer.rd.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("after a shed Connection: close: read %d, %v; want EOF", n, err)
	}
	if got := calls.Load() - before; got != 1 { // /healthz only
		t.Fatalf("the HTTP server handled %d requests while they were shed before it", got)
	}

	close(unblock)
	if resp := holder.answer(); resp.StatusCode != 200 {
		t.Fatalf("holder: %d", resp.StatusCode)
	}
	for name, c := range map[string]*wireConn{"127.0.0.1": queuedA, "127.0.0.2": queuedB} {
		if resp := c.answer(); resp.StatusCode != 200 {
			t.Fatalf("queued request of %s: %d", name, resp.StatusCode)
		}
	}

	chunked := dialFrom(t, addr, "")
	chunked.send("POST /e HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n")
	if resp := chunked.answer(); resp.StatusCode != 200 || passed.Load() != 1 {
		t.Fatalf("chunked request: %d, %d connections passed through", resp.StatusCode, passed.Load())
	}
	// A body that arrives in a later read than its head is framed too.
	split := dialFrom(t, addr, "")
	req := post("/f")
	split.send(req[:len(req)-5])
	time.Sleep(20 * time.Millisecond)
	split.send(req[len(req)-5:])
	if resp := split.answer(); resp.StatusCode != 200 {
		t.Fatalf("split body: %d", resp.StatusCode)
	}
	split.send(post("/g"))
	if resp := split.answer(); resp.StatusCode != 200 || passed.Load() != 1 {
		t.Fatalf("after a split body: %d, %d connections passed through", resp.StatusCode, passed.Load())
	}
}

// TestAdmissionIOWaitFreesSlot: a request whose handler waits on I/O
// (shed.IOWait, as a sync write's fsync does) gives the only slot to the
// next request, of any client, for the length of the wait; an
// overloaded node still answers 503.
func TestAdmissionIOWaitFreesSlot(t *testing.T) {
	entered, unblock := make(chan struct{}), make(chan struct{})
	addr, _ := admissionServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/fsync":
			p := shed.IOWait(r.Context())
			if p == nil {
				t.Error("an admitted request's context carries no slot to park")
			}
			entered <- struct{}{}
			<-unblock
			p.Resume()
		case "/cpu":
			entered <- struct{}{}
			<-unblock
		}
		w.Write([]byte("ok " + r.URL.Path))
	}))
	syncW := dialFrom(t, addr, "")
	syncW.send(post("/fsync"))
	<-entered // parked in its I/O wait
	for i := 0; i < 3; i++ {
		other := dialFrom(t, addr, "")
		other.send(post("/x"))
		if resp := other.answer(); resp.StatusCode != 200 {
			t.Fatalf("request %d while the slot's holder waits on I/O: %d", i, resp.StatusCode)
		}
	}
	// A request that holds the slot without parking makes the next wait.
	cpu := dialFrom(t, addr, "")
	cpu.send(post("/cpu"))
	<-entered
	waiting := dialFrom(t, addr, "")
	waiting.send(post("/y"))
	waiting.c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := waiting.rd.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("a request was answered while the only slot ran a request that does not wait on I/O (read %d, %v)", n, err)
	}
	close(unblock) // both finish, then the waiting one runs
	for _, c := range []*wireConn{syncW, cpu, waiting} {
		if resp := c.answer(); resp.StatusCode != 200 {
			t.Fatalf("after the wait: %d", resp.StatusCode)
		}
	}
}
