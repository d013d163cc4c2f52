package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// loopServed reads counterd_http_loop_requests_total from a node.
func loopServed(t *testing.T, addr string) int {
	t.Helper()
	r, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	m := regexp.MustCompile(`(?m)^counterd_http_loop_requests_total (\d+)`).FindSubmatch(b)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// rawAnswers writes raw on a new connection to addr and reads n answers,
// each as its status line, its headers but Date (sorted, values whose
// figures depend on the clock masked) and its body (likewise).
func rawAnswers(t *testing.T, addr, raw string, n int) []string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, raw)
	br := bufio.NewReader(c)
	var out []string
	clock := regexp.MustCompile(`("updated_at":"[^"]*"|"(reset|retry_after|delay)_ms":\d+|"as_of":"[^"]*")`)
	for i := 0; i < n; i++ {
		r, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer %d to %q: %v", i, raw, err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Header.Del("Date")
		for _, k := range []string{"Ratelimit", "Ratelimit-Reset", "X-Ratelimit-Reset"} {
			if r.Header.Get(k) != "" {
				r.Header.Set(k, "(clock)")
			}
		}
		out = append(out, fmt.Sprintf("%s close=%v len=%d\n%v\n%s", r.Status, r.Close, r.ContentLength, r.Header, clock.ReplaceAll(b, []byte("(clock)"))))
	}
	return out
}

// TestHTTPLoopConformance runs the same requests against a node with an
// HTTP event loop and one without (net/http alone), valid and malformed,
// on the hot routes and beside them, and requires the same answers
// (status, headers but Date, body; figures of the clock masked). The
// loop must have answered the hot-route requests itself.
func TestHTTPLoopConformance(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("event loops are Linux only")
	}
	looped := startEmbedded(t, func(c *Config) { c.HTTPEventLoops = 1 })["http"]
	plain := startEmbedded(t, func(c *Config) { c.HTTPEventLoops = -1 })["http"]
	if loopServed(t, plain) != -1 {
		t.Fatal("--http-event-loops -1 runs loops")
	}
	host := "Host: 127.0.0.1\r\n"
	post := func(path, body, extra string) string {
		return fmt.Sprintf("POST %s HTTP/1.1\r\n%sContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n%s", path, host, extra, len(body), body)
	}
	get := func(path, extra string) string { return "GET " + path + " HTTP/1.1\r\n" + host + extra + "\r\n" }
	check := `{"key":"account:1","limits":[{"name":"rps","algorithm":"token_bucket","limit":3,"period_ms":60000}]}`
	for _, tc := range []struct {
		name, raw string
		answers   int
		served    int // requests the loop answers
	}{
		{"increment", post("/counters/c:1/increment", `{"delta":5}`, ""), 1, 1},
		{"increment again, idempotency key", post("/counters/c:1/increment", `{"delta":5}`, "Idempotency-Key: k1\r\n"), 1, 1},
		{"idempotent retry", post("/counters/c:1/increment", `{"delta":5}`, "Idempotency-Key: k1\r\n"), 1, 1},
		{"decrement", post("/counters/c:1/decrement", `{"delta":2}`, ""), 1, 1},
		{"get", get("/counters/c:1", ""), 1, 1},
		{"get missing", get("/counters/c:missing", ""), 1, 1},
		{"increment bad JSON", post("/counters/c:1/increment", `{"delta":`, ""), 1, 1},
		{"increment unknown field", post("/counters/c:1/increment", `{"delat":1}`, ""), 1, 1},
		{"increment overflow", post("/counters/c:1/increment", `{"delta":9223372036854775807}`, ""), 1, 1},
		{"increment wrong content type", strings.Replace(post("/counters/c:2/increment", `{"delta":1}`, ""), "application/json", "text/plain", 1), 1, 1},
		{"id too long", post("/counters/"+strings.Repeat("x", 300)+"/increment", `{"delta":1}`, ""), 1, 1},
		{"host not allowed", strings.Replace(get("/counters/c:1", ""), "127.0.0.1", "evil.example", 1), 1, 1},
		{"cross-origin", post("/counters/c:1/increment", `{"delta":1}`, "Origin: http://evil.example\r\n"), 1, 1},
		{"connection close", post("/counters/c:1/increment", `{"delta":1}`, "Connection: close\r\n"), 1, 1},
		{"rate-limit check", post("/ratelimit/check", check, ""), 1, 1},
		{"rate-limit checks pipelined, the last denied", strings.Repeat(post("/ratelimit/check", check, ""), 3), 3, 3},
		{"rate-limit check invalid", post("/ratelimit/check", `{"key":""}`, ""), 1, 1},
		{"rate-limit check wrong method", get("/ratelimit/check", ""), 1, 0},
		{"durability override", post("/counters/c:3/increment?durability=sync", `{"delta":1}`, ""), 1, 0},
		{"healthz", get("/healthz", ""), 1, 0},
		{"chunked increment", "POST /counters/c:1/increment HTTP/1.1\r\n" + host + "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nb\r\n{\"delta\":1}\r\n0\r\n\r\n", 1, 0},
		{"malformed", "POST /counters/c:1/increment HTTP/1.1\r\n" + host + "Content-Length: x\r\n\r\n", 1, 0},
		{"path to clean", get("/counters//c:1", ""), 1, 0},
		{"served, then handed over, then served", post("/counters/c:1/increment", `{"delta":1}`, "") + get("/healthz", "") + get("/counters/c:1", ""), 3, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := loopServed(t, looped)
			want := rawAnswers(t, plain, tc.raw, tc.answers)
			got := rawAnswers(t, looped, tc.raw, tc.answers)
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("answer %d:\nloop:     %s\nnet/http: %s", i, got[i], want[i])
				}
			}
			if n := loopServed(t, looped) - before; n != tc.served {
				t.Errorf("the loop answered %d requests, want %d", n, tc.served)
			}
		})
	}
}
