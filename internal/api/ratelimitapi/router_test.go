package ratelimitapi

import (
	"context"
	"errors"
	"hash/crc32"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/counterd/counterd/internal/api/httpapi"
	"github.com/counterd/counterd/internal/ratelimit"
)

// testNode is one node of an in-process cluster: a Limiter, a Router and
// the HTTP API serving both on a loopback port.
type testNode struct {
	l     *ratelimit.Limiter
	r     *ratelimit.Router
	srv   *httptest.Server
	addr  string
	recvd atomic.Int64 // checks received over HTTP
	// owner, when set, replaces the cluster's owner map for this node's Router.
	owner func(key string) (bool, string)
}

// testCluster starts n nodes sharing clock. owner maps a key to the index
// of its owning node; down, when not nil, replaces the address node i's
// Router uses for node j when down(i, j) (a partition).
type testCluster struct {
	nodes []*testNode
	owner func(key string) int
}

func crcOwner(n int) func(string) int {
	return func(key string) int { return int(crc32.ChecksumIEEE([]byte(key)) % uint32(n)) }
}

func newTestCluster(t *testing.T, n int, clk *fakeClock, owner func(string) int, cfg ratelimit.RouterConfig, ps ...ratelimit.Policy) *testCluster {
	t.Helper()
	c := &testCluster{owner: owner}
	for range n {
		nd := &testNode{l: newLimiter(t, clk.Now, ps...)}
		nd.srv = httptest.NewUnstartedServer(nil)
		nd.addr = nd.srv.Listener.Addr().String()
		c.nodes = append(c.nodes, nd)
	}
	for i, nd := range c.nodes {
		cfg := cfg
		cfg.Owner = func(key string) (bool, string) {
			if nd.owner != nil {
				return nd.owner(key)
			}
			o := owner(key)
			return o == i, c.nodes[o].addr
		}
		if cfg.Clock == nil {
			cfg.Clock = clk.Now
		}
		r, err := ratelimit.NewRouter(nd.l, cfg)
		if err != nil {
			t.Fatal(err)
		}
		nd.r = r
		h := NewHTTPHandler(r, HTTPOptions{})
		nd.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			nd.recvd.Add(1)
			h.ServeHTTP(w, req)
		})
		nd.srv.Start()
		t.Cleanup(func() { nd.srv.Close(); r.Close() })
	}
	return c
}

