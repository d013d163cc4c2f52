package httpapi

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/counterd/counterd/internal/engine"
)

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// openEngine opens an in-memory engine closed at the end of the test;
// mods adjust the configuration.
func openEngine(t testing.TB, mods ...func(*engine.Config)) *engine.Engine {
	t.Helper()
	cfg := engine.DefaultConfig()
	cfg.InMemory = true
	cfg.NodeID = "test"
	cfg.Logger = quietLogger()
	for _, m := range mods {
		m(&cfg)
	}
	eng, err := engine.Open(cfg)
	if err != nil {
		t.Fatalf("engine.Open: %v", err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	return eng
}

type testServer struct {
	t   testing.TB
	srv *httptest.Server
	eng *engine.Engine
	h   *Handler
}

func newTestServer(t testing.TB, opts Options) *testServer {
	t.Helper()
	eng := openEngine(t)
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	h := New(engine.Local(eng), opts)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &testServer{t: t, srv: srv, eng: eng, h: h}
}

// answer is a decoded response.
type answer struct {
	Status int
	Header http.Header
	Raw    []byte
	Body   map[string]any // numbers are json.Number
}

// do sends a request; hdrs are name, value pairs.
func (s *testServer) do(method, path, body string, hdrs ...string) answer {
	s.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.srv.URL+path, rd)
	if err != nil {
		s.t.Fatalf("NewRequest %s %s: %v", method, path, err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdrs); i += 2 {
		req.Header.Add(hdrs[i], hdrs[i+1])
	}
	resp, err := s.srv.Client().Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	a := answer{Status: resp.StatusCode, Header: resp.Header, Raw: raw}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&a.Body); err != nil {
			s.t.Fatalf("%s %s: answer is not a JSON object: %v\n%s", method, path, err, raw)
		}
	}
	return a
}

// ok sends a request that must answer 200.
func (s *testServer) ok(method, path, body string, hdrs ...string) answer {
	s.t.Helper()
	a := s.do(method, path, body, hdrs...)
	if a.Status != http.StatusOK {
		s.t.Fatalf("%s %s %s: status %d, want 200: %s", method, path, body, a.Status, a.Raw)
	}
	if a.Body["status"] != nil && a.Body["status"] != "ok" {
		s.t.Fatalf("%s %s: status member %v: %s", method, path, a.Body["status"], a.Raw)
	}
	return a
}

// fail sends a request that must answer the JSON error code with status.
func (s *testServer) fail(status int, code, method, path, body string, hdrs ...string) answer {
	s.t.Helper()
	a := s.do(method, path, body, hdrs...)
	checkError(s.t, a.Status, a.Raw, status, code)
	return a
}

// checkError checks that raw is the JSON error answer with code and status.
func checkError(t testing.TB, gotStatus int, raw []byte, status int, code string) {
	t.Helper()
	var e struct {
		Status string `json:"status"`
		Error  struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatalf("error answer is not JSON: %v: %q", err, raw)
	}
	if gotStatus != status || e.Status != "error" || e.Error.Code != code || e.Error.Message == "" {
		t.Fatalf("got %d %s, want %d with code %q", gotStatus, raw, status, code)
	}
}

// num returns the integer member key of a.
func (a answer) num(t testing.TB, key string) int64 {
	t.Helper()
	n, ok := a.Body[key].(json.Number)
	if !ok {
		t.Fatalf("member %q is %T (%v), want a number: %s", key, a.Body[key], a.Body[key], a.Raw)
	}
	v, err := n.Int64()
	if err != nil {
		t.Fatalf("member %q = %s is not an int64", key, n)
	}
	return v
}

// value reads a counter's value with GET /counters/{id}.
func (s *testServer) value(escapedID string) int64 {
	s.t.Helper()
	return s.ok("GET", "/counters/"+escapedID, "").num(s.t, "value")
}
