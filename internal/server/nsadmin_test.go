package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/counterd/counterd/internal/auth"
)

const (
	tokNSAdmin = "nsa-admin-token-0123456789"
	tokRoot    = "root-admin-token-0123456789"
	tokScraper = "scraper-token-0123456789"
	tokWriteA  = "nsa-writer-token-0123456789"
)

// startWithTokens runs an embedded node with --auth on HTTP and RESP:
// nsadmin holds admin on nsA:* only, root admin on *, scraper read on *,
// writer write on nsA:* only.
func startWithTokens(t *testing.T) (httpBase, respAddr string) {
	t.Helper()
	d := func(tok string) string { return auth.Hash([]byte(tok)).String() }
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	src := fmt.Sprintf(`users:
  nsadmin: {tokens: [%s], grants: {"nsA:*": admin}}
  root: {tokens: [%s], grants: {"*": admin}}
  scraper: {tokens: [%s], grants: {"*": read}}
  writer: {tokens: [%s], grants: {"nsA:*": write}}
`, d(tokNSAdmin), d(tokRoot), d(tokScraper), d(tokWriteA))
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	addrs := startEmbedded(t, func(c *Config) {
		c.Auth = path
		c.RESP = "127.0.0.1:0"
	})
	return "http://" + addrs["http"], addrs["resp"]
}

// call sends one request with token and returns its status and body.
func call(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestNamespaceAdmin: a token with admin on nsA:* manages the rollup
// specs of namespace nsA (and of its ids) and lists the namespace with
// any match, as docs/security.md says; it is refused (403 forbidden) for
// nsB, for a wider prefix and for the routes that need a grant of *. A
// listing by prefix and match still returns exactly the ids meeting both.
// On RESP, SCAN MATCH and KEYS follow the same rule.
func TestNamespaceAdmin(t *testing.T) {
	base, respAddr := startWithTokens(t)
	for _, id := range []string{"nsA:1", "nsA:2", "nsA:x1", "nsAB:1", "nsB:1"} {
		if code, body := call(t, "POST", base+"/counters/"+id+"/increment", tokRoot, `{"delta":1}`); code != 200 {
			t.Fatalf("setup %s: %d %s", id, code, body)
		}
	}
	for _, tc := range []struct {
		method, path, body string
		want               int
	}{
		{"PUT", "/rollups/nsA", `{"minute":"1h"}`, 200},
		{"GET", "/rollups/nsA", "", 200},
		{"DELETE", "/rollups/nsA", "", 200},
		{"PUT", "/rollups/nsA:1", `{"minute":"1h"}`, 200},
		{"DELETE", "/rollups/nsA:1", "", 200},
		{"GET", "/counters?prefix=nsA:&match=*", "", 200},
		{"GET", "/counters?prefix=nsA:&match=*1", "", 200},
		{"GET", "/counters?prefix=nsA:", "", 200},
		{"GET", "/counters?match=nsA:*", "", 200},
		{"GET", "/counters/nsA:*/aggregate", "", 200},
		{"DELETE", "/counters/nsA:2", "", 200},

		{"PUT", "/rollups/nsB", `{"minute":"1h"}`, 403},
		{"DELETE", "/rollups/nsB", "", 403},
		{"PUT", "/rollups/nsAB", `{"minute":"1h"}`, 403},
		{"PUT", "/rollups/nsB:1", `{"minute":"1h"}`, 403},
		{"GET", "/counters?prefix=nsB:&match=*", "", 403},
		{"GET", "/counters?prefix=nsA&match=*", "", 403}, // nsAB:... too
		{"GET", "/counters?match=*", "", 403},
		{"GET", "/counters", "", 403},
		{"DELETE", "/counters/nsB:1", "", 403},
		{"DELETE", "/ratelimit/policies/p", "", 403},
		{"GET", "/ratelimit/decisions", "", 403},
		{"GET", "/admin/snapshot/manifest", "", 403},
	} {
		code, body := call(t, tc.method, base+tc.path, tokNSAdmin, tc.body)
		if code != tc.want {
			t.Errorf("%s %s as nsA admin: %d %s, want %d", tc.method, tc.path, code, body, tc.want)
		} else if code == 403 && !strings.Contains(body, `"forbidden"`) {
			t.Errorf("%s %s: 403 without code forbidden: %s", tc.method, tc.path, body)
		}
	}

	// The listings are exact, for the namespace admin and for root.
	list := func(token, query string) []string {
		t.Helper()
		code, body := call(t, "GET", base+"/counters?"+query+"&limit=10000", token, "")
		if code != 200 {
			t.Fatalf("list %s: %d %s", query, code, body)
		}
		var a struct{ IDs []string }
		if err := json.Unmarshal([]byte(body), &a); err != nil {
			t.Fatal(err)
		}
		slices.Sort(a.IDs)
		return a.IDs
	}
	for _, tc := range []struct {
		token, query string
		want         []string
	}{
		{tokNSAdmin, "prefix=nsA:&match=*", []string{"nsA:1", "nsA:x1"}},
		{tokNSAdmin, "prefix=nsA:&match=*1", []string{"nsA:1", "nsA:x1"}},
		{tokNSAdmin, "prefix=nsA:&match=nsA:x*", []string{"nsA:x1"}},
		{tokRoot, "prefix=nsA&match=*1", []string{"nsA:1", "nsA:x1", "nsAB:1"}},
		{tokRoot, "prefix=n&match=nsB:*", []string{"nsB:1"}},
		{tokRoot, "prefix=nsA:&match=nsB:*", []string{}},
	} {
		if got := list(tc.token, tc.query); !slices.Equal(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
			t.Errorf("list %s: %v, want %v", tc.query, got, tc.want)
		}
	}

	// RESP: SCAN MATCH and KEYS within the namespace; refused outside.
	rdb := redis.NewClient(&redis.Options{Addr: respAddr, Password: tokNSAdmin, Protocol: 2, DisableIdentity: true})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if keys, _, err := rdb.Scan(ctx, 0, "nsA:*", 1000).Result(); err != nil || len(keys) == 0 {
		t.Errorf("SCAN 0 MATCH nsA:* as nsA admin: %v %v", keys, err)
	}
	if keys, err := rdb.Keys(ctx, "nsA:*").Result(); err != nil || len(keys) == 0 {
		t.Errorf("KEYS nsA:* as nsA admin: %v %v", keys, err)
	}
	for _, args := range [][]any{{"SCAN", "0", "MATCH", "nsB:*"}, {"SCAN", "0"}, {"KEYS", "*"}, {"KEYS", "nsA*"}} {
		if err := rdb.Do(ctx, args...).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
			t.Errorf("%v as nsA admin: %v, want NOPERM", args, err)
		}
	}
}

