package main

// Regression tests for the attacks of docs/security.md, each against the
// real binary: the attack is scaled down (and the limits with it) so the
// set runs in seconds, and each test asserts that the node keeps serving
// a normal client promptly and stays within its memory bound.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rssBytes reads a process's resident set size from /proc.
func rssBytes(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc to read the RSS from: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("VmRSS not in /proc status")
	return 0
}

// quickClient is a normal client: one answer within a second or the node
// counts as degraded.
var quickClient = &http.Client{Timeout: time.Second}

// normalIncrement sends a normal increment and returns its status; it
// fails the test unless an answer (of any status) arrives within a
// second.
func normalIncrement(t *testing.T, base, id string) int {
	t.Helper()
	start := time.Now()
	resp, err := quickClient.Post(base+"/counters/"+id+"/increment", "application/json", strings.NewReader(`{"delta":1}`))
	if err != nil {
		t.Fatalf("normal client: no answer within 1s (%v after %v)", err, time.Since(start))
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// servedSoon polls until a normal increment succeeds (200) or timeout;
// every attempt must still be answered within a second.
func servedSoon(t *testing.T, base, id string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		code := normalIncrement(t, base, id)
		if code == http.StatusOK {
			return
		}
		if code != http.StatusServiceUnavailable && code != http.StatusTooManyRequests || time.Now().After(deadline) {
			t.Fatalf("normal client: status %d", code)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func do(t *testing.T, method, url, body string, hdr ...string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	resp, err := quickClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// TestAttackWindowBuckets: 1ms buckets over 100s (100,000 buckets, 1.6 MB
// each) are refused before anything is allocated; 2,000 of them leave the
// RSS where it was.
func TestAttackWindowBuckets(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	p := start(t, filepath.Join(t.TempDir(), "data"))
	before := rssBytes(t, p.cmd.Process.Pid)
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	defer tr.CloseIdleConnections()
	var wg sync.WaitGroup
	var refused atomic.Int64
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < 2000; i += 8 {
				body := `{"kind":"window","granularity":"1ms","window":"100s"}`
				resp, err := hc.Post(fmt.Sprintf("%s/counters/w:%d/increment", p.addr, i), "application/json", strings.NewReader(body))
				if err != nil {
					t.Error(err)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 400 && strings.Contains(string(b), "at most 3600") {
					refused.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if refused.Load() != 2000 {
		t.Fatalf("%d of 2000 oversized windows refused with the bound named", refused.Load())
	}
	if grew := rssBytes(t, p.cmd.Process.Pid) - before; grew > 32<<20 {
		t.Fatalf("RSS grew by %d MB for refused windows (each would have been 1.6 MB)", grew>>20)
	}
	// The bound itself is accepted: 1s over 1h.
	if code, b, _ := do(t, "POST", p.addr+"/counters/w:ok/increment", `{"kind":"window","granularity":"1s","window":"1h"}`); code != 200 {
		t.Fatalf("1s/1h window: %d %s", code, b)
	}
	if code := normalIncrement(t, p.addr, "normal"); code != 200 {
		t.Fatalf("normal increment: %d", code)
	}
}

// TestAttackSlowBodies: 300 connections that send their headers and one
// body byte, against --http-max-conns 100 and a 1s body deadline. The
// connections over the cap are answered 503 at once, the slow ones are cut
// at the deadline, and a normal client is answered within a second
// throughout and served (200) once the deadline has passed.
func TestAttackSlowBodies(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	// Every connection comes from 127.0.0.1: the listener's cap is
	// tested, not the cap per client (TestAdmissionConnCapPerClient).
	p := start(t, filepath.Join(t.TempDir(), "data"), "--http-max-conns", "100", "--max-conns-per-client", "-1", "--http-read-body-timeout", "1s")
	host := strings.TrimPrefix(p.addr, "http://")
	before := rssBytes(t, p.cmd.Process.Pid)
	conns := make([]net.Conn, 0, 300)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	attackStart := time.Now()
	for i := 0; i < 300; i++ {
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "POST /counters/slow/increment HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{", host)
	}
	// A normal client during the attack: a prompt answer (503 while the
	// slots are taken, or 200).
	if code := normalIncrement(t, p.addr, "normal"); code != 200 && code != 503 {
		t.Fatalf("normal client during the attack: %d", code)
	}
	var busy, cut int
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		switch {
		case strings.HasPrefix(line, "HTTP/1.1 503"):
			busy++
		case strings.HasPrefix(line, "HTTP/1.1 400") || err == io.EOF:
			cut++ // body deadline: answered 400 or closed
		default:
			t.Fatalf("slow connection: %q %v after %v", line, err, time.Since(attackStart))
		}
	}
	if busy < 150 || cut < 50 {
		t.Fatalf("%d connections refused at the cap and %d cut at the deadline, want about 200 and 100", busy, cut)
	}
	if d := time.Since(attackStart); d > 5*time.Second {
		t.Fatalf("slow connections held for %v, deadline 1s", d)
	}
	servedSoon(t, p.addr, "normal", 3*time.Second)
	if grew := rssBytes(t, p.cmd.Process.Pid) - before; grew > 64<<20 {
		t.Fatalf("RSS grew by %d MB", grew>>20)
	}
	if v := getValue(t, p.addr, "slow"); v != 0 {
		t.Fatalf("an unfinished body incremented: %d", v)
	}
}

// TestAttackDNSRebinding: a Host that is not loopback or allowed is
// refused (421) before anything runs; loopback names, the bound address
// and --allowed-hosts are served; pprof is not on the API port.
func TestAttackDNSRebinding(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	admin := "127.0.0.1:" + freePort(t)
	p := start(t, filepath.Join(t.TempDir(), "data"), "--allowed-hosts", "counters.internal", "--pprof", "--admin", admin)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(p.addr, "http://"))
	url := p.addr + "/counters/rebind/increment"
	for _, host := range []string{"attacker.example:" + port, "attacker.example", "127.0.0.1.nip.io:" + port, "10.0.0.1:" + port} {
		code, b, _ := do(t, "POST", url, `{"delta":1}`, "Host", host, "Content-Type", "application/json")
		if code != http.StatusMisdirectedRequest || !strings.Contains(b, `"host_not_allowed"`) {
			t.Fatalf("Host %s: %d %s", host, code, b)
		}
	}
	for _, host := range []string{"localhost:" + port, "127.0.0.1:" + port, "[::1]:" + port, "counters.internal", "counters.internal:" + port} {
		if code, b, _ := do(t, "POST", url, `{"delta":1}`, "Host", host, "Content-Type", "application/json"); code != 200 {
			t.Fatalf("Host %s: %d %s", host, code, b)
		}
	}
	if v := getValue(t, p.addr, "rebind"); v != 5 {
		t.Fatalf("value %d, want 5 (only the allowed hosts)", v)
	}
	if code, _, _ := do(t, "GET", p.addr+"/debug/pprof/cmdline", ""); code == 200 {
		t.Fatal("pprof served on the API port")
	}
	if code, b, _ := do(t, "GET", "http://"+admin+"/debug/pprof/cmdline", ""); code != 200 || !strings.Contains(b, "--admin") {
		t.Fatalf("pprof on --admin: %d %q", code, b)
	}
	if code, _, _ := do(t, "GET", "http://"+admin+"/debug/pprof/cmdline", "", "Host", "attacker.example"); code == 200 {
		t.Fatal("pprof served to a rebound Host")
	}
}

// TestAttackCrossOrigin: browsers send cross-site text/plain and form
// POSTs without a preflight but with an Origin; every request with an
// Origin --cors-origin does not list is refused, a non-JSON type without
// one is 415, an empty body does not increment, and curl -d keeps working.
func TestAttackCrossOrigin(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	p := start(t, filepath.Join(t.TempDir(), "data"), "--cors-origin", "https://app.example")
	url := p.addr + "/counters/xo/increment"
	refused := []struct {
		name   string
		body   string
		hdr    []string
		status int
	}{
		{"text/plain from a page", `{"delta":1}`, []string{"Origin", "https://evil.example", "Content-Type", "text/plain"}, 403},
		{"form from a page", `{"delta":1}`, []string{"Origin", "https://evil.example", "Content-Type", "application/x-www-form-urlencoded"}, 403},
		{"json from a page", `{"delta":1}`, []string{"Origin", "https://evil.example", "Content-Type", "application/json"}, 403},
		{"null origin", `{"delta":1}`, []string{"Origin", "null", "Content-Type", "text/plain"}, 403},
		{"text/plain without origin", `{"delta":1}`, []string{"Content-Type", "text/plain"}, 415},
		{"multipart without origin", `{"delta":1}`, []string{"Content-Type", "multipart/form-data; boundary=x"}, 415},
		{"empty body", ``, []string{"Content-Type", "application/json"}, 400},
	}
	for _, tc := range refused {
		if code, b, _ := do(t, "POST", url, tc.body, tc.hdr...); code != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, code, b, tc.status)
		}
	}
	if v := getValue(t, p.addr, "xo"); v != 0 {
		t.Fatalf("refused requests incremented: %d", v)
	}
	// curl -d sends application/x-www-form-urlencoded and no Origin.
	if code, b, _ := do(t, "POST", url, `{"delta":1}`, "Content-Type", "application/x-www-form-urlencoded"); code != 200 {
		t.Fatalf("curl -d: %d %s", code, b)
	}
	// The allowed origin: preflight, then the request.
	code, _, h := do(t, "OPTIONS", url, "", "Origin", "https://app.example", "Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "content-type")
	if code != 204 || h.Get("Access-Control-Allow-Origin") != "https://app.example" || !strings.Contains(h.Get("Access-Control-Allow-Headers"), "Content-Type") {
		t.Fatalf("preflight: %d %v", code, h)
	}
	if code, _, _ := do(t, "OPTIONS", url, "", "Origin", "https://evil.example", "Access-Control-Request-Method", "POST"); code != 403 {
		t.Fatalf("preflight of another origin: %d", code)
	}
	code, b, h := do(t, "POST", url, `{"delta":1}`, "Origin", "https://app.example", "Content-Type", "application/json")
	if code != 200 || h.Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Fatalf("allowed origin: %d %s %v", code, b, h)
	}
	if v := getValue(t, p.addr, "xo"); v != 2 {
		t.Fatalf("value %d, want 2", v)
	}
}

// startRESP starts counterd with the Redis protocol on a free port.
func startRESP(t *testing.T, args ...string) (*proc, string) {
	t.Helper()
	addr := "127.0.0.1:" + freePort(t)
	return start(t, filepath.Join(t.TempDir(), "data"), append([]string{"--resp", addr}, args...)...), addr
}

// respPing is a normal Redis client: PING must be answered within a second.
func respPing(t *testing.T, addr string) {
	t.Helper()
	start := time.Now()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatalf("normal RESP client: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if got := respCmd(t, c, bufio.NewReader(c), "INCR", "resp:normal"); !strings.HasPrefix(got, ":") {
		t.Fatalf("normal RESP client: %q after %v", got, time.Since(start))
	}
}

// TestAttackHTTPToRESP: an HTTP request sent to the RESP port (a browser
// POST with a text/plain body of Redis commands) closes the connection;
// nothing in it runs.
func TestAttackHTTPToRESP(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	p, addr := startRESP(t)
	for _, req := range []string{
		"POST / HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: text/plain\r\nContent-Length: 22\r\n\r\nINCRBY attacked 1000\r\n",
		"GET / HTTP/1.1\r\nHost: " + addr + "\r\n\r\nINCRBY attacked 1000\r\n",
		"PUT /x HTTP/1.0\r\n\r\nINCRBY attacked 1000\r\n",
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte(req))
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		b, err := io.ReadAll(c)
		c.Close()
		if err != nil || len(b) != 0 {
			t.Fatalf("%q: read %q, %v; want the connection closed without an answer", strings.SplitN(req, "\r\n", 2)[0], b, err)
		}
	}
	if v := getValue(t, p.addr, "attacked"); v != 0 {
		t.Fatalf("commands inside an HTTP request ran: attacked = %d", v)
	}
	if !strings.Contains(p.logs(), "Possible SECURITY ATTACK detected") {
		t.Fatal("no security warning in the log")
	}
	respPing(t, addr)
}

// TestAttackHalfSentRESP: 20 connections each send half of a 3 MB
// argument against an 8 MB shared budget, and one sends the header of a
// 20 MB argument (over --resp-max-bulk). The node holds at most the
// budget, refuses the rest, and answers a normal client.
func TestAttackHalfSentRESP(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	p, addr := startRESP(t, "--resp-max-bulk", "4000000", "--resp-max-command", "4100000", "--resp-query-buffer-total", "8000000")
	before := rssBytes(t, p.cmd.Process.Pid)

	big, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	fmt.Fprintf(big, "*2\r\n$4\r\nECHO\r\n$20000000\r\nxxxx")
	big.SetReadDeadline(time.Now().Add(2 * time.Second))
	if line, _ := bufio.NewReader(big).ReadString('\n'); !strings.Contains(line, "invalid bulk length") {
		t.Fatalf("20 MB argument: %q", line)
	}

	half := bytes.Repeat([]byte("x"), 1500000)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	refused := 0
	for i := 0; i < 20; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "*2\r\n$4\r\nECHO\r\n$3000000\r\n")
		c.SetWriteDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write(half); err != nil {
			refused++ // closed by the server while writing
			continue
		}
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if line, _ := bufio.NewReader(c).ReadString('\n'); strings.Contains(line, "max query buffer memory") {
			refused++
		}
	}
	if refused < 15 {
		t.Fatalf("only %d of 20 half-sent 3 MB commands refused with an 8 MB budget", refused)
	}
	respPing(t, addr)
	if grew := rssBytes(t, p.cmd.Process.Pid) - before; grew > 40<<20 {
		t.Fatalf("RSS grew by %d MB; 20 half-sent 3 MB commands unbounded would hold 60 MB", grew>>20)
	}
}

