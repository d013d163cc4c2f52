package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// globalCheck is one check of the load: when it was sent and answered.
type globalCheck struct {
	sent, recv time.Time
	allowed    bool
}

// mostInSpan is the most checks of cs (allowed ones, sorted by sent) that
// may have been decided within one span of length d: those whose
// [sent, recv] meets [t, t+d], for the worst t.
func mostInSpan(cs []globalCheck, d time.Duration) int {
	sends := make([]time.Time, len(cs))
	recvs := make([]time.Time, len(cs))
	for i, c := range cs {
		sends[i], recvs[i] = c.sent, c.recv
	}
	slices.SortFunc(sends, func(a, b time.Time) int { return a.Compare(b) })
	slices.SortFunc(recvs, func(a, b time.Time) int { return a.Compare(b) })
	count := func(t time.Time) int {
		// sent <= t+d, minus those answered before t (sent before t too).
		a, _ := slices.BinarySearchFunc(sends, t.Add(d), func(x, y time.Time) int {
			if !x.After(y) {
				return -1
			}
			return 1
		})
		b, _ := slices.BinarySearchFunc(recvs, t, func(x, y time.Time) int {
			if x.Before(y) {
				return -1
			}
			return 1
		})
		return a - b
	}
	most := 0
	for i := range cs {
		most = max(most, count(recvs[i]), count(sends[i].Add(-d)))
	}
	return most
}