// TestMetricsScrape: with --auth, GET /metrics needs read on *: a
// Prometheus scrape with the bearer token of such a user (and
// Prometheus's Accept header) gets the exposition, a token of one
// namespace (write, even admin) gets 403, none 401. Without --auth a
// loopback scrape needs no token.
func TestMetricsScrape(t *testing.T) {
	base, _ := startWithTokens(t)
	scrape := func(base, token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", base+"/metrics", nil)
		req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0;escaping=underscores,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
		req.Header.Set("User-Agent", "Prometheus/3.5.0")
		req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", "10")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	for _, tc := range []struct {
		who, token string
		want       int
	}{
		{"read on *", tokScraper, 200},
		{"admin on *", tokRoot, 200},
		{"write on nsA:*", tokWriteA, 403},
		{"admin on nsA:*", tokNSAdmin, 403},
		{"no token", "", 401},
	} {
		code, body := scrape(base, tc.token)
		if code != tc.want {
			t.Errorf("GET /metrics as %s: %d, want %d: %.200s", tc.who, code, tc.want, body)
		}
		if code == 200 && !strings.Contains(body, "counterd_build_info") {
			t.Errorf("GET /metrics as %s: no counterd_build_info in %.200s", tc.who, body)
		}
	}
	open := "http://" + startEmbedded(t, nil)["http"]
	if code, body := scrape(open, ""); code != 200 || !strings.Contains(body, "counterd_build_info") {
		t.Errorf("GET /metrics without --auth and without a token: %d %.200s", code, body)
	}
}