// hammer sends tries checks of cost 1 on key against lim from every node
// in from, with 2 goroutines per node, and returns how many passed.
func hammer(t *testing.T, c *testCluster, from []int, key string, lim ratelimit.Limit, tries int) int {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for _, i := range from {
		for range 2 {
			wg.Go(func() {
				for range tries / 2 {
					s, err := c.nodes[i].r.CheckMultiContext(t.Context(), []ratelimit.Hit{{Key: key, Limit: lim, Cost: 1}}, nil)
					if err != nil {
						t.Errorf("node %d: %v", i, err)
						return
					}
					if s.Allowed {
						admitted.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	return int(admitted.Load())
}

func TestRouterExact(t *testing.T) {
	clk := newFakeClock()
	c := newTestCluster(t, 3, clk, crcOwner(3), ratelimit.RouterConfig{})
	const L = 50
	for _, alg := range []ratelimit.Algorithm{ratelimit.FixedWindow, ratelimit.SlidingWindow, ratelimit.SlidingLog, ratelimit.TokenBucket} {
		lim := ratelimit.Limit{Algorithm: alg, Limit: L, Period: time.Minute}
		for _, key := range []string{"user:1", "user:2", "user:3", "user:4"} {
			key := alg.String() + ":" + key
			if got := hammer(t, c, all3, key, lim, 40); got != L {
				t.Errorf("%s: %d admitted of 120 checks from 3 nodes, want exactly %d", key, got, L)
			}
		}
	}
	// Every state lives on its owner only.
	owned := make([]int, 3)
	for _, alg := range []ratelimit.Algorithm{ratelimit.FixedWindow, ratelimit.SlidingWindow, ratelimit.SlidingLog, ratelimit.TokenBucket} {
		for _, key := range []string{"user:1", "user:2", "user:3", "user:4"} {
			owned[c.owner(alg.String()+":"+key)]++
		}
	}
	var st ratelimit.RouterStats
	for i, nd := range c.nodes {
		if nd.l.Len() != owned[i] {
			t.Errorf("node %d holds %d states, owns %d keys", i, nd.l.Len(), owned[i])
		}
		s := nd.r.Stats()
		st.Local += s.Local
		st.Forwarded += s.Forwarded
		st.Fallback += s.Fallback
	}
	if st.Fallback != 0 || st.Local+st.Forwarded != 16*120 || st.Forwarded == 0 {
		t.Errorf("stats %+v, want 1920 local or forwarded, some forwarded, no fallback", st)
	}
}

// Two nodes that each believe the other owns every key: a check makes one
// hop and is decided there, never bounced back.
func TestRouterOneHop(t *testing.T) {
	clk := newFakeClock()
	c := newTestCluster(t, 2, clk, func(string) int { return 0 }, ratelimit.RouterConfig{})
	// Node 0 thinks node 1 owns everything.
	c.nodes[0].owner = func(string) (bool, string) { return false, c.nodes[1].addr }
	lim := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: 3, Period: time.Minute}
	var allowed int
	for range 5 {
		s, err := c.nodes[0].r.CheckMultiContext(t.Context(), []ratelimit.Hit{{Key: "k", Limit: lim, Cost: 1}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if s.Allowed {
			allowed++
		}
	}
	if allowed != 3 {
		t.Errorf("allowed %d, want 3", allowed)
	}
	if n0, n1 := c.nodes[0].recvd.Load(), c.nodes[1].recvd.Load(); n0 != 0 || n1 != 5 {
		t.Errorf("node 0 received %d checks, node 1 %d; want 0 and 5", n0, n1)
	}
	if c.nodes[0].l.Len() != 0 || c.nodes[1].l.Len() != 1 {
		t.Errorf("states: node 0 %d, node 1 %d; want 0 and 1", c.nodes[0].l.Len(), c.nodes[1].l.Len())
	}
	if s := c.nodes[1].r.Stats(); s != (ratelimit.RouterStats{}) {
		t.Errorf("node 1's Router was used for forwarded checks: %+v", s)
	}
}

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestRouterOwnerDownOvershoot measures the overshoot of FallbackLocal
// against the exact reference (one owner deciding: L per window) and
// checks it against the documented bound: k nodes deciding independently
// admit at most k x L per window.
func TestRouterOwnerDownOvershoot(t *testing.T) {
	const L, tries, k = 100, 200, 3
	for _, alg := range []ratelimit.Algorithm{ratelimit.FixedWindow, ratelimit.SlidingWindow, ratelimit.TokenBucket} {
		lim := ratelimit.Limit{Algorithm: alg, Limit: L, Period: time.Minute}
		for _, tc := range []struct {
			name     string
			deciders int // nodes deciding the key independently
			setup    func(c *testCluster)
		}{
			{"exact", 1, func(*testCluster) {}},
			{"owner partitioned", 3, func(c *testCluster) {
				c.nodes[0].addr = deadAddr(t) // others cannot reach it; it still serves its own clients
			}},
			{"owner down", 2, func(c *testCluster) {
				c.nodes[0].srv.Close()
			}},
		} {
			t.Run(alg.String()+"/"+tc.name, func(t *testing.T) {
				clk := newFakeClock()
				// A long forward timeout: a check slowed by a loaded machine must
				// not take the fallback in the exact case (a dead owner refuses
				// connections at once, so the other cases do not wait for it).
				c := newTestCluster(t, k, clk, func(string) int { return 0 }, ratelimit.RouterConfig{Timeout: 30 * time.Second})
				tc.setup(c)
				from := all3
				if tc.name == "owner down" {
					from = []int{1, 2}
				}
				got := hammer(t, c, from, "api:acme", lim, tries)
				t.Logf("%s, limit %d/min, %d checks from each of %v: admitted %d (exact reference %d, bound k x L = %d)",
					alg, L, tries, from, got, L, k*L)
				if got > k*L {
					t.Fatalf("admitted %d, above the documented bound %d", got, k*L)
				}
				if got != tc.deciders*L {
					t.Fatalf("admitted %d, want %d (%d nodes deciding independently)", got, tc.deciders*L, tc.deciders)
				}
				if tc.deciders > 1 {
					var fb uint64
					for _, nd := range c.nodes {
						fb += nd.r.Stats().Fallback
					}
					if fb == 0 {
						t.Fatal("no fallback counted")
					}
				}
			})
		}
	}
}

func TestRouterFallbackError(t *testing.T) {
	clk := newFakeClock()
	c := newTestCluster(t, 2, clk, func(string) int { return 0 }, ratelimit.RouterConfig{Fallback: ratelimit.FallbackError},
		ratelimit.Policy{Name: "p", Match: "*", Algorithm: ratelimit.FixedWindow, Limit: 1, Period: time.Minute})
	c.nodes[0].srv.Close()
	r := c.nodes[1].r
	_, err := r.CheckMultiContext(t.Context(), []ratelimit.Hit{{Key: "k", Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: 1, Period: time.Second}, Cost: 1}}, nil)
	if !errors.Is(err, ratelimit.ErrOwnerUnavailable) {
		t.Fatalf("err %v, want ErrOwnerUnavailable", err)
	}
	// HTTP: 503 unavailable.
	rec, ans := do(t, NewHTTPHandler(r, HTTPOptions{}), "POST", "/ratelimit/check", `{"key":"k"}`)
	if rec.Code != http.StatusServiceUnavailable || ans.Error.Code != "unavailable" {
		t.Errorf("HTTP: %d %+v", rec.Code, ans)
	}
	// RESP.
	if _, err := r.CheckArgs(args("k")); !errors.Is(err, ratelimit.ErrOwnerUnavailable) || !strings.HasPrefix(RESPError(err), "ERR owner of the key unavailable") {
		t.Errorf("RL.CHECK: %v", err)
	}
	// The middleware fails open.
	mw := Middleware(r, KeyByHeader("", "X-Key"))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		httpapi.WriteJSON(w, http.StatusOK, struct{}{})
	}))
	for range 3 {
		rec, _ := do(t, mw, "GET", "/", "", "X-Key", "k")
		if rec.Code != http.StatusOK {
			t.Fatalf("middleware: %d", rec.Code)
		}
	}
	// Envoy: Unavailable.
	_, err = envoyClient(t, r, EnvoyOptions{}).ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{desc("a", "b")}})
	if err == nil || !strings.Contains(err.Error(), "Unavailable") {
		t.Errorf("envoy: %v", err)
	}
	if s := r.Stats(); s.Unavailable != 7 || s.Fallback != 0 {
		t.Errorf("stats %+v", s)
	}
}

// A failed owner is not tried again for DownFor.
func TestRouterDownFor(t *testing.T) {
	clk := newFakeClock()
	var calls atomic.Int64
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
	}))
	defer bad.Close()
	l := newLimiter(t, clk.Now)
	r, err := ratelimit.NewRouter(l, ratelimit.RouterConfig{Owner: func(string) (bool, string) { return false, bad.URL }, Clock: clk.Now, DownFor: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	lim := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: 10, Period: time.Hour}
	check := func() {
		t.Helper()
		if s, err := r.CheckMultiContext(t.Context(), []ratelimit.Hit{{Key: "k", Limit: lim, Cost: 1}}, nil); err != nil || !s.Allowed {
			t.Fatalf("%+v, %v", s, err)
		}
	}
	check()
	check()
	if n := calls.Load(); n != 1 {
		t.Fatalf("owner tried %d times within DownFor, want 1", n)
	}
	clk.Advance(time.Second)
	check()
	if n := calls.Load(); n != 2 {
		t.Fatalf("owner tried %d times after DownFor, want 2", n)
	}
	if s := r.Stats(); s.Fallback != 3 {
		t.Fatalf("stats %+v", s)
	}
}

