package server

import (
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/counterd/counterd/internal/shed"
)

// histSamples returns the count and sum of h's series with waited_turn.
func histSamples(t *testing.T, h *prometheus.HistogramVec, waitedTurn string) (uint64, float64) {
	t.Helper()
	var d dto.Metric
	if err := h.WithLabelValues(waitedTurn).(prometheus.Histogram).Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetHistogram().GetSampleCount(), d.GetHistogram().GetSampleSum()
}

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// waitRxStamps waits until the kernel stamps received TCP segments (it
// turns timestamps on system-wide lazily, after the first socket asks),
// skipping the test if it never does.
func waitRxStamps(t *testing.T) {
	t.Helper()
	client, server := tcpPair(t)
	r := newRxReader(server)
	if r == nil {
		t.Skip("no receive timestamps on this kernel")
	}
	buf := make([]byte, 16)
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		client.Write([]byte{1})
		if _, at, err := r.read(buf); err != nil {
			t.Fatal(err)
		} else if !at.IsZero() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Skip("the kernel gives no receive times for TCP segments")
}

// TestAdmittedLatencyCountsSocketWait: an admitted request's latency
// counts from the kernel's receive time of its bytes, so the time it sat
// in its socket before the server read it is included; it is observed
// once, when the server reads the connection again (its answer written),
// not before; a request shed in front of the server is not observed.
func TestAdmittedLatencyCountsSocketWait(t *testing.T) {
	waitRxStamps(t)
	client, server := tcpPair(t)
	rx := newRxReader(server)
	fair := shed.NewFair(shed.FairConfig{MaxLimit: 1, MinLimit: 1, MaxQueue: 1, MaxClientQueue: 1, MaxWait: 10 * time.Second})
	hist := newAdmittedLatency()
	var sheds int
	a := &admission{fair: fair, idle: time.Minute, latency: latencyObservers(hist), onShed: func(shed.Verdict) { sheds++ }}
	c := &admitConn{Conn: server, a: a, key: shed.ClientKey(netip.MustParseAddr("127.0.0.1")), rx: rx}

	const held = 150 * time.Millisecond
	req := post("/a")
	if _, err := client.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(held) // the server does not read it yet: it waits in the socket
	buf := make([]byte, 4096)
	if n, err := c.Read(buf); n != len(req) || err != nil {
		t.Fatalf("Read: %d, %v; want the %d-byte request", n, err, len(req))
	}
	if !c.ticket.Holding() {
		t.Fatal("the request was not admitted")
	}
	if n, _ := histSamples(t, hist, "false"); n != 0 {
		t.Fatalf("observed %d requests before the answer was written", n)
	}

	// The slot is taken and another client waits for it: the next
	// request is refused on the spot, and not observed.
	queued := make(chan struct{})
	go func() {
		var tk shed.Ticket
		if fair.Acquire(&tk, shed.ClientKey(netip.MustParseAddr("192.0.2.2")), 0) == shed.Admitted {
			fair.Release(&tk)
		}
		close(queued)
	}()
	waitFor(t, func() bool { return fair.Queued() == 1 })
	fc := &feedConn{req: []byte(post("/b")), n: 1}
	shedConn := &admitConn{Conn: fc, a: a, key: shed.ClientKey(netip.MustParseAddr("127.0.0.9"))}
	if n, err := shedConn.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("Read of a request to refuse: %d, %v", n, err)
	}
	if sheds != 1 {
		t.Fatalf("%d requests refused, want 1", sheds)
	}
	shedConn.Close()
	if n, _ := histSamples(t, hist, "false"); n != 0 {
		t.Fatalf("observed %d requests after a refusal; want none (the admitted one is not answered yet)", n)
	}

	// The server reads the connection again: the answer is written.
	server.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if n, err := c.Read(buf); n != 0 || err == nil {
		t.Fatalf("Read with nothing sent: %d, %v", n, err)
	}
	n, sum := histSamples(t, hist, "false")
	if n != 1 || sum < held.Seconds() || sum > 5 {
		t.Fatalf("observed %d requests taking %.3fs; want 1 of at least its %v in the socket", n, sum, held)
	}
	if n, _ := histSamples(t, hist, "true"); n != 0 {
		t.Fatalf("%d requests observed as waiting for their client's turn", n)
	}
	<-queued // the slot was released with the observation
	c.Close()
	if n, _ := histSamples(t, hist, "false"); n != 1 {
		t.Fatalf("Close observed the answered request again: %d", n)
	}
}

