package ratelimitapi

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/ratelimit"
)

func FuzzHTTPCheck(f *testing.F) {
	f.Add(`{"key":"a","limits":[{"algorithm":"fixed_window","limit":2,"period":"1s"}]}`)
	f.Add(`{"key":"p:1","cost":0}`)
	f.Add(`{"key":"p:1","policy":"p","limits":[{"limit":5,"period_ms":100,"algorithm":"token_bucket","burst":7}]}`)
	l := newLimiter(f, newFakeClock().Now, ratelimit.Policy{Name: "p", Match: "p:*", Algorithm: ratelimit.FixedWindow, Limit: 3, Period: time.Second})
	h := NewHTTPHandler(l, HTTPOptions{})
	f.Fuzz(func(t *testing.T, body string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", "/ratelimit/check", strings.NewReader(body)))
		switch rec.Code {
		case 200, 429, 400, 404, 413:
		default:
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body)
		}
		var v map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
			t.Fatalf("answer is not JSON: %q", rec.Body)
		}
		if (rec.Code == 429) != (rec.Header().Get("Retry-After") != "") {
			t.Fatalf("status %d with Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
		}
	})
}