// TestClusterGlobalRateLimit: one global-approx limit (fixed_window,
// 200/s) hit from all three nodes of a real cluster at full speed. Every
// node answers every check itself (the forwarded and fallback decision
// counters stay 0), every node admits some, and in every window the
// admissions of all nodes stay within the bound of docs/ratelimit.md:
// Limit + (N-1) * (the most one node admitted within the longest
// exchange round trip the nodes measured).
func TestClusterGlobalRateLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster of counterd processes")
	}
	const limit, period = 200, time.Second
	c := newCluster(t, 3, loopback)
	if code, body := httpDo(t, "PUT", c.nodes[1].url+"/ratelimit/policies/hot",
		fmt.Sprintf(`{"match": "hot:*", "algorithm": "fixed_window", "limit": %d, "period": "1s", "scope": "global-approx"}`, limit)); code != 200 {
		t.Fatalf("PUT policy: %d %s", code, body)
	}
	if err := poll(10*time.Second, func() error {
		for _, n := range c.nodes {
			if code, body := httpDo(t, "GET", n.url+"/ratelimit/policies/hot", ""); code != 200 || !strings.Contains(body, "global-approx") {
				return fmt.Errorf("%s: %d %s", n.id, code, body)
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("the policy did not reach every node: %v", err)
	}

	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 10 * time.Second}
	body := []byte(`{"key": "hot:all", "policy": "hot"}`)
	const workers = 3
	stop := time.Now().Add(3500 * time.Millisecond)
	checks := make([][]globalCheck, len(c.nodes))
	var mu sync.Mutex
	var wg sync.WaitGroup
	var failed error
	for i, n := range c.nodes {
		for range workers {
			wg.Go(func() {
				var mine []globalCheck
				for time.Now().Before(stop) {
					sent := time.Now()
					resp, err := hc.Post(n.url+"/ratelimit/check", "application/json", bytes.NewReader(body))
					if err != nil {
						mu.Lock()
						failed = err
						mu.Unlock()
						return
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					recv := time.Now()
					switch resp.StatusCode {
					case 200, 429:
					default:
						mu.Lock()
						failed = fmt.Errorf("%s: %d %s", n.id, resp.StatusCode, b)
						mu.Unlock()
						return
					}
					mine = append(mine, globalCheck{sent, recv, resp.StatusCode == 200})
				}
				mu.Lock()
				checks[i] = append(checks[i], mine...)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	if failed != nil {
		t.Fatal(failed)
	}

	// The longest exchange round trip any node measured, and whether all
	// exchanges succeeded (the bound assumes they do).
	var rtt time.Duration
	for _, n := range c.nodes {
		page := metrics(t, n.url)
		if !strings.Contains(page, `counterd_ratelimit_decisions_total{decided="global"}`) {
			t.Fatalf("%s/metrics lacks the rate-limit decision counters", n.id)
		}
		for _, what := range []string{"forwarded", "fallback", "unavailable", "local"} {
			if v := metricValue(page, `counterd_ratelimit_decisions_total{decided="`+what+`"}`); v != 0 {
				t.Errorf("%s: %v checks decided %q, want every check decided here from its share", n.id, v, what)
			}
		}
		if v := metricValue(page, `counterd_ratelimit_decisions_total{decided="global"}`); v != float64(len(checks[slices.Index(c.nodes, n)])) {
			t.Errorf("%s: %v global decisions, the client got %d answers", n.id, v, len(checks[slices.Index(c.nodes, n)]))
		}
		if v := metricValue(page, `counterd_ratelimit_global_total{result="exchange_failed"}`); v != 0 {
			t.Errorf("%s: %v exchanges failed: the bound below assumes none", n.id, v)
		}
		s := metricValue(page, "counterd_ratelimit_global_max_roundtrip_seconds")
		rtt = max(rtt, time.Duration(s*float64(time.Second)))
	}

	perNode := 0 // the most one node admitted within one round trip
	var allowed [][]globalCheck
	for i, cs := range checks {
		var a []globalCheck
		for _, c := range cs {
			if c.allowed {
				a = append(a, c)
			}
		}
		if len(a) == 0 {
			t.Errorf("%s admitted nothing of %d checks: its share never came", c.nodes[i].id, len(cs))
		}
		allowed = append(allowed, a)
		perNode = max(perNode, mostInSpan(a, rtt))
	}
	bound := limit + (len(c.nodes)-1)*perNode

	// Admissions per window: a check answered in the window it was sent
	// in counts there; one sent in a window and answered in the next
	// counts in both (an upper bound for each).
	perWindow := map[int64]int{}
	total := 0
	for _, a := range allowed {
		for _, ch := range a {
			w1, w2 := ch.sent.UnixNano()/int64(period), ch.recv.UnixNano()/int64(period)
			for w := w1; w <= w2; w++ {
				perWindow[w]++
			}
			total++
		}
	}
	ws := slices.Sorted(func(yield func(int64) bool) {
		for w := range perWindow {
			if !yield(w) {
				return
			}
		}
	})
	var got []string
	for _, w := range ws {
		got = append(got, strconv.Itoa(perWindow[w]))
		if perWindow[w] > bound {
			t.Errorf("window %d: %d admitted, above the bound %d (limit %d + 2 x %d, round trip %s)", w, perWindow[w], bound, limit, perNode, rtt)
		}
	}
	if total < limit {
		t.Errorf("%d admitted in all, fewer than one window's limit %d", total, limit)
	}
	// RESP: RL.CHECK on the policy's keys is decided the same way, on
	// the node that got it.
	for _, nd := range c.nodes {
		rdb := redis.NewClient(&redis.Options{Addr: nd.resp, MaxRetries: -1})
		v, err := rdb.Do(context.Background(), "RL.CHECK", "hot:resp").Slice()
		rdb.Close()
		if err != nil || len(v) != 4 {
			t.Fatalf("%s RL.CHECK: %v %v", nd.id, v, err)
		}
		page := metrics(t, nd.url)
		if g := metricValue(page, `counterd_ratelimit_decisions_total{decided="global"}`); g != float64(len(checks[slices.Index(c.nodes, nd)])+1) {
			t.Errorf("%s: RL.CHECK was not decided from the node's share (%v global decisions)", nd.id, g)
		}
		if f := metricValue(page, `counterd_ratelimit_decisions_total{decided="forwarded"}`); f != 0 {
			t.Errorf("%s: RL.CHECK forwarded", nd.id)
		}
	}
	n := []int{len(checks[0]), len(checks[1]), len(checks[2])}
	t.Logf("checks per node %v; admitted per window %v; bound %d (limit %d + 2 x %d admitted within the longest round trip %s)",
		n, got, bound, limit, perNode, rtt)
}
