package client_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/counterd/counterd/internal/api/httpapi"
	"github.com/counterd/counterd/internal/engine"
)

// newHandler returns the real HTTP API over a fresh in-memory engine, and a
// function that closes the engine.
func newHandler() (http.Handler, func(), error) {
	cfg := engine.DefaultConfig()
	cfg.InMemory = true
	cfg.NodeID = "test"
	cfg.Logger = slog.New(slog.DiscardHandler)
	eng, err := engine.Open(cfg)
	if err != nil {
		return nil, nil, err
	}
	h := httpapi.New(engine.Local(eng), httpapi.Options{Logger: slog.New(slog.DiscardHandler)})
	return h, func() { eng.Close() }, nil
}

// startServer starts the real HTTP API on a loopback port, behind wrap
// (when not nil), and returns its URL. Everything is closed at the end of
// the test.
func startServer(t testing.TB, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	h, closeEngine, err := newHandler()
	if err != nil {
		t.Fatalf("engine.Open: %v", err)
	}
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		closeEngine()
	})
	return srv.URL
}

// startExampleServer is startServer for examples, which have no testing.T.
func startExampleServer() (url string, stop func()) {
	h, closeEngine, err := newHandler()
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(h)
	return srv.URL, func() {
		srv.Close()
		closeEngine()
	}
}