// TestAttackTinyArgs: a command of millions of tiny arguments is refused
// at its header, and the largest command allowed, parsed in one piece or
// in a long trickle of small writes, costs well under a second.
func TestAttackTinyArgs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	_, addr := startRESP(t)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	fmt.Fprintf(c, "*4000000\r\n$1\r\na\r\n$1\r\na\r\n")
	c.SetReadDeadline(time.Now().Add(time.Second))
	if line, _ := bufio.NewReader(c).ReadString('\n'); !strings.Contains(line, "invalid multibulk length") || time.Since(start) > time.Second {
		t.Fatalf("4M-argument command: %q after %v", line, time.Since(start))
	}

	// EXISTS with 32767 keys (the most arguments allowed), then one of
	// 1000 keys of 16 KiB sent in 4 KiB writes (16 MB: a buffer grown by a
	// constant would copy it thousands of times).
	for _, tc := range []struct {
		name  string
		n     int
		arg   string
		chunk int
	}{{"32767 tiny keys", 32767, "k", 1 << 20}, {"1000 keys of 16 KiB", 1000, strings.Repeat("k", 16<<10), 4 << 10}} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		fmt.Fprintf(&b, "*%d\r\n$6\r\nEXISTS\r\n", tc.n+1)
		for i := 0; i < tc.n; i++ {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(tc.arg), tc.arg)
		}
		start := time.Now()
		go func() {
			for data := b.Bytes(); len(data) > 0; {
				n := min(tc.chunk, len(data))
				if _, err := c.Write(data[:n]); err != nil {
					return
				}
				data = data[n:]
			}
		}()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil || !strings.HasPrefix(line, ":") {
			t.Fatalf("%s: %q %v", tc.name, line, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("%s took %v", tc.name, d)
		}
	}
	respPing(t, addr)
}