// A multi-key check is decided on the owner of its first key. Its other
// keys then have a second state there: the documented consequence,
// measured.
func TestRouterMultiKey(t *testing.T) {
	clk := newFakeClock()
	owner := func(key string) int { return map[string]int{"user:1": 0, "tenant:a": 1}[key] }
	c := newTestCluster(t, 3, clk, owner, ratelimit.RouterConfig{})
	const L = 10
	user := ratelimit.Limit{Name: "user", Algorithm: ratelimit.FixedWindow, Limit: 1000, Period: time.Minute}
	tenant := ratelimit.Limit{Name: "tenant", Algorithm: ratelimit.FixedWindow, Limit: L, Period: time.Minute}
	pair := []ratelimit.Hit{{Key: "user:1", Limit: user, Cost: 1}, {Key: "tenant:a", Limit: tenant, Cost: 1}}
	out := make([]ratelimit.Status, 2)
	admitted := 0
	for range 2 * L {
		s, err := c.nodes[2].r.CheckMultiContext(t.Context(), pair, out)
		if err != nil {
			t.Fatal(err)
		}
		if s.Allowed {
			admitted++
			if !out[0].Allowed || !out[1].Allowed || out[1].Limit != L {
				t.Fatalf("statuses %+v", out)
			}
		}
	}
	if admitted != L {
		t.Fatalf("pair admitted %d, want %d", admitted, L)
	}
	if c.nodes[0].l.Len() != 2 || c.nodes[1].l.Len() != 0 {
		t.Fatalf("states: node 0 %d (want both limits), node 1 %d (want 0)", c.nodes[0].l.Len(), c.nodes[1].l.Len())
	}
	// tenant:a alone goes to its owner, node 1, which has its own state.
	alone := hammer(t, c, all3, "tenant:a", tenant, 2*L)
	t.Logf("tenant:a limit %d: %d admitted in pairs (decided on user:1's owner) + %d alone (on its owner) = %d (bound: 2 deciding nodes x L = %d)",
		L, admitted, alone, admitted+alone, 2*L)
	if alone != L || admitted+alone > 2*L {
		t.Fatalf("alone %d", alone)
	}
}

