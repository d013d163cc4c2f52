package server

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestGuard(t *testing.T) {
	cfg := DefaultConfig()
	cfg.AllowedHosts = "counters.internal, api.example:8443"
	cfg.CORSOrigin = "https://app.example"
	g := newGuardConfig(cfg, "10.1.2.3:8080", nil)
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })
	h := guard(g, ok)
	cases := []struct {
		name, method, host, origin, ctype, body string
		want                                    int
	}{
		{"loopback", "POST", "127.0.0.1:8080", "", "application/json", "{}", 200},
		{"loopback range", "POST", "127.8.9.10", "", "", "{}", 200},
		{"localhost", "GET", "LOCALHOST:1", "", "", "", 200},
		{"ipv6 loopback", "GET", "[::1]:8080", "", "", "", 200},
		{"bound address", "GET", "10.1.2.3:8080", "", "", "", 200},
		{"bound ip, other port", "GET", "10.1.2.3:9999", "", "", "", 421},
		{"allowed name any port", "GET", "counters.internal:1234", "", "", "", 200},
		{"allowed host:port", "GET", "api.example:8443", "", "", "", 200},
		{"allowed host, other port", "GET", "api.example:80", "", "", "", 421},
		{"rebinding name", "GET", "evil.example:8080", "", "", "", 421},
		{"no host (HTTP/1.0)", "GET", "", "", "", "", 200},
		{"allowed origin", "POST", "localhost", "https://app.example", "application/json", "{}", 200},
		{"other origin", "POST", "localhost", "https://evil.example", "text/plain", "{}", 403},
		{"other origin GET", "GET", "localhost", "https://evil.example", "", "", 403},
		{"same origin (the console)", "POST", "127.0.0.1:8080", "http://127.0.0.1:8080", "application/json", "{}", 200},
		{"same origin, other case", "GET", "LOCALHOST:8080", "http://localhost:8080", "", "", 200},
		{"same host, other port", "POST", "127.0.0.1:8080", "http://127.0.0.1:3000", "application/json", "{}", 403},
		{"same host, https origin on http", "POST", "127.0.0.1:8080", "https://127.0.0.1:8080", "application/json", "{}", 403},
		{"same origin, rebinding name", "GET", "evil.example:8080", "http://evil.example:8080", "", "", 421},
		{"origin null", "POST", "localhost", "null", "application/json", "{}", 403},
		{"curl -d", "POST", "localhost", "", "application/x-www-form-urlencoded", "{}", 200},
		{"json with charset", "POST", "localhost", "", "application/json; charset=utf-8", "{}", 200},
		{"problem+json", "POST", "localhost", "", "application/merge-patch+json", "{}", 200},
		{"text/plain", "POST", "localhost", "", "text/plain", "{}", 415},
		{"multipart", "POST", "localhost", "", "multipart/form-data; boundary=x", "{}", 415},
		{"bad media type", "POST", "localhost", "", "a/b; ===", "{}", 415},
		{"text/plain without body", "DELETE", "localhost", "", "text/plain", "", 200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, "/counters/a", strings.NewReader(tc.body))
			r.Host = tc.host
			if tc.origin != "" {
				r.Header.Set("Origin", tc.origin)
			}
			if tc.ctype != "" {
				r.Header.Set("Content-Type", tc.ctype)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.want {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.want, w.Body)
			}
			if w.Code != 200 && !strings.HasPrefix(w.Body.String(), `{"status":"error","error":{"code":"`) {
				t.Fatalf("error body %s", w.Body)
			}
		})
	}
}

// TestGuardBinaryBodies: application/octet-stream is a snapshot chunk's
// type, accepted on that route only.
func TestGuardBinaryBodies(t *testing.T) {
	h := guard(newGuardConfig(DefaultConfig(), "127.0.0.1:8080", nil), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for path, want := range map[string]int{"/admin/snapshot/chunks": 200, "/counters/a/increment": 415, "/batch": 415} {
		r := httptest.NewRequest("POST", path, strings.NewReader("CSC1\x00"))
		r.Host = "localhost"
		r.Header.Set("Content-Type", "application/octet-stream")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != want {
			t.Errorf("octet-stream POST %s: %d, want %d", path, w.Code, want)
		}
	}
}

func TestGuardWildcardBind(t *testing.T) {
	for _, bound := range []string{"0.0.0.0:8080", "[::]:8080"} {
		g := newGuardConfig(DefaultConfig(), bound, nil)
		if g.hostAllowed(bound) {
			t.Errorf("wildcard %s accepted as a Host", bound)
		}
	}
}

// TestHostAllowedProperty: with nothing configured, a Host is accepted
// exactly when it names a loopback address or localhost, whatever its
// shape, and checking never panics.
func TestHostAllowedProperty(t *testing.T) {
	g := newGuardConfig(DefaultConfig(), "", nil)
	rapid.Check(t, func(t *rapid.T) {
		host := rapid.OneOf(
			rapid.SampledFrom([]string{"127.0.0.1", "127.255.0.9", "[::1]", "localhost", "LocalHost"}),
			rapid.StringMatching(`[a-z0-9.\-\[\]:]{1,30}`),
		).Draw(t, "host")
		port := rapid.SampledFrom([]string{"", ":80", ":8080", ":"}).Draw(t, "port")
		got := g.hostAllowed(host + port)
		name := strings.ToLower(strings.Trim(host, "[]"))
		want := name == "localhost" || name == "127.0.0.1" || name == "127.255.0.9" || name == "::1"
		if want && !got {
			t.Fatalf("loopback %q refused", host+port)
		}
		if got && !want && !strings.HasPrefix(name, "127.") && !strings.Contains(name, ":") {
			// Other accepted shapes must at least parse as loopback IPs.
			t.Fatalf("%q accepted", host+port)
		}
	})
}

// TestSameOriginProperty: with no --cors-origin, a request with an Origin
// passes the guard exactly when the Origin is the request's own scheme and
// Host (any letter case), for a Host the guard serves.
func TestSameOriginProperty(t *testing.T) {
	h := guard(newGuardConfig(DefaultConfig(), "", nil), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) }))
	rapid.Check(t, func(t *rapid.T) {
		host := rapid.SampledFrom([]string{"127.0.0.1", "localhost", "LocalHost", "[::1]", "127.0.0.2"}).Draw(t, "host") +
			rapid.SampledFrom([]string{"", ":8080", ":80", ":1"}).Draw(t, "port")
		tls := rapid.Bool().Draw(t, "tls")
		own := "http://" + host
		if tls {
			own = "https://" + host
		}
		origin := rapid.OneOf(
			rapid.Just(own),
			rapid.Just(strings.ToUpper(own)),
			rapid.SampledFrom([]string{own + "/", own + ":9", "https://" + host, "http://" + host, "null", "http://evil.example", own + ".evil.example"}),
			rapid.StringMatching(`[a-zA-Z:/.\[\]0-9]{0,30}`),
		).Draw(t, "origin")
		r := httptest.NewRequest("GET", "/counters", nil)
		r.Host = host
		if tls {
			r.TLS = &tlsState
		}
		if origin != "" {
			r.Header.Set("Origin", origin)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		want := 403
		if origin == "" || strings.EqualFold(origin, own) {
			want = 200
		}
		if w.Code != want {
			t.Fatalf("Host %q tls %v Origin %q: %d, want %d", host, tls, origin, w.Code, want)
		}
	})
}

var tlsState tls.ConnectionState