// TestAttackIdleRESP: idle connections fill --resp-max-conns; one more is
// refused with Redis's "max number of clients", and the idle ones are
// closed after --resp-idle-timeout, after which a normal client is served.
func TestAttackIdleRESP(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	// All from 127.0.0.1: the listener's cap, not the one per client.
	_, addr := startRESP(t, "--resp-max-conns", "50", "--max-conns-per-client", "-1", "--resp-idle-timeout", "1s")
	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for i := 0; i < 50; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	time.Sleep(100 * time.Millisecond) // let the server accept them all
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	c.Close()
	if !strings.Contains(line, "max number of clients") {
		t.Fatalf("connection over the cap: %q", line)
	}
	start := time.Now()
	for _, c := range idle {
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("idle connection: %v after %v, want closed by the server", err, time.Since(start))
		}
	}
	respPing(t, addr)
}

// TestAttackOverload: with a small --max-inflight and queue, 200 clients
// hammering increments over HTTP and the Redis protocol get fast 503s
// (with Retry-After) and -BUSY, counted in counterd_shed_requests_total,
// while a normal client is answered within a second every time.
func TestAttackOverload(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	p, addr := startRESP(t, "--max-inflight", "1", "--max-queue", "1", "--max-queue-wait", "1ms", "--durability", "sync")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var http503, retryAfter, busy atomic.Int64
	tr := &http.Transport{MaxIdleConnsPerHost: 200}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	for w := 0; w < 150; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := hc.Post(p.addr+"/counters/load/increment", "application/json", strings.NewReader(`{"delta":1}`))
				if err != nil {
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 503 || resp.StatusCode == 429 {
					http503.Add(1)
					if resp.Header.Get("Retry-After") != "" {
						retryAfter.Add(1)
					}
				}
			}
		}()
	}
	for w := 0; w < 50; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				return
			}
			defer c.Close()
			rd := bufio.NewReader(c)
			pipeline := bytes.Repeat([]byte("*2\r\n$4\r\nINCR\r\n$4\r\nload\r\n"), 16)
			for {
				select {
				case <-stop:
					return
				default:
				}
				c.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err := c.Write(pipeline); err != nil {
					return
				}
				for i := 0; i < 16; i++ {
					line, err := rd.ReadString('\n')
					if err != nil {
						return
					}
					if strings.HasPrefix(line, "-BUSY") {
						busy.Add(1)
					}
				}
			}
		}()
	}
	var worst time.Duration
	for i := 0; i < 20; i++ {
		time.Sleep(50 * time.Millisecond)
		start := time.Now()
		if code := normalIncrement(t, p.addr, "normal"); code != 200 && code != 503 && code != 429 {
			t.Fatalf("normal client under overload: %d", code)
		}
		worst = max(worst, time.Since(start))
	}
	close(stop)
	wg.Wait()
	t.Logf("shed: %d HTTP 503/429 (%d with Retry-After), %d RESP -BUSY; normal client's slowest answer %v", http503.Load(), retryAfter.Load(), busy.Load(), worst)
	if http503.Load() == 0 || busy.Load() == 0 || retryAfter.Load() != http503.Load() {
		t.Fatalf("no shedding seen: %d 503/429 (%d with Retry-After), %d -BUSY", http503.Load(), retryAfter.Load(), busy.Load())
	}
	_, metrics, _ := do(t, "GET", p.addr+"/metrics", "")
	for _, fe := range []string{"http", "resp"} {
		if n := shedCounted(metrics, fe); n == 0 {
			t.Fatalf("counterd_shed_requests_total{front_end=%q} not counted", fe)
		}
	}
}