func TestRouterCheckArgsAndPolicies(t *testing.T) {
	clk := newFakeClock()
	c := newTestCluster(t, 3, clk, crcOwner(3), ratelimit.RouterConfig{},
		ratelimit.Policy{Name: "per-user", Match: "user:*", Algorithm: ratelimit.SlidingLog, Limit: 4, Period: time.Minute})
	for _, key := range []string{"user:1", "user:2", "user:3"} {
		allowed := 0
		for i := range 9 {
			reply, err := c.nodes[i%3].r.CheckArgs(args(key))
			if err != nil {
				t.Fatal(err)
			}
			allowed += int(reply[0])
		}
		if allowed != 4 {
			t.Errorf("%s: RL.CHECK by policy allowed %d, want 4", key, allowed)
		}
		allowed = 0
		for i := range 9 {
			reply, err := c.nodes[i%3].r.CheckArgs(args(key + " 5 60000 1 token_bucket 5"))
			if err != nil {
				t.Fatal(err)
			}
			allowed += int(reply[0])
			if reply[0] == 0 && reply[3] <= 0 {
				t.Errorf("denied without retry_after: %v", reply)
			}
		}
		if allowed != 5 {
			t.Errorf("%s: RL.CHECK allowed %d, want 5", key, allowed)
		}
	}
	// Through the HTTP API of any node, with policies resolved there.
	for i := range 3 {
		rec, ans := do(t, NewHTTPHandler(c.nodes[i].r, HTTPOptions{}), "POST", "/ratelimit/check", `{"key":"user:9"}`)
		wantCode, wantRem := http.StatusOK, int64(3-i)
		if rec.Code != wantCode || ans.Remaining != wantRem || ans.Limits[0].Name != "per-user" || rec.Header().Get("RateLimit-Policy") == "" {
			t.Errorf("node %d: %d %+v", i, rec.Code, ans)
		}
	}
}

