package ratelimitapi

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/counterd/counterd/internal/ratelimit"
)

type answer struct {
	Status       string `json:"status"`
	Allowed      bool   `json:"allowed"`
	Key          string `json:"key"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	ResetMS      int64  `json:"reset_ms"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	DelayMS      int64  `json:"delay_ms"`
	Limits       []struct {
		Name, Algorithm, Period string
		Limit, Remaining        int64
		Allowed                 bool
		RetryAfterMS            int64 `json:"retry_after_ms"`
		Cost                    int64
	} `json:"limits"`
	Error struct{ Code, Message string } `json:"error"`
}

func do(t *testing.T, h http.Handler, method, path, body string, hdr ...string) (*httptest.ResponseRecorder, answer) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var a answer
	if rec.Body.Len() > 0 {
		if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil {
			t.Fatalf("%s %s: answer %q is not JSON: %v", method, path, rec.Body, err)
		}
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q", method, path, ct)
	}
	return rec, a
}

func TestHTTPCheck(t *testing.T) {
	clk := newFakeClock()
	clk.Set(t0.Add(500 * time.Millisecond))
	l := newLimiter(t, clk.Now)
	h := NewHTTPHandler(l, HTTPOptions{})
	body := `{"key":"user:1","limits":[{"name":"per-second","algorithm":"fixed_window","limit":2,"period":"1s"},
		{"name":"per-day","algorithm":"sliding_window","limit":100,"period_ms":86400000}]}`
	rec, a := do(t, h, "POST", "/ratelimit/check", body)
	if rec.Code != 200 || !a.Allowed || a.Status != "ok" || a.Key != "user:1" || len(a.Limits) != 2 {
		t.Fatalf("first check: %d %s", rec.Code, rec.Body)
	}
	if a.Limit != 2 || a.Remaining != 1 || a.ResetMS != 500 || a.Limits[1].Remaining != 99 || a.Limits[1].Period != "24h" {
		t.Errorf("first check: %s", rec.Body)
	}
	wantHeaders := map[string]string{
		"RateLimit-Policy":      `"per-second";q=2;w=1, "per-day";q=100;w=86400`,
		"RateLimit":             `"per-second";r=1;t=1, "per-day";r=99;t=172800`,
		"X-RateLimit-Limit":     "2",
		"X-RateLimit-Remaining": "1",
		"X-RateLimit-Reset":     strconv.FormatInt(t0.Unix()+1, 10),
		"Retry-After":           "",
	}
	for k, v := range wantHeaders {
		if got := rec.Header().Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
	do(t, h, "POST", "/ratelimit/check", body)
	rec, a = do(t, h, "POST", "/ratelimit/check", body)
	if rec.Code != http.StatusTooManyRequests || a.Allowed || a.Status != "rate_limited" {
		t.Fatalf("third check: %d %s", rec.Code, rec.Body)
	}
	if a.RetryAfterMS != 500 || a.Limits[0].Allowed || !a.Limits[1].Allowed || a.Limits[1].Remaining != 98 {
		t.Errorf("third check: %s", rec.Body)
	}
	for k, v := range map[string]string{
		"Retry-After":           "1",
		"X-RateLimit-Remaining": "0",
		"X-RateLimit-Reset":     strconv.FormatInt(t0.Unix()+1, 10),
		"RateLimit":             `"per-second";r=0;t=1, "per-day";r=98;t=172800`,
	} {
		if got := rec.Header().Get(k); got != v {
			t.Errorf("429 %s: %q, want %q", k, got, v)
		}
	}
	// A query (cost 0) charges nothing.
	_, a = do(t, h, "POST", "/ratelimit/check", `{"key":"user:1","cost":0,"limits":[{"algorithm":"fixed_window","limit":5,"period":"1m"}]}`)
	if !a.Allowed || a.Remaining != 5 || a.Limits[0].Name != "fixed_window-5-60s" {
		t.Errorf("query: %+v", a)
	}
}

func TestHTTPCheckPolicies(t *testing.T) {
	ps := []ratelimit.Policy{
		{Name: "per-second", Match: "api:*", Algorithm: ratelimit.TokenBucket, Limit: 10, Period: time.Second},
		{Name: "uploads", Namespace: "upload", Algorithm: ratelimit.FixedWindow, Limit: 100, Period: time.Minute, Cost: 10},
	}
	l := newLimiter(t, newFakeClock().Now, ps...)
	h := NewHTTPHandler(l, HTTPOptions{})
	_, a := do(t, h, "POST", "/ratelimit/check", `{"key":"api:x"}`)
	if !a.Allowed || a.Remaining != 9 || len(a.Limits) != 1 || a.Limits[0].Name != "per-second" {
		t.Errorf("by match: %+v", a)
	}
	_, a = do(t, h, "POST", "/ratelimit/check", `{"key":"upload:x"}`)
	if a.Remaining != 90 || a.Limits[0].Cost != 10 {
		t.Errorf("policy cost: %+v", a)
	}
	_, a = do(t, h, "POST", "/ratelimit/check", `{"key":"upload:x","cost":1}`)
	if a.Remaining != 89 {
		t.Errorf("explicit cost: %+v", a)
	}
	_, a = do(t, h, "POST", "/ratelimit/check", `{"key":"other","policy":"uploads","policies":["per-second"]}`)
	if !a.Allowed || len(a.Limits) != 2 || a.Limits[0].Name != "uploads" {
		t.Errorf("named: %+v", a)
	}
}

func TestHTTPErrors(t *testing.T) {
	l := newLimiter(t, newFakeClock().Now, ratelimit.Policy{Name: "p", Match: "a*", Algorithm: ratelimit.FixedWindow, Limit: 1, Period: time.Second})
	h := NewHTTPHandler(l, HTTPOptions{MaxBodyBytes: 512})
	lim := `"limits":[{"limit":1,"period":"1s"}]`
	for _, c := range []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"not json", "POST", "/ratelimit/check", `{`, 400, "invalid_json"},
		{"unknown field", "POST", "/ratelimit/check", `{"key":"a","colour":1}`, 400, "invalid_json"},
		{"trailing", "POST", "/ratelimit/check", `{"key":"a"} {}`, 400, "invalid_json"},
		{"array body", "POST", "/ratelimit/check", `[1]`, 400, "invalid_argument"},
		{"key type", "POST", "/ratelimit/check", `{"key":1}`, 400, "invalid_argument"},
		{"no key", "POST", "/ratelimit/check", `{` + lim + `}`, 400, "invalid_argument"},
		{"float cost", "POST", "/ratelimit/check", `{"key":"a","cost":1.5,` + lim + `}`, 400, "invalid_argument"},
		{"string cost", "POST", "/ratelimit/check", `{"key":"a","cost":"1",` + lim + `}`, 400, "invalid_argument"},
		{"null cost", "POST", "/ratelimit/check", `{"key":"a","cost":null,` + lim + `}`, 400, "invalid_argument"},
		{"negative cost", "POST", "/ratelimit/check", `{"key":"a","cost":-1,` + lim + `}`, 400, "invalid_argument"},
		{"cost above limit", "POST", "/ratelimit/check", `{"key":"a","cost":2,` + lim + `}`, 400, "invalid_argument"},
		{"no limit", "POST", "/ratelimit/check", `{"key":"a","limits":[{"period":"1s"}]}`, 400, "invalid_argument"},
		{"both periods", "POST", "/ratelimit/check", `{"key":"a","limits":[{"limit":1,"period":"1s","period_ms":1000}]}`, 400, "invalid_argument"},
		{"bad period", "POST", "/ratelimit/check", `{"key":"a","limits":[{"limit":1,"period":"-1s"}]}`, 400, "invalid_argument"},
		{"bad algorithm", "POST", "/ratelimit/check", `{"key":"a","limits":[{"algorithm":"x","limit":1,"period":"1s"}]}`, 400, "invalid_argument"},
		{"bad name", "POST", "/ratelimit/check", `{"key":"a","limits":[{"name":"a\"b","limit":1,"period":"1s"}]}`, 400, "invalid_argument"},
		{"no policy matches", "POST", "/ratelimit/check", `{"key":"zzz"}`, 404, "not_found"},
		{"unknown policy", "POST", "/ratelimit/check", `{"key":"a","policy":"nope"}`, 404, "not_found"},
		{"too large", "POST", "/ratelimit/check", `{"key":"` + strings.Repeat("a", 600) + `"}`, 413, "body_too_large"},
		{"method", "GET", "/ratelimit/check", ``, 405, "method_not_allowed"},
		{"route", "GET", "/ratelimit/nope", ``, 404, "not_found"},
		{"unknown policy get", "GET", "/ratelimit/policies/nope", ``, 404, "not_found"},
		{"policies method", "POST", "/ratelimit/policies", `{}`, 405, "method_not_allowed"},
		{"policy name mismatch", "PUT", "/ratelimit/policies/a", `{"name":"b","match":"*","limit":1,"period":"1s"}`, 400, "invalid_argument"},
		{"invalid policy", "PUT", "/ratelimit/policies/a", `{"match":"*","limit":0,"period":"1s"}`, 400, "invalid_argument"},
		{"invalid policies", "PUT", "/ratelimit/policies", `{"policies":[{"name":"a","limit":1,"period":"1s"}]}`, 400, "invalid_argument"},
	} {
		rec, a := do(t, h, c.method, c.path, c.body)
		if rec.Code != c.status || a.Status != "error" || a.Error.Code != c.code || a.Error.Message == "" {
			t.Errorf("%s: %d %s, want %d %s", c.name, rec.Code, rec.Body, c.status, c.code)
		}
	}
	l.Close()
	rec, a := do(t, h, "POST", "/ratelimit/check", `{"key":"a"}`)
	if rec.Code != 503 || a.Error.Code != "unavailable" {
		t.Errorf("closed: %d %s", rec.Code, rec.Body)
	}
}