// shedCounted sums counterd_shed_requests_total{front_end=fe} over its
// reasons in a /metrics page.
func shedCounted(metrics, fe string) float64 {
	var sum float64
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, `counterd_shed_requests_total{front_end="`+fe+`"`) {
			if f := strings.Fields(line); len(f) == 2 {
				v, _ := strconv.ParseFloat(f[1], 64)
				sum += v
			}
		}
	}
	return sum
}

// TestAttackOverloadFairness: one client (127.0.0.1) floods the node on
// 100 keep-alive connections, each sending its next increment as soon as
// it has an answer; another client (127.0.0.2) sends one at a time. The
// flood gets 503s with Retry-After beyond its share, each answered, on
// connections kept open; the other client is served (HTTP admission
// queues clients by address and serves them round-robin).
func TestAttackOverloadFairness(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	normalDialer := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	if c, err := normalDialer.Dial("tcp", "127.0.0.1:"+freePort(t)); err != nil && !strings.Contains(err.Error(), "refused") {
		t.Skipf("cannot connect from 127.0.0.2 (needs a loopback that routes 127/8, as Linux's): %v", err)
	} else if c != nil {
		c.Close()
	}
	p := start(t, filepath.Join(t.TempDir(), "data"), "--max-inflight", "2", "--max-queue", "8",
		"--max-queue-per-client", "2", "--max-queue-wait", "2s")
	host := strings.TrimPrefix(p.addr, "http://")
	req := []byte("POST /counters/flood/increment HTTP/1.1\r\nHost: " + host + "\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"delta\":1}")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var ok200, shed503, noRetryAfter, broken atomic.Int64
	floodHTTP(&wg, host, req, 100, stop, func(resp *http.Response) {
		switch resp.StatusCode {
		case 200:
			ok200.Add(1)
		case 503, 429:
			shed503.Add(1)
			if resp.Header.Get("Retry-After") == "" {
				noRetryAfter.Add(1)
			}
		default:
			broken.Add(1)
		}
	}, func() { broken.Add(1) })
	normal := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: normalDialer.DialContext}}
	defer normal.CloseIdleConnections()
	for shed503.Load() == 0 { // the flood is on
		time.Sleep(10 * time.Millisecond)
	}
	served, worst := 0, time.Duration(0)
	for i := 0; i < 20; i++ {
		start := time.Now()
		resp, err := normal.Post(p.addr+"/counters/normal/increment", "application/json", strings.NewReader(`{"delta":1}`))
		if err != nil {
			t.Fatalf("normal client: no answer (%v after %v)", err, time.Since(start))
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		worst = max(worst, time.Since(start))
		if resp.StatusCode == 200 {
			served++
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	t.Logf("flood: %d served, %d shed; normal client: %d of 20 served, slowest %v", ok200.Load(), shed503.Load(), served, worst)
	if broken.Load() != 0 || noRetryAfter.Load() != 0 {
		t.Fatalf("flood: %d connections broken or unexpected answers, %d 503s without Retry-After", broken.Load(), noRetryAfter.Load())
	}
	if served < 18 {
		t.Fatalf("normal client served %d of 20 while another client flooded", served)
	}
	_, metrics, _ := do(t, "GET", p.addr+"/metrics", "")
	if shedCounted(metrics, "http") == 0 {
		t.Fatal("shed requests not counted")
	}
}

// TestAttackOverloadFairnessRESP: a Redis-protocol client flooding on 50
// connections from 127.0.0.1 (pipelines of 64 INCRs) does not starve a
// client at 127.0.0.2 sending one INCR at a time, in both RESP modes:
//   - a goroutine per connection (--durability sync: every write also
//     waits for an fsync, parked out of its admission slot): the flood
//     gets -BUSY beyond its own queue, counted per front end, and the
//     normal client is never refused;
//   - the event loop (--durability async, the default): the flood's
//     connections beyond its share of a loop round are read a round
//     later (counted), and the normal client is served.
func TestAttackOverloadFairnessRESP(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	normalDialer := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	if c, err := normalDialer.Dial("tcp", "127.0.0.1:"+freePort(t)); err != nil && !strings.Contains(err.Error(), "refused") {
		t.Skipf("cannot connect from 127.0.0.2 (needs a loopback that routes 127/8, as Linux's): %v", err)
	} else if c != nil {
		c.Close()
	}
	for _, mode := range []struct {
		name string
		args []string
	}{
		// One slot and a queue of two: the flood is over its limits as
		// soon as four of its batches are in admission at once. (With two
		// slots and a queue of eight, a flood of one counter's INCRs, fast
		// since hot counters take them without the lock, was never shed in
		// 1 of 8 -race runs.)
		{"goroutines", []string{"--resp-event-loops", "-1", "--max-inflight", "1", "--max-queue", "2", "--max-queue-per-client", "1", "--max-queue-wait", "2s"}},
		{"goroutines-sync", []string{"--durability", "sync", "--max-inflight", "2", "--max-queue", "8", "--max-queue-per-client", "2", "--max-queue-wait", "2s"}},
		{"event-loop", []string{"--resp-event-loops", "1"}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			p, addr := startRESP(t, mode.args...)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var ok, busyClient, busy, other atomic.Int64
			pipeline := bytes.Repeat([]byte("*2\r\n$4\r\nINCR\r\n$5\r\nflood\r\n"), 64)
			flood(&wg, addr, pipeline, 50, stop, func(rd *bufio.Reader) bool {
				for i := 0; i < 64; i++ {
					line, err := rd.ReadString('\n')
					switch {
					case err != nil:
						other.Add(1)
						return false
					case strings.HasPrefix(line, ":"):
						ok.Add(1)
					case strings.HasPrefix(line, "-BUSY too many commands of this client"):
						busyClient.Add(1)
						busy.Add(1)
					case strings.HasPrefix(line, "-BUSY"):
						busy.Add(1)
					default:
						other.Add(1)
					}
				}
				return true
			}, func() { other.Add(1) })
			for ok.Load()+busyClient.Load() < 1000 { // the flood is on
				time.Sleep(10 * time.Millisecond)
			}
			nc, err := normalDialer.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			rd := bufio.NewReader(nc)
			worst := time.Duration(0)
			for i := 0; i < 20; i++ {
				start := time.Now()
				nc.SetDeadline(start.Add(5 * time.Second))
				if got := respCmd(t, nc, rd, "INCR", "normal"); got != ":"+strconv.Itoa(i+1) {
					t.Fatalf("normal client, INCR %d while another client floods: %q after %v", i+1, got, time.Since(start))
				}
				worst = max(worst, time.Since(start))
				time.Sleep(20 * time.Millisecond)
			}
			close(stop)
			wg.Wait()
			_, metrics, _ := do(t, "GET", p.addr+"/metrics", "")
			deferred := metricValue(metrics, "counterd_resp_loop_deferred_reads_total")
			t.Logf("flood: %d served, %d -BUSY as a client over its share, %d broken; loop reads deferred %v; normal client: 20 of 20 served, slowest %v",
				ok.Load(), busyClient.Load(), other.Load(), deferred, worst)
			if other.Load() != 0 {
				t.Fatalf("flood: %d connections broken or unexpected replies", other.Load())
			}
			switch mode.name {
			case "event-loop":
				if deferred == 0 {
					t.Fatal("the flood's reads were never deferred to a later loop round")
				}
				return
			case "goroutines-sync":
				// Each batch waits for an fsync parked out of its slot, so
				// the flood is bound by the disk, not the slots: it may
				// never be shed, and the normal client is served anyway.
				return
			}
			// Shed as over its share while the normal client waits, or
			// by the queue bound while it is alone (a lone client may
			// fill the queue: docs/security.md, the share rule).
			if busy.Load() == 0 || shedCounted(metrics, "resp") == 0 {
				t.Fatalf("the flood was never shed (%d -BUSY, %d as over its share, %v counted)", busy.Load(), busyClient.Load(), shedCounted(metrics, "resp"))
			}
		})
	}
}

// metricValue reads an unlabelled metric from a /metrics page (0 if absent).
func metricValue(metrics, name string) float64 {
	for _, line := range strings.Split(metrics, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == name {
			v, _ := strconv.ParseFloat(f[1], 64)
			return v
		}
	}
	return 0
}
