package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/pipeline"
	"github.com/counterd/counterd/internal/pipeline/stream"
)

// TestReadyWithStream: GET /readyz keeps the engine's answer and its
// other checks, adds checks.stream, and answers 503 stream_unavailable
// only with ?for=events while the stream is not connected.
func TestReadyWithStream(t *testing.T) {
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"status":"ok","checks":{"disk":{"ok":true}}}` + "\n"))
	})
	since := time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC)
	st := pipeline.StreamState{Stream: "nats:S", State: pipeline.StateUnreachable, Since: since, Error: "connection refused"}
	h := readyWithStream(func() (pipeline.StreamState, bool) { return st, true }, inner)
	get := func(target string) (int, map[string]any) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", target, nil))
		var m map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
			t.Fatalf("%s: %v: %s", target, err, rec.Body)
		}
		return rec.Code, m
	}
	code, m := get("/readyz")
	checks, _ := m["checks"].(map[string]any)
	s, _ := checks["stream"].(map[string]any)
	if code != 200 || m["status"] != "ok" || checks["disk"] == nil || s["ok"] != false || s["state"] != "unreachable" ||
		s["error"] != "connection refused" || s["since"] != "2026-11-29T01:00:00Z" || s["stream"] != "nats:S" {
		t.Fatalf("GET /readyz: %d %v", code, m)
	}
	code, m = get("/readyz?for=events")
	e, _ := m["error"].(map[string]any)
	if code != 503 || m["status"] != "error" || e["code"] != "stream_unavailable" {
		t.Fatalf("GET /readyz?for=events while unreachable: %d %v", code, m)
	}
	st = pipeline.StreamState{Stream: "nats:S", OK: true, State: pipeline.StateConnected, Since: since}
	if code, m = get("/readyz?for=events"); code != 200 || m["status"] != "ok" {
		t.Fatalf("GET /readyz?for=events while connected: %d %v", code, m)
	}
}

// TestEventsAdderStreamUnavailable: RESP EVENTS.ADD's error names the
// code of POST /events' 503 while the stream (here a NATS URL nothing
// listens on) cannot be reached, and counterd's pipeline opens anyway.
func TestEventsAdderStreamUnavailable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "nats://" + ln.Addr().String()
	ln.Close()
	cfg := engine.DefaultConfig()
	cfg.InMemory = true
	e, err := engine.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	p, err := pipeline.Open(context.Background(), pipeline.Config{NATS: stream.JetStreamConfig{URL: url}, EventsTimeout: time.Second},
		engine.Local(e), nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, err = eventsAdder(p)(context.Background(), []byte(`{"id":"a","type":"t","ts":1}`))
	if err == nil || !strings.HasPrefix(err.Error(), "stream_unavailable: ") {
		t.Fatalf("EVENTS.ADD with the stream down: %v", err)
	}
}
