package resp

import (
	"strings"
	"testing"
)

func TestLooksLikeHTTP(t *testing.T) {
	split := func(s string) [][]byte {
		var out [][]byte
		for _, f := range strings.Fields(s) {
			out = append(out, []byte(f))
		}
		return out
	}
	cases := []struct {
		line          string
		first, inline bool
		want          bool
	}{
		{"POST / HTTP/1.1", true, true, true},
		{"post /x", false, false, true}, // Redis's rule: anywhere, any form
		{"Host: 127.0.0.1:6380", false, true, true},
		{"GET / HTTP/1.1", true, true, true},
		{"get /counters/a HTTP/1.0", true, true, true},
		{"OPTIONS * HTTP/1.1", true, true, true},
		{"GET / HTTP/1.1", false, true, false}, // later lines: only post and host:
		{"GET / HTTP/1.1", true, false, false}, // multibulk GET of a key named "/"
		{"GET key", true, true, false},
		{"SET a HTTP/1.1", true, true, false},
		{"INCR a", true, true, false},
	}
	for _, tc := range cases {
		if got := looksLikeHTTP(split(tc.line), tc.first, tc.inline); got != tc.want {
			t.Errorf("looksLikeHTTP(%q, first=%v, inline=%v) = %v", tc.line, tc.first, tc.inline, got)
		}
	}
}

// TestQueryBudget: buffers above maxReadBuf are counted in the shared
// budget, a connection over it is refused, and giving a buffer back
// frees its share.
func TestQueryBudget(t *testing.T) {
	s := New(nil, Options{MaxQueryBufferTotal: 3 << 20})
	a, b := &client{s: s}, &client{s: s}
	if !s.reserveBuffer(a, 2<<20) || s.queryBytes.Load() != 2<<20 {
		t.Fatalf("first 2 MiB: %d held", s.queryBytes.Load())
	}
	if s.reserveBuffer(b, 2<<20) || s.queryBytes.Load() != 2<<20 || b.held != 0 {
		t.Fatalf("over the budget accepted: %d held", s.queryBytes.Load())
	}
	if !s.reserveBuffer(b, maxReadBuf) || b.held != 0 {
		t.Fatal("a normal buffer is never refused")
	}
	if !s.reserveBuffer(a, minReadBuf) || s.queryBytes.Load() != 0 {
		t.Fatalf("shrinking freed nothing: %d held", s.queryBytes.Load())
	}
	if !s.reserveBuffer(b, 3<<20) {
		t.Fatal("freed budget not reusable")
	}
}
