package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/counterd/counterd/internal/engine"
)

// TestEventsStatus: the embedded pipeline (no stream) applies events by
// their ts; GET /events/status reports the watermark and the events
// dead-lettered too_early and too_late.
func TestEventsStatus(t *testing.T) {
	ecfg := engine.DefaultConfig()
	ecfg.InMemory = true
	e, err := engine.Open(ecfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	os.WriteFile(rules, []byte(`rules:
  - name: recent
    counter: '"recent:" + event.post'
    window: {granularity: 1m, span: 1h, by: "1"}
`), 0o644)
	cfg := Config{Rules: rules, AllowedLateness: 20 * time.Minute, MaxSkew: time.Minute}
	p, err := Open(context.Background(), cfg, engine.Local(e), prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	status := func() Status {
		t.Helper()
		resp, err := http.Get(srv.URL + "/events/status")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var st Status
		if resp.StatusCode != 200 || json.Unmarshal(b, &st) != nil {
			t.Fatalf("GET /events/status: %d %s", resp.StatusCode, b)
		}
		return st
	}
	st := status()
	if !st.Consuming || st.EventTime.Watermark != nil || st.EventTime.AllowedLateness != "20m0s" || st.EventTime.MaxSkew != "1m0s" {
		t.Fatalf("before any event: %+v", st)
	}
	now := time.Now()
	newest := now.Add(-5 * time.Minute).Truncate(time.Millisecond)
	var body bytes.Buffer
	for i, ts := range []time.Time{now.Add(-10 * time.Minute), newest, now.Add(-30 * time.Minute), now.Add(time.Hour)} {
		fmt.Fprintf(&body, `{"id":"e%d","type":"v","ts":%d,"post":"p"}`+"\n", i, ts.UnixMilli())
	}
	resp, err := http.Post(srv.URL+"/events", "application/x-ndjson", &body)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || !strings.Contains(string(b), "too_late") || !strings.Contains(string(b), "too_early") {
		t.Fatalf("POST /events: %d %s", resp.StatusCode, b)
	}
	st = status()
	if st.EventTime.Watermark == nil || !st.EventTime.Watermark.Equal(newest) || st.EventTime.TooLate != 1 || st.EventTime.TooEarly != 1 {
		t.Fatalf("after the events: %+v (watermark %v, want %v)", st, st.EventTime.Watermark, newest)
	}
	if v, _ := e.Get("recent:p"); v.Value != 2 {
		t.Fatalf("window %d, want 2", v.Value)
	}
}