func TestHTTPPolicies(t *testing.T) {
	l := newLimiter(t, newFakeClock().Now)
	h := NewHTTPHandler(l, HTTPOptions{})
	rec, _ := do(t, h, "PUT", "/ratelimit/policies", examplePolicies, "Content-Type", "application/yaml")
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"policies":4`) {
		t.Fatalf("PUT yaml: %d %s", rec.Code, rec.Body)
	}
	rec, _ = do(t, h, "GET", "/ratelimit/policies", "")
	var list struct{ Policies []ratelimit.Policy }
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil || len(list.Policies) != 4 || list.Policies[2].Period != 24*time.Hour {
		t.Fatalf("GET: %s %v", rec.Body, err)
	}
	rec, _ = do(t, h, "PUT", "/ratelimit/policies/new", `{"match":"n:*","algorithm":"gcra","limit":5,"period":"1s"}`)
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"algorithm":"token_bucket"`) {
		t.Fatalf("PUT one: %d %s", rec.Code, rec.Body)
	}
	rec, _ = do(t, h, "GET", "/ratelimit/policies/new", "")
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"name":"new"`) {
		t.Fatalf("GET one: %d %s", rec.Code, rec.Body)
	}
	rec, _ = do(t, h, "DELETE", "/ratelimit/policies/new", "")
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"deleted":true`) {
		t.Fatalf("DELETE: %d %s", rec.Code, rec.Body)
	}
	rec, _ = do(t, h, "PUT", "/ratelimit/policies", `{"policies":[]}`)
	if rec.Code != 200 || len(l.Policies()) != 0 {
		t.Fatalf("PUT JSON: %d %s", rec.Code, rec.Body)
	}
	ro := NewHTTPHandler(l, HTTPOptions{ReadOnlyPolicies: true})
	rec, _ = do(t, ro, "PUT", "/ratelimit/policies", `{"policies":[]}`)
	if rec.Code != 405 || rec.Header().Get("Allow") != "GET, HEAD" {
		t.Errorf("read-only PUT: %d %v", rec.Code, rec.Header())
	}
}

