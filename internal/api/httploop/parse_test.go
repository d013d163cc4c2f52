package httploop

import (
	"bufio"
	"bytes"
	"net/http"
	"strconv"
	"testing"
)

// FuzzParse checks parse against net/http's own request parser: whatever
// parse accepts as a complete request, http.ReadRequest must accept too,
// with the same method, target, Host, Content-Length, Connection: close
// and header values, and parse must frame exactly the bytes ReadRequest
// consumed (head and body). It never reads past its input or panics.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"POST /ratelimit/check HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
		"GET /counters/a:b HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nConnection: close\r\n\r\n",
		"GET /counters/a HTTP/1.1\r\nHost: x\r\n\r\nGET /counters/b HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"GET / HTTP/1.0\r\n\r\n",
		"GET /a/../b HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /a?b=c&d HTTP/1.1\r\nHost: x\r\nX: \t v \t\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
		"GET /%41 HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET / HTTP/1.1\nHost: x\n\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var h head
		st := parse(b, 1<<20, &h)
		if st != parsed {
			return
		}
		if h.total > len(b) || h.headLen > h.total || h.headLen < 4 {
			t.Fatalf("framing out of range: head %d total %d of %d", h.headLen, h.total, len(b))
		}
		br := bufio.NewReader(bytes.NewReader(b))
		req, err := http.ReadRequest(br)
		if err != nil {
			t.Fatalf("parse accepted what net/http refuses (%v): %q", err, b)
		}
		body := new(bytes.Buffer)
		if _, err := body.ReadFrom(req.Body); err != nil {
			t.Fatalf("body: %v", err)
		}
		consumed := len(b) - br.Buffered()
		if consumed != h.total {
			t.Fatalf("framed %d bytes, net/http consumed %d: %q", h.total, consumed, b)
		}
		if req.Method != string(h.method) || req.RequestURI != string(h.target) || req.Host != string(h.host) {
			t.Fatalf("request line/host differ: %q %q %q vs %q %q %q", req.Method, req.RequestURI, req.Host, h.method, h.target, h.host)
		}
		if req.URL.Path != string(h.path) || req.URL.RawQuery != string(h.query) {
			t.Fatalf("path/query differ: %q %q vs %q %q", req.URL.Path, req.URL.RawQuery, h.path, h.query)
		}
		if req.ContentLength != max(h.contentLength, 0) || !bytes.Equal(body.Bytes(), h.body(b)) {
			t.Fatalf("body differs: %d %q vs %d %q", req.ContentLength, body.Bytes(), h.contentLength, h.body(b))
		}
		if req.Close != h.close {
			t.Fatalf("close: net/http %v, parse %v", req.Close, h.close)
		}
		var x exchange
		x.ctx = t.Context()
		r := x.request(&h, b)
		if len(r.Header) != len(req.Header) {
			t.Fatalf("headers differ: %v vs %v", r.Header, req.Header)
		}
		for k, v := range req.Header {
			if got := r.Header[k]; len(got) != len(v) || !equalStrings(got, v) {
				t.Fatalf("header %q: %q vs net/http %q", k, got, v)
			}
		}
	})
}

func equalStrings(a, b []string) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}

// TestParseHandsOver lists input the loop leaves to net/http.
func TestParseHandsOver(t *testing.T) {
	for _, s := range []string{
		"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
		"POST /x HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\n",
		"GET /x HTTP/1.0\r\nHost: x\r\n\r\n",
		"GET /x HTTP/1.1\r\n\r\n", // no Host
		"GET /x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
		"GET /a//b HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /a/./b HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /a%2Fb HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET http://x/a HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 1x\r\n\r\n",
		"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nab",
		"GET /x HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n",
		"GET /x HTTP/1.1\nHost: x\n\n",
		"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: " + strconv.Itoa(2<<20) + "\r\n\r\n",
	} {
		var h head
		if st := parse([]byte(s), 1<<20, &h); st != handOver {
			t.Errorf("parse(%q) = %d, want handOver", s, st)
		}
	}
	var h head
	if st := parse([]byte("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nab"), 1<<20, &h); st != needMore {
		t.Errorf("a partial body: %d, want needMore", st)
	}
	if st := parse([]byte("POST /x HTTP/1.1\r\nHost: x\r\nContent-Le"), 1<<20, &h); st != needMore {
		t.Errorf("a partial head: %d, want needMore", st)
	}
}

// TestParseAllocs: framing a request allocates nothing.
func TestParseAllocs(t *testing.T) {
	b := []byte("POST /ratelimit/check HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: wrk\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
	var h head
	if n := testing.AllocsPerRun(100, func() { parse(b, 1<<20, &h) }); n != 0 {
		t.Fatalf("parse allocates %v times", n)
	}
}

func BenchmarkParse(b *testing.B) {
	req := []byte("POST /ratelimit/check HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: wrk\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
	var h head
	b.ReportAllocs()
	for b.Loop() {
		parse(req, 1<<20, &h)
	}
}
