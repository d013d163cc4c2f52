package ui_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/auth"
	"github.com/counterd/counterd/internal/buildinfo"
	"github.com/counterd/counterd/internal/server"
	"github.com/counterd/counterd/internal/ui"
)

// noRedirect is a client that shows redirects instead of following them.
var noRedirect = &http.Client{
	Timeout:       30 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

func fetch(t *testing.T, method, url string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(b)
}

// TestConsoleServed: the real server serves the console's files as
// public routes with their types and security headers, redirects / to
// it, tells the console whether --auth is on, and keeps every API route
// behind the token; the guard accepts the server's own origin only.
func TestConsoleServed(t *testing.T) {
	const token = "console-reader-0123456789abcdef"
	tokens := filepath.Join(t.TempDir(), "tokens.yaml")
	body := fmt.Sprintf("users:\n  reader:\n    tokens: [%q]\n    grants: {\"page_views:*\": read}\n", auth.Hash([]byte(token)).String())
	if err := os.WriteFile(tokens, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, withAuth := range []bool{false, true} {
		t.Run(fmt.Sprintf("auth=%v", withAuth), func(t *testing.T) {
			base := startServer(t, func(c *server.Config) {
				if withAuth {
					c.Auth = tokens
				}
			})
			for _, p := range []string{"/", "/ui"} {
				res, _ := fetch(t, "GET", base+p)
				if res.StatusCode != http.StatusFound || res.Header.Get("Location") != "/ui/" {
					t.Errorf("GET %s: %d Location %q, want 302 to /ui/", p, res.StatusCode, res.Header.Get("Location"))
				}
			}
			for path, ctype := range map[string]string{
				"/ui/":            "text/html; charset=utf-8",
				"/ui/index.html":  "text/html; charset=utf-8",
				"/ui/js/app.js":   "text/javascript; charset=utf-8",
				"/ui/style.css":   "text/css; charset=utf-8",
				"/ui/favicon.svg": "image/svg+xml",
			} {
				res, b := fetch(t, "GET", base+path)
				if res.StatusCode != 200 || res.Header.Get("Content-Type") != ctype || len(b) == 0 {
					t.Errorf("GET %s: %d %q, %d bytes; want 200 %q", path, res.StatusCode, res.Header.Get("Content-Type"), len(b), ctype)
				}
				if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
					t.Errorf("GET %s: CSP %q", path, csp)
				}
				if res.Header.Get("X-Content-Type-Options") != "nosniff" {
					t.Errorf("GET %s: no nosniff", path)
				}
				// Revalidation by ETag.
				if et := res.Header.Get("ETag"); et == "" {
					t.Errorf("GET %s: no ETag", path)
				} else if res2, _ := fetch(t, "GET", base+path, "If-None-Match", et); res2.StatusCode != http.StatusNotModified {
					t.Errorf("GET %s If-None-Match: %d, want 304", path, res2.StatusCode)
				}
			}
			res, b := fetch(t, "GET", base+"/ui/config.json")
			var cfg struct {
				Auth    bool   `json:"auth"`
				Version string `json:"version"`
			}
			if err := json.Unmarshal([]byte(b), &cfg); err != nil || res.StatusCode != 200 || cfg.Auth != withAuth || cfg.Version != buildinfo.Version() {
				t.Errorf("config.json: %d %s", res.StatusCode, b)
			}
			if res, b := fetch(t, "GET", base+"/ui/nope.js"); res.StatusCode != 404 || !strings.Contains(b, `"not_found"`) {
				t.Errorf("missing file: %d %s", res.StatusCode, b)
			}
			// Only GET is public: another method needs a token first.
			if res, _ := fetch(t, "POST", base+"/ui/"); withAuth && res.StatusCode != 401 ||
				!withAuth && (res.StatusCode != 405 || res.Header.Get("Allow") != "GET, HEAD") {
				t.Errorf("POST /ui/: %d", res.StatusCode)
			}

			// The API stays behind the token; the console's own origin
			// passes the guard, another origin does not.
			want := 200
			if withAuth {
				want = 401
			}
			if res, b := fetch(t, "GET", base+"/counters"); res.StatusCode != want {
				t.Errorf("GET /counters without a token: %d %s, want %d", res.StatusCode, b, want)
			}
			if res, b := fetch(t, "GET", base+"/ratelimit/decisions"); res.StatusCode != want {
				t.Errorf("GET /ratelimit/decisions without a token: %d %s, want %d", res.StatusCode, b, want)
			}
			bearer := []string{}
			if withAuth {
				bearer = []string{"Authorization", "Bearer " + token}
				// Decisions show keys of every namespace: read on one is not enough.
				if res, b := fetch(t, "GET", base+"/ratelimit/decisions", bearer...); res.StatusCode != 403 {
					t.Errorf("GET /ratelimit/decisions as a page_views reader: %d %s, want 403", res.StatusCode, b)
				}
			}
			own := append([]string{"Origin", base}, bearer...)
			if res, b := fetch(t, "GET", base+"/counters?prefix=page_views:", own...); res.StatusCode != 200 {
				t.Errorf("same-origin GET: %d %s", res.StatusCode, b)
			}
			if res, b := fetch(t, "GET", base+"/counters?prefix=page_views:", append([]string{"Origin", "http://evil.example"}, bearer...)...); res.StatusCode != 403 || !strings.Contains(b, "origin_not_allowed") {
				t.Errorf("cross-origin GET: %d %s", res.StatusCode, b)
			}
		})
	}
}

// TestServes: which requests the server hands to the console.
func TestServes(t *testing.T) {
	for _, tc := range []struct {
		method, path string
		want         bool
	}{
		{"GET", "/", true}, {"HEAD", "/", true}, {"POST", "/", false},
		{"GET", "/ui", true}, {"GET", "/ui/", true}, {"GET", "/ui/js/app.js", true}, {"POST", "/ui/", true},
		{"GET", "/uix", false}, {"GET", "/counters", false}, {"GET", "/u", false},
	} {
		r, _ := http.NewRequest(tc.method, "http://localhost"+tc.path, nil)
		if got := ui.Serves(r); got != tc.want {
			t.Errorf("Serves(%s %s) = %v, want %v", tc.method, tc.path, got, tc.want)
		}
	}
}