func TestMiddleware(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := ratelimit.New(ratelimit.Config{Clock: time.Now, EvictInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		calls := 0
		next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls++; io.WriteString(w, "hi") })
		mw := Middleware(l, KeyByHeader("apikey:", "X-API-Key"),
			ratelimit.Limit{Name: "burst", Algorithm: ratelimit.TokenBucket, Limit: 1, Period: time.Second, Burst: 2},
			ratelimit.Limit{Name: "hourly", Algorithm: ratelimit.FixedWindow, Limit: 100, Period: time.Hour})(next)
		get := func() *httptest.ResponseRecorder {
			req := httptest.NewRequest("GET", "/x", nil)
			req.Header.Set("X-API-Key", "k1")
			rec := httptest.NewRecorder()
			mw.ServeHTTP(rec, req)
			return rec
		}
		for i := range 2 {
			if rec := get(); rec.Code != 200 || rec.Header().Get("X-RateLimit-Remaining") != strconv.Itoa(1-i) {
				t.Fatalf("request %d: %d %v", i, rec.Code, rec.Header())
			}
		}
		rec := get()
		if rec.Code != 429 || rec.Header().Get("Retry-After") != "1" || !strings.Contains(rec.Body.String(), `"code":"rate_limited"`) {
			t.Fatalf("third request: %d %v %s", rec.Code, rec.Header(), rec.Body)
		}
		if got := rec.Header().Get("RateLimit-Policy"); got != `"burst";q=1;w=1, "hourly";q=100;w=3600` {
			t.Errorf("RateLimit-Policy %q", got)
		}
		if calls != 2 {
			t.Errorf("next called %d times", calls)
		}
		time.Sleep(time.Second) // Retry-After
		if rec := get(); rec.Code != 200 {
			t.Errorf("after Retry-After: %d", rec.Code)
		}
		// No key: not limited, no headers.
		rec = httptest.NewRecorder()
		mw.ServeHTTP(rec, httptest.NewRequest("GET", "/x", nil))
		if rec.Code != 200 || rec.Header().Get("RateLimit") != "" {
			t.Errorf("no key: %d %v", rec.Code, rec.Header())
		}
	})
}

