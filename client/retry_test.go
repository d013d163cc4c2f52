package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/counterd/counterd/client"
)

// flakyProxy sits in front of the real handler. For the first `drop`
// requests it forwards the request (so the server applies it) and then
// loses the answer: with hijack it closes the connection without a
// response, else it answers 502 Bad Gateway like a proxy would.
type flakyProxy struct {
	next   http.Handler
	drop   int
	hijack bool

	mu   sync.Mutex // guards keys
	keys []string   // Idempotency-Key of every request, in order
}

func (p *flakyProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.keys = append(p.keys, r.Header.Get("Idempotency-Key"))
	n := len(p.keys)
	p.mu.Unlock()
	if n > p.drop {
		p.next.ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	p.next.ServeHTTP(rec, r) // applied on the server...
	if rec.Code != http.StatusOK {
		panic("flakyProxy: the forwarded request failed: " + rec.Body.String())
	}
	if p.hijack { // ...and the answer is lost on the way back
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		conn.Close()
		return
	}
	http.Error(w, "<html>Bad Gateway</html>", http.StatusBadGateway)
}

func (p *flakyProxy) requests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.keys...)
}

func startFlaky(t *testing.T, drop int, hijack bool) (*flakyProxy, string) {
	p := &flakyProxy{drop: drop, hijack: hijack}
	url := startServer(t, func(h http.Handler) http.Handler { p.next = h; return p })
	return p, url
}

var fastBackoff = client.WithBackoff(time.Millisecond, 5*time.Millisecond)

// TestRetryLostAnswer is the retry dilemma: the first Incr is applied but
// its answer is lost. The client retries with the same Idempotency-Key and
// the server answers from its idempotency table, so the counter is 1.
func TestRetryLostAnswer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		hijack bool
	}{{"connection closed", true}, {"502", false}} {
		t.Run(tc.name, func(t *testing.T) {
			p, url := startFlaky(t, 1, tc.hijack)
			c := must(client.New(url, fastBackoff)).ok(t)
			ctx := t.Context()
			r, err := c.Incr(ctx, "retried", 1)
			if err != nil {
				t.Fatalf("Incr: %v", err)
			}
			if r.Value != 1 || !r.Replayed {
				t.Fatalf("Incr after a lost answer = %+v, want value 1, replayed", r)
			}
			if v := must(c.Get(ctx, "retried")).ok(t); v.Value != 1 {
				t.Fatalf("counter = %d, want 1: the retry was counted twice", v.Value)
			}
			keys := p.requests()
			if len(keys) < 3 || keys[0] == "" || keys[1] != keys[0] {
				t.Fatalf("requests' keys %q: want the retry to reuse the first key", keys)
			}
		})
	}
}

// TestRetryOtherMutations: the same for HIncr and Batch.
func TestRetryOtherMutations(t *testing.T) {
	ctx := t.Context()
	p, url := startFlaky(t, 2, false)
	c := must(client.New(url, fastBackoff)).ok(t)
	fields, err := c.HIncr(ctx, "h", map[string]int64{"a": 1})
	if err != nil || fields["a"] != 1 {
		t.Fatalf("HIncr after two lost answers: %v %v", fields, err)
	}
	if n := len(p.requests()); n != 3 {
		t.Fatalf("%d requests, want 3", n)
	}
	p2, url2 := startFlaky(t, 1, true)
	c2 := must(client.New(url2, fastBackoff)).ok(t)
	rs, err := c2.Batch(ctx, []client.Op{client.IncrOp("a", 1), client.IncrOp("b", 2)})
	if err != nil || rs[0].Value != 1 || rs[1].Value != 2 {
		t.Fatalf("Batch after a lost answer: %+v %v", rs, err)
	}
	if n := len(p2.requests()); n != 2 {
		t.Fatalf("%d requests, want 2", n)
	}
	if a := must(c2.Aggregate(ctx, "")).ok(t); a.Value != 3 {
		t.Fatalf("sum %d after a retried batch, want 3", a.Value)
	}
}

func TestRetriesExhausted(t *testing.T) {
	p, url := startFlaky(t, 1000, false)
	c := must(client.New(url, fastBackoff, client.WithRetries(2))).ok(t)
	_, err := c.Incr(t.Context(), "x", 1)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusBadGateway || ce.Code != "" {
		t.Fatalf("error %v, want the 502", err)
	}
	if n := len(p.requests()); n != 3 {
		t.Fatalf("%d attempts, want 3", n)
	}
}

func TestNoRetryOnClientErrors(t *testing.T) {
	p, url := startFlaky(t, 0, false)
	c := must(client.New(url, fastBackoff)).ok(t)
	ctx := t.Context()
	must(c.Set(ctx, "v", 1)).ok(t)
	_, err := c.Set(ctx, "v", 2, client.WithExpectedVersion(99))
	if !errors.Is(err, client.ErrVersionConflict) {
		t.Fatalf("error %v", err)
	}
	if n := len(p.requests()); n != 2 {
		t.Fatalf("%d requests, want 2: a 409 was retried", n)
	}
}

// Without idempotency keys a mutation is never retried (it could count
// twice); a read still is.
func TestNoKeysNoMutationRetry(t *testing.T) {
	p, url := startFlaky(t, 1, false)
	c := must(client.New(url, fastBackoff, client.WithIdempotencyKeys(false))).ok(t)
	ctx := t.Context()
	_, err := c.Incr(ctx, "k", 1)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusBadGateway {
		t.Fatalf("error %v, want the 502", err)
	}
	keys := p.requests()
	if len(keys) != 1 || keys[0] != "" {
		t.Fatalf("requests %q, want one without a key", keys)
	}
	if v := must(c.Get(ctx, "k")).ok(t); v.Value != 1 {
		t.Fatalf("value %d", v.Value)
	}

	p2, url2 := startFlaky(t, 1, true)
	c2 := must(client.New(url2, fastBackoff, client.WithIdempotencyKeys(false))).ok(t)
	must(c2.Incr(ctx, "k", 1, client.WithIdempotencyKey("given"))).ok(t) // lost, then retried
	if v := must(c2.Get(ctx, "k")).ok(t); v.Value != 1 {
		t.Fatalf("value %d", v.Value)
	}
	if n := len(p2.requests()); n != 3 {
		t.Fatalf("%d requests, want 3", n)
	}
}

func TestRetryStopsWithContext(t *testing.T) {
	_, url := startFlaky(t, 1000, false)
	c := must(client.New(url, client.WithBackoff(time.Hour, time.Hour))).ok(t)
	// Long enough for the first attempt to be answered on a loaded
	// machine under -race; the hour-long backoff is what the deadline cuts.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	start := time.Now()
	_, err := c.Incr(ctx, "x", 1)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want the context's", err)
	}
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusBadGateway {
		t.Fatalf("error %v does not carry the last answer", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("took %v", d)
	}
}

// TestRetryUnreachable: connection refused is retried, then reported.
func TestRetryUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	c := must(client.New(url, fastBackoff, client.WithRetries(1))).ok(t)
	_, err := c.Get(t.Context(), "x")
	if err == nil {
		t.Fatal("no error")
	}
	var ce *client.Error
	if errors.As(err, &ce) {
		t.Fatalf("error %v is an answer", err)
	}
}
