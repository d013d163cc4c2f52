package ratelimitapi

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkHTTPCheck is POST /ratelimit/check through the handler, in
// process (no sockets).
func BenchmarkHTTPCheck(b *testing.B) {
	l := newLimiter(b, nil)
	h := NewHTTPHandler(l, HTTPOptions{})
	body := `{"key":"user:1","limits":[{"algorithm":"sliding_window","limit":1000000000,"period":"1m"}]}`
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", "/ratelimit/check", strings.NewReader(body)))
		if rec.Code != 200 {
			b.Fatal(rec.Code, rec.Body)
		}
	}
}