func TestMiddlewareLeakyBucketDelays(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := ratelimit.New(ratelimit.Config{Clock: time.Now, EvictInterval: -1,
			Policies: []ratelimit.Policy{{Name: "queue", Match: "*", Algorithm: ratelimit.LeakyBucket, Limit: 10, Period: time.Second, Burst: 3}}})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		var mu sync.Mutex
		var done []time.Duration
		start := time.Now()
		mw := Middleware(l, func(*http.Request) string { return "client" })(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			mu.Lock()
			done = append(done, time.Since(start))
			mu.Unlock()
		}))
		codes := make(chan int, 4)
		for range 4 {
			go func() {
				rec := httptest.NewRecorder()
				mw.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
				codes <- rec.Code
			}()
			synctest.Wait() // keep the arrival order
		}
		n429 := 0
		for range 4 {
			if <-codes == 429 {
				n429++
			}
		}
		mu.Lock()
		defer mu.Unlock()
		// Three fit the queue and leave 100ms apart; the fourth is refused.
		want := []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond}
		if n429 != 1 || len(done) != 3 || done[0] != want[0] || done[1] != want[1] || done[2] != want[2] {
			t.Errorf("429s %d, handled at %v, want 1 and %v", n429, done, want)
		}
	})
}

func TestMiddlewarePanicsOnInvalidLimit(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic")
		}
	}()
	Middleware(nil, KeyByRemoteIP(""), ratelimit.Limit{})
}

func TestKeyFuncs(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.1:1234"
	if got := KeyByRemoteIP("ip:")(r); got != "ip:192.0.2.1" {
		t.Errorf("KeyByRemoteIP = %q", got)
	}
	if got := KeyByHeader("k:", "X-Key")(r); got != "" {
		t.Errorf("KeyByHeader without header = %q", got)
	}
}
