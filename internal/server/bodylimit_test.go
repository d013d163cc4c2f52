package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startEmbedded runs an embedded node with HTTP only in this process,
// after edit changes its configuration (which may add --resp or --grpc),
// and returns its listeners' addresses by name ("http", "resp", "grpc");
// the node stops when the test ends.
func startEmbedded(t *testing.T, edit func(*Config)) map[string]string {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Data = t.TempDir()
	cfg.NodeID = "limits"
	cfg.HTTP, cfg.RESP, cfg.GRPC = "127.0.0.1:0", "", ""
	cfg.ShutdownTimeout = 5 * time.Second
	if edit != nil {
		edit(&cfg)
	}
	want := 1
	for _, a := range []string{cfg.RESP, cfg.GRPC} {
		if a != "" {
			want++
		}
	}
	return runNode(t, cfg, &listenCapture{addrs: map[string]string{}, ready: make(chan struct{}), want: want})
}

// runNode runs a node with cfg in this process until the test ends and
// returns its listeners' addresses by name once h has seen them.
func runNode(t *testing.T, cfg Config, h *listenCapture) map[string]string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var runErr error
	done := make(chan struct{})
	go func() { runErr = Run(ctx, cfg, slog.New(h)); close(done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("node did not stop")
		}
	})
	select {
	case <-h.ready:
	case <-done:
		t.Fatalf("Run: %v", runErr)
	case <-time.After(60 * time.Second):
		t.Fatal("node did not start")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.addrs)
}

// TestDeclaredBodyOverLimit sends, over raw TCP to a real node, requests
// whose Content-Length is over their route's limit (--max-body 1000 for
// the API and rate limits, --events-max-body 4000 for POST /events) with
// only a few of the declared bytes, and with Expect: 100-continue and no
// body at all. Each must be answered 413 body_too_large without the body
// (the read deadline below is only there so that a regression fails
// instead of hanging; the body timeout is 30 s), with no 100 Continue
// before it, and its connection must be closed after the answer. A body
// within the limit is still served, on a connection that stays open.
func TestDeclaredBodyOverLimit(t *testing.T) {
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte("rules:\n  - name: views\n    counter: '\"views:\" + event.post'\n    add: '1'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := startEmbedded(t, func(c *Config) {
		c.MaxBodyBytes = 1000
		c.Events.MaxBody = 4000
		c.Events.Rules = rules
		c.HTTPReadBodyTimeout = 30 * time.Second
	})["http"]
	for _, tc := range []struct {
		name, path, length, extra string
		body                      string
	}{
		{"huge, two bytes sent", "/counters/a/increment", "99999999999", "", "{}"},
		{"2 MB, two bytes sent", "/counters/a/increment", "2000000", "", "{}"},
		{"just over, some bytes sent", "/counters/a/increment", "1001", "", `{"delta":`},
		{"batch", "/batch", "5000", "", "{"},
		{"rate-limit check", "/ratelimit/check", "1001", "", ""},
		{"rollup spec", "/rollups/ns", "1001", "", ""},
		{"events over --events-max-body", "/events", "4001", "", "["},
		{"expect 100-continue", "/counters/a/increment", "2000000", "Expect: 100-continue\r\n", ""},
		{"expect 100-continue, events", "/events", "99999999999", "Expect: 100-continue\r\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			method := "POST"
			if strings.HasPrefix(tc.path, "/rollups/") {
				method = "PUT"
			}
			req := method + " " + tc.path + " HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\n" +
				tc.extra + "Content-Length: " + tc.length + "\r\n\r\n" + tc.body
			if _, err := io.WriteString(c, req); err != nil {
				t.Fatal(err)
			}
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			rd := bufio.NewReader(c)
			res, err := http.ReadResponse(rd, nil)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			var e struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatalf("%d %q: %v", res.StatusCode, b, err)
			}
			if res.StatusCode != http.StatusRequestEntityTooLarge || e.Error.Code != "body_too_large" {
				t.Fatalf("%d %s, want 413 body_too_large", res.StatusCode, b)
			}
			if !strings.Contains(e.Error.Message, tc.length) {
				t.Errorf("message %q does not give the declared length", e.Error.Message)
			}
			// Closed after the answer: EOF (or a reset), not more bytes.
			if n, err := rd.Read(make([]byte, 1)); err == nil {
				t.Fatalf("the connection carried %d more bytes after the 413", n)
			} else if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatal("the connection is still open after the 413")
			}
		})
	}

	t.Run("within the limit", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		rd := bufio.NewReader(c)
		for i := range 2 {
			body := `{"delta":1}`
			extra := ""
			if i == 1 {
				extra = "Expect: 100-continue\r\n"
			}
			io.WriteString(c, "POST /counters/a/increment HTTP/1.1\r\nHost: "+addr+"\r\nContent-Type: application/json\r\n"+extra+"Content-Length: 11\r\n\r\n"+body)
			res, err := http.ReadResponse(rd, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.StatusCode == http.StatusContinue {
				if res, err = http.ReadResponse(rd, nil); err != nil {
					t.Fatal(err)
				}
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 200 {
				t.Fatalf("request %d: %d %s", i, res.StatusCode, b)
			}
		}
	})
}