// TestAdmittedLatencyWire: on a real HTTP server, every admitted request
// is observed once its answer is written, kept-alive ones when the server
// reads the next request, a Connection: close one when it closes the
// connection; GET /metrics (never shed) is not.
func TestAdmittedLatencyWire(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hist := newAdmittedLatency()
	a := &admission{
		fair:    shed.NewFair(shed.FairConfig{MaxLimit: 4, MinLimit: 4, MaxWait: 10 * time.Second}),
		idle:    time.Minute,
		latency: latencyObservers(hist),
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte("ok"))
	}), ReadHeaderTimeout: 10 * time.Second, ConnContext: a.connContext}
	go hs.Serve(a.wrap(newLimitListener(ln, 100, nil, nil, rejectHTTP, nil)))
	t.Cleanup(func() { hs.Close() })
	w := dialFrom(t, ln.Addr().String(), "")
	const keptAlive = 5
	for i := 0; i < keptAlive; i++ {
		w.send(post("/a"))
		if resp := w.answer(); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
	}
	w.send("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	w.answer()
	w.send(post("/b", "Connection: close\r\n"))
	if resp := w.answer(); resp.StatusCode != 200 || !resp.Close {
		t.Fatalf("Connection: close request: %d close=%v", resp.StatusCode, resp.Close)
	}
	waitFor(t, func() bool { n, _ := histSamples(t, hist, "false"); return n >= keptAlive+1 })
	time.Sleep(20 * time.Millisecond) // nothing more comes
	if n, sum := histSamples(t, hist, "false"); n != keptAlive+1 || sum <= 0 {
		t.Fatalf("observed %d requests (sum %.6fs), want %d", n, sum, keptAlive+1)
	}
}

// TestAdmissionAdmitAllocs: admitting a request in front of the HTTP
// server and observing its latency once answered allocates nothing.
func TestAdmissionAdmitAllocs(t *testing.T) {
	fair := shed.NewFair(shed.FairConfig{MaxLimit: 4, MinLimit: 4, MaxWait: time.Hour})
	hist := newAdmittedLatency()
	a := &admission{fair: fair, idle: time.Minute, latency: latencyObservers(hist)}
	const perRun = 100
	c, fc := feedAdmitConn(a, 0)
	buf := make([]byte, 4096)
	allocs := testing.AllocsPerRun(20, func() {
		fc.n = perRun
		for i := 0; i < perRun; i++ {
			if n, err := c.Read(buf); n != len(fc.req) || err != nil {
				t.Fatalf("Read: %d bytes, %v", n, err)
			}
		}
	})
	c.Close()
	if n, _ := histSamples(t, hist, "false"); n < 20*perRun {
		t.Fatalf("%d requests observed, want at least %d", n, 20*perRun)
	}
	if allocs/perRun > 0.05 {
		t.Fatalf("%.2f allocations per admitted request, want none", allocs/perRun)
	}
}

// BenchmarkAdmissionAdmit: the cost of admitting a request in front of
// the HTTP server (framing, the slot, its release at the next read), with
// and without observing its latency.
func BenchmarkAdmissionAdmit(b *testing.B) {
	for _, observe := range []bool{false, true} {
		name := "none"
		if observe {
			name = "latency"
		}
		b.Run(name, func(b *testing.B) {
			a := &admission{fair: shed.NewFair(shed.FairConfig{MaxLimit: 4, MinLimit: 4, MaxWait: time.Hour}), idle: time.Minute}
			if observe {
				a.latency = latencyObservers(newAdmittedLatency())
			}
			c, _ := feedAdmitConn(a, b.N)
			buf := make([]byte, 4096)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := c.Read(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
