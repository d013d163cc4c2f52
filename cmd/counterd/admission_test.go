package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Per-client admission on the real binary (docs/security.md, "Overload").

// loopbackFrom returns a dialer whose connections come from ip (a
// loopback address), skipping the test where 127/8 does not route.
func loopbackFrom(t *testing.T, ip string) *net.Dialer {
	t.Helper()
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	if c, err := d.Dial("tcp", "127.0.0.1:"+freePort(t)); err != nil && !strings.Contains(err.Error(), "refused") {
		t.Skipf("cannot connect from %s (needs a loopback that routes 127/8, as Linux's): %v", ip, err)
	} else if c != nil {
		c.Close()
	}
	return d
}

// metricSum sums the samples of a metric (all its label sets) whose
// line starts with prefix in a /metrics page; found is false when none.
func metricSum(metrics, prefix string) (sum float64, found bool) {
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, prefix) {
			if f := strings.Fields(line); len(f) == 2 {
				v, _ := strconv.ParseFloat(f[1], 64)
				sum += v
				found = true
			}
		}
	}
	return sum, found
}

// TestAdmissionOneClientManyConnections: with the default flags (HTTP
// admission on), one client sending increments as fast as it can on 64
// keep-alive connections for 3 seconds gets no refusal. This holds by
// the share rule, not by timing: a client alone may fill the whole
// queue, and its requests are refused for waiting only beyond its share
// (--max-queue-per-client, max-queue / 4 = 16 x GOMAXPROCS by default),
// which 64 connections of one request each cannot exceed; so however
// slow the machine, the node stays within its queue bound and refuses
// nothing. (On the base, 5 to 784 of such requests were refused as
// stale or timed out in the queue.)
func TestAdmissionOneClientManyConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	p := start(t, filepath.Join(t.TempDir(), "data"))
	_, metrics, _ := do(t, "GET", p.addr+"/metrics", "")
	if _, on := metricSum(metrics, "counterd_http_admission_passthrough_total"); !on {
		t.Fatal("HTTP admission is not on by default (no counterd_http_admission_passthrough_total)")
	}
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}}
	defer hc.CloseIdleConnections()
	stop := time.Now().Add(3 * time.Second)
	var ok, refused, failed atomic.Int64
	var firstErr atomic.Value
	var peakQueued atomic.Int64
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				resp, err := hc.Post(fmt.Sprintf("%s/counters/many:%d/increment", p.addr, i%8), "application/json", strings.NewReader(`{"delta":1}`))
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					ok.Add(1)
				case http.StatusTooManyRequests, http.StatusServiceUnavailable:
					refused.Add(1)
				default:
					failed.Add(1)
					firstErr.CompareAndSwap(nil, resp.Status)
				}
			}
		})
	}
	wg.Go(func() { // how deep the queue got (for the log)
		for time.Now().Before(stop) {
			_, m, _ := do(t, "GET", p.addr+"/metrics", "")
			if q := metricValue(m, "counterd_admission_queued"); int64(q) > peakQueued.Load() {
				peakQueued.Store(int64(q))
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	wg.Wait()
	_, metrics, _ = do(t, "GET", p.addr+"/metrics", "")
	shedHTTP := shedCounted(metrics, "http")
	t.Logf("%d served, %d refused, %d failed; queue peaked at %d (sampled)", ok.Load(), refused.Load(), failed.Load(), peakQueued.Load())
	if failed.Load() != 0 {
		t.Fatalf("%d requests failed: %v", failed.Load(), firstErr.Load())
	}
	if refused.Load() != 0 || shedHTTP != 0 {
		t.Fatalf("a lone client on 64 connections was refused %d times (node counted %v shed: %s)", refused.Load(), shedHTTP, shedLines(metrics))
	}
	_, body, _ := do(t, "GET", p.addr+"/counters/many:*/aggregate", "")
	if !strings.Contains(body, fmt.Sprintf(`"value":%d`, ok.Load())) {
		t.Fatalf("aggregate %s, want the %d served increments", body, ok.Load())
	}
}

// shedLines returns the non-zero shed counters of a /metrics page.
func shedLines(metrics string) string {
	var out []string
	for _, l := range strings.Split(metrics, "\n") {
		if (strings.HasPrefix(l, "counterd_shed_requests_total{") || strings.HasPrefix(l, "counterd_admission_shed_total{")) && !strings.HasSuffix(l, " 0") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "; ")
}

// TestAdmissionConnCapPerClient: with --max-conns-per-client 4, a fifth
// HTTP connection from one address is answered 503 and closed, a fifth
// RESP connection "-ERR max number of clients from this address
// reached"; another address still connects on both; a closed connection
// gives its slot back; an address in --trusted-proxies is not capped.
func TestAdmissionConnCapPerClient(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	other := loopbackFrom(t, "127.0.0.2")
	proxy := loopbackFrom(t, "127.0.0.3")
	respAddr := "127.0.0.1:" + freePort(t)
	p := start(t, filepath.Join(t.TempDir(), "data"), "--resp", respAddr, "--max-conns-per-client", "4", "--trusted-proxies", "127.0.0.3/32")
	host := strings.TrimPrefix(p.addr, "http://")
	get := "GET /healthz HTTP/1.1\r\nHost: " + host + "\r\n\r\n"
	// httpConn opens a connection from d and sends one request on it:
	// the status it got (0: closed without an answer).
	httpConn := func(d *net.Dialer) (net.Conn, int) {
		t.Helper()
		c, err := d.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte(get)); err != nil {
			return c, 0
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return c, 0
		}
		resp.Body.Close()
		return c, resp.StatusCode
	}
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	local := &net.Dialer{Timeout: 5 * time.Second}
	for i := range 4 {
		c, st := httpConn(local)
		held = append(held, c)
		if st != 200 {
			t.Fatalf("HTTP connection %d of 4 from one address: status %d", i+1, st)
		}
	}
	c, st := httpConn(local)
	c.Close()
	if st != 503 {
		t.Fatalf("fifth HTTP connection from one address: status %d, want 503", st)
	}
	c, st = httpConn(other)
	c.Close()
	if st != 200 {
		t.Fatalf("HTTP connection from another address: status %d, want 200", st)
	}
	for i := range 6 {
		c, st := httpConn(proxy)
		held = append(held, c)
		if st != 200 {
			t.Fatalf("HTTP connection %d from a trusted proxy: status %d, want 200 (not capped)", i+1, st)
		}
	}
	held[0].Close()
	waitUntil(t, 10*time.Second, func() bool {
		c, st := httpConn(local)
		if st == 200 {
			held[0] = c
			return true
		}
		c.Close()
		return false
	})

	// RESP: the same cap on its own listener.
	respConn := func(d *net.Dialer) (net.Conn, string) {
		t.Helper()
		c, err := d.Dial("tcp", respAddr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte("PING\r\n")); err != nil {
			return c, ""
		}
		line, _ := bufio.NewReader(c).ReadString('\n')
		return c, strings.TrimSpace(line)
	}
	for i := range 4 {
		c, line := respConn(local)
		held = append(held, c)
		if line != "+PONG" {
			t.Fatalf("RESP connection %d of 4 from one address: %q", i+1, line)
		}
	}
	c, line := respConn(local)
	c.Close()
	if line != "-ERR max number of clients from this address reached" {
		t.Fatalf("fifth RESP connection from one address: %q", line)
	}
	c, line = respConn(other)
	c.Close()
	if line != "+PONG" {
		t.Fatalf("RESP connection from another address: %q", line)
	}
}

// waitUntil polls cond until it holds or d passes.
func waitUntil(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAdmissionTrustedProxyKeys: behind a proxy in --trusted-proxies
// (127.0.0.1 here), clients are told apart by the X-Forwarded-For
// address the proxy appends. One forwarded client floods on 40
// connections; another, through the same proxy address, sends one
// request at a time and is served every time as a client of its own.
// Without the flag both are one client (the proxy's address): no
// request is ever refused as over its client's share (there is no other
// client), and the light one shares the flood's queue and refusals.
func TestAdmissionTrustedProxyKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	for _, tc := range []struct {
		name    string
		trusted bool
	}{{"trusted", true}, {"untrusted", false}} {
		t.Run(tc.name, func(t *testing.T) {
			// The admission queue in front of net/http: HTTP event
			// loops run each request at once and never queue one.
			args := []string{"--http-event-loops", "-1", "--max-inflight", "2", "--max-queue", "8", "--max-queue-per-client", "2", "--max-queue-wait", "2s"}
			if tc.trusted {
				args = append(args, "--trusted-proxies", "127.0.0.0/30")
			}
			p := start(t, filepath.Join(t.TempDir(), "data"), args...)
			host := strings.TrimPrefix(p.addr, "http://")
			request := func(client, id string) []byte {
				// The client's own (spoofed) entry first, then what the
				// proxy appends: only the rightmost untrusted one counts.
				return []byte("POST /counters/" + id + "/increment HTTP/1.1\r\nHost: " + host +
					"\r\nX-Forwarded-For: 203.0.113.99, " + client + "\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"delta\":1}")
			}
			flood := request("198.51.100.1", "flood")
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var floodRefused atomic.Int64
			floodHTTP(&wg, host, flood, 40, stop, func(resp *http.Response) {
				if resp.StatusCode == 429 || resp.StatusCode == 503 {
					floodRefused.Add(1)
				}
			}, func() {})
			waitUntil(t, time.Minute, func() bool { return floodRefused.Load() > 0 })
			c, err := net.Dial("tcp", host)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			rd := bufio.NewReader(c)
			light := request("198.51.100.2", "light")
			served := 0
			for range 20 {
				c.SetDeadline(time.Now().Add(10 * time.Second))
				if _, err := c.Write(light); err != nil {
					t.Fatal(err)
				}
				resp, err := http.ReadResponse(rd, nil)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 {
					served++
				}
				time.Sleep(20 * time.Millisecond)
			}
			close(stop)
			wg.Wait()
			_, metrics, _ := do(t, "GET", p.addr+"/metrics", "")
			t.Logf("light client: %d of 20 served; flood refused %d; %s", served, floodRefused.Load(), shedLines(metrics))
			overShare, _ := metricSum(metrics, `counterd_admission_shed_total{cause="client"}`)
			if tc.trusted && served != 20 {
				// By the share rule: its one waiting request takes the
				// place of the flood's newest when the queue is full, and
				// is never refused for time.
				t.Fatalf("forwarded light client served %d of 20 beside a forwarded flood through the same trusted proxy", served)
			}
			if !tc.trusted && overShare != 0 {
				t.Fatalf("without --trusted-proxies %v requests were refused as over their client's share: the forwarded addresses were believed (one peer address is one client)", overShare)
			}
		})
	}
}

// floodHTTP opens n keep-alive connections to host, each sending req
// again as soon as it has an answer, until stop is closed: answer gets
// every answer (its body read), broken every connection that failed.
func floodHTTP(wg *sync.WaitGroup, host string, req []byte, n int, stop <-chan struct{}, answer func(*http.Response), broken func()) {
	flood(wg, host, req, n, stop, func(rd *bufio.Reader) bool {
		resp, err := http.ReadResponse(rd, nil)
		if err != nil {
			broken()
			return false
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		answer(resp)
		return true
	}, broken)
}

// flood opens n connections to addr, each writing req again as soon as
// read has read its answers (false: the connection is done), until stop
// is closed; broken is called for a connection that could not be opened
// or written.
func flood(wg *sync.WaitGroup, addr string, req []byte, n int, stop <-chan struct{}, read func(*bufio.Reader) bool, broken func()) {
	for range n {
		wg.Go(func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				broken()
				return
			}
			defer c.Close()
			rd := bufio.NewReader(c)
			for {
				select {
				case <-stop:
					return
				default:
				}
				c.SetDeadline(time.Now().Add(10 * time.Second))
				if _, err := c.Write(req); err != nil {
					broken()
					return
				}
				if !read(rd) {
					return
				}
			}
		})
	}
}
