package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/counterd/counterd/client"
	"github.com/counterd/counterd/internal/api/httpapi"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/pipeline"
)

// startPipelineServer serves the HTTP API and POST /events of an embedded
// pipeline (no stream: the rules apply at once) over an in-memory engine.
func startPipelineServer(t *testing.T) string {
	t.Helper()
	cfg := engine.DefaultConfig()
	cfg.InMemory = true
	cfg.Logger = slog.New(slog.DiscardHandler)
	eng, err := engine.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	os.WriteFile(rules, []byte(`rules:
  - name: views
    counter: '"views:" + event.post'
    add: "1"
`), 0o644)
	be := engine.Local(eng)
	pl, err := pipeline.Open(context.Background(), pipeline.Config{Rules: rules, DeadLetterFile: filepath.Join(t.TempDir(), "dead.ndjson")}, be, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/events", pl.Handler())
	mux.Handle("/events/dead", pl.Handler())
	mux.Handle("/", httpapi.New(be, httpapi.Options{Logger: slog.New(slog.DiscardHandler)}))
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.Close()
		pl.Close()
		eng.Close()
	})
	return srv.URL
}

func TestEventsCommand(t *testing.T) {
	addr := startPipelineServer(t)
	var b strings.Builder
	for i := range 2500 {
		if i == 1234 {
			fmt.Fprintf(&b, `{"id":"e%d","type":"view","ts":1}`+"\n", i) // no post: dead letter
			continue
		}
		fmt.Fprintf(&b, `{"id":"e%d","type":"view","ts":"2026-01-01T00:00:00Z","post":"p%d"}`+"\n", i, i%2)
	}
	b.WriteString(`{"id":"e0","type":"view","ts":1,"post":"p0"}` + "\n") // a copy: counted once
	file := filepath.Join(t.TempDir(), "events.ndjson")
	os.WriteFile(file, []byte(b.String()), 0o644)

	out := ok(t, addr, "events", file, "--batch", "300", "--no-progress")
	wantMatch(t, out, `^sent 2501 events in 9 batches in .* \(\d+ events/s\)\ndead letter: event 1234 \(e1234\): rules: evaluation failed: rule "views" counter: no such key: post\n$`)
	wantMatch(t, ok(t, addr, "events", "--dead", "5"), `^\{"source":"http","partition":0,"offset":\d+,"index":0,"reason":"rules: evaluation failed: rule \\"views\\" counter: no such key: post","event":\{"id":"e1234","type":"view","ts":1\}\}\n$`)
	wantMatch(t, ok(t, addr, "get", "views:p0"), `^views:p0  1249  `)
	wantMatch(t, ok(t, addr, "get", "views:p1"), `^views:p1  1250  `)

	// A bad file is refused before anything is sent.
	os.WriteFile(file, []byte("{\"id\":\"x\"}\nnot json\n"), 0o644)
	if code, _, errOut := ctl(t, addr, "events", file); code != 2 || !strings.Contains(errOut, ":2: not a JSON event") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	// A batch whose every event is bad is refused by the server, whole.
	os.WriteFile(file, []byte(`[{"id":"x","type":"view"}]`), 0o644)
	if code, _, errOut := ctl(t, addr, "events", file); code != 1 || !strings.Contains(errOut, "invalid_event") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	// A bad event among good ones is refused alone and reported; the
	// good ones are counted, and the refused one is a dead letter.
	os.WriteFile(file, []byte(`[{"id":"r1","type":"view","ts":1,"post":"p7"},{"id":"r2","type":"view","post":"p7"},{"id":"r3","type":"view","ts":1,"post":"p7"}]`), 0o644)
	wantMatch(t, ok(t, addr, "events", file, "--no-progress"),
		`^sent 3 events in 1 batches in .*\n1 events refused \(dead-lettered, not counted\):\nrefused: event 1: event: invalid event: no "ts"\n$`)
	wantMatch(t, ok(t, addr, "get", "views:p7"), `^views:p7  2  `)
	wantMatch(t, ok(t, addr, "events", "--dead", "1"), `^\{"source":"collector:http","partition":-1,"offset":-1,"index":1,"reason":"event: invalid event: no \\"ts\\"","event":\{"id":"r2","type":"view","post":"p7"\}\}\n$`)

	// The Go client sends typed events.
	c, err := client.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.SendEvents(context.Background(), []client.Event{
		{ID: "c1", Type: "view", Time: time.Now(), Attrs: map[string]any{"post": "p9"}},
		{ID: "c2", Type: "view", Time: time.Now(), Attrs: map[string]any{"post": "p9"}},
	})
	if err != nil || res.Accepted != 2 || len(res.DeadLetters) != 0 {
		t.Fatalf("SendEvents: %+v, %v", res, err)
	}
	wantMatch(t, ok(t, addr, "get", "views:p9"), `^views:p9  2  `)
	_, err = c.SendEvents(context.Background(), []client.Event{{ID: "", Type: "view", Time: time.Now()}})
	if !errors.Is(err, client.ErrInvalidEvent) {
		t.Fatalf("event without id: %v", err)
	}
}