func TestRouterErrors(t *testing.T) {
	clk := newFakeClock()
	c := newTestCluster(t, 2, clk, func(string) int { return 0 }, ratelimit.RouterConfig{})
	r := c.nodes[1].r
	ok := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: 2, Period: time.Second}
	for _, tc := range []struct {
		name string
		hits []ratelimit.Hit
		want error
	}{
		{"no hits", nil, ratelimit.ErrInvalidRequest},
		{"empty key", []ratelimit.Hit{{Key: "", Limit: ok, Cost: 1}}, ratelimit.ErrInvalidKey},
		{"bad limit", []ratelimit.Hit{{Key: "k", Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: 0, Period: time.Second}, Cost: 1}}, ratelimit.ErrInvalidLimit},
		{"cost above capacity", []ratelimit.Hit{{Key: "k", Limit: ok, Cost: 3}}, ratelimit.ErrInvalidCost},
		{"name the wire refuses", []ratelimit.Hit{{Key: "k", Limit: ratelimit.Limit{Name: "a b", Algorithm: ratelimit.FixedWindow, Limit: 2, Period: time.Second}, Cost: 1}}, ratelimit.ErrInvalidLimit},
		{"total cost of a repeated limit", []ratelimit.Hit{{Key: "k", Limit: ok, Cost: 2}, {Key: "k", Limit: ok, Cost: 1}}, ratelimit.ErrInvalidRequest},
	} {
		_, err := r.CheckMultiContext(t.Context(), tc.hits, nil)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if s := r.Stats(); s.Fallback != 0 || s.Unavailable != 0 {
		t.Errorf("errors counted as owner failures: %+v", s)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := r.CheckMultiContext(ctx, []ratelimit.Hit{{Key: "k", Limit: ok, Cost: 1}}, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	if _, err := ratelimit.NewRouter(c.nodes[0].l, ratelimit.RouterConfig{}); !errors.Is(err, ratelimit.ErrInvalidRequest) {
		t.Errorf("NewRouter without Owner: %v", err)
	}
}

// The per-limit key and cost a Router sends are part of the HTTP API.
func TestHTTPCheckPerLimitKeyAndCost(t *testing.T) {
	l := newLimiter(t, newFakeClock().Now)
	h := NewHTTPHandler(l, HTTPOptions{})
	body := `{"key":"user:1","limits":[{"name":"user","algorithm":"fixed_window","limit":10,"period":"1m","cost":3},
		{"key":"tenant:a","name":"tenant","algorithm":"fixed_window","limit":5,"period_ms":60000}]}`
	rec, ans := do(t, h, "POST", "/ratelimit/check", body)
	if rec.Code != http.StatusOK || len(ans.Limits) != 2 || ans.Limits[0].Remaining != 7 || ans.Limits[0].Cost != 3 ||
		ans.Limits[1].Remaining != 4 || ans.Limits[1].Cost != 1 {
		t.Fatalf("%d %+v", rec.Code, ans)
	}
	if s := mustCheck(t, l, "tenant:a", ratelimit.Limit{Name: "tenant", Algorithm: ratelimit.FixedWindow, Limit: 5, Period: time.Minute}, 0); s.Remaining != 4 {
		t.Fatalf("tenant:a state: %+v", s)
	}
	for _, bad := range []string{
		`{"key":"k","limits":[{"key":"","limit":1,"period":"1s","cost":-1}]}`,
		`{"key":"k","limits":[{"key":"` + strings.Repeat("x", ratelimit.MaxKeyLen+1) + `","limit":1,"period":"1s"}]}`,
		`{"key":"k","limits":[{"limit":1,"period":"1s","cost":1.5}]}`,
	} {
		if rec, ans := do(t, h, "POST", "/ratelimit/check", bad); rec.Code != http.StatusBadRequest || ans.Error.Code != "invalid_argument" {
			t.Errorf("%s: %d %+v", bad[:40], rec.Code, ans)
		}
	}
}

// Envoy and the middleware decide on the owner too: one limit shared by
// requests arriving at every node.
func TestRouterEnvoyAndMiddleware(t *testing.T) {
	clk := newFakeClock()
	c := newTestCluster(t, 3, clk, crcOwner(3), ratelimit.RouterConfig{},
		ratelimit.Policy{Name: "per-ip", Match: "edge:remote_address=*", Algorithm: ratelimit.FixedWindow, Limit: 2, Period: time.Minute})
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{desc("remote_address", "10.0.0.1")}}
	var codes []rlsv3.RateLimitResponse_Code
	for i := range 3 {
		resp, err := envoyClient(t, c.nodes[i].r, EnvoyOptions{}).ShouldRateLimit(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		codes = append(codes, resp.OverallCode)
	}
	if codes[0] != rlsv3.RateLimitResponse_OK || codes[1] != rlsv3.RateLimitResponse_OK || codes[2] != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("envoy codes %v, want OK OK OVER_LIMIT", codes)
	}

	lim := ratelimit.Limit{Name: "mw", Algorithm: ratelimit.TokenBucket, Limit: 2, Period: time.Minute}
	var statuses []int
	for i := range 3 {
		mw := Middleware(c.nodes[i].r, KeyByHeader("user:", "X-User"), lim)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			httpapi.WriteJSON(w, http.StatusOK, struct{}{})
		}))
		rec, _ := do(t, mw, "GET", "/", "", "X-User", "42")
		statuses = append(statuses, rec.Code)
	}
	if statuses[0] != 200 || statuses[1] != 200 || statuses[2] != 429 {
		t.Errorf("middleware statuses %v, want 200 200 429", statuses)
	}
}
