package collector

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/counterd/counterd/internal/pipeline/event"
)

// memSink keeps appended events in memory: the smallest real Sink.
type memSink struct {
	mu  sync.Mutex
	got [][]byte
}

func (s *memSink) Append(_ context.Context, b *event.Batch) ([]DeadLetter, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range b.Events {
		s.got = append(s.got, bytes.Clone(e)) // the batch is the request's buffer
	}
	return nil, nil
}

func TestServeHTTP(t *testing.T) {
	sink := &memSink{}
	srv := httptest.NewServer(New(sink, Options{MaxBodyBytes: 300, Limits: event.Limits{MaxEvents: 2}}))
	defer srv.Close()
	noSink := httptest.NewServer(New(nil, Options{}))
	defer noSink.Close()
	f := func(name, base, method, body string, status int, code string, index int) {
		t.Run(name, func(t *testing.T) {
			req, _ := http.NewRequest(method, base+"/events", strings.NewReader(body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var m struct {
				Status   string
				Accepted int
				Error    struct {
					Code  string
					Index *int
				}
			}
			json.NewDecoder(resp.Body).Decode(&m)
			if resp.StatusCode != status || m.Error.Code != code {
				t.Fatalf("%d %q, want %d %q", resp.StatusCode, m.Error.Code, status, code)
			}
			if index >= 0 && (m.Error.Index == nil || *m.Error.Index != index) {
				t.Fatalf("index %v, want %d", m.Error.Index, index)
			}
		})
	}
	f("accepted", srv.URL, "POST", `[{"id":"a","type":"t","ts":1},{"id":"b","type":"t","ts":2}]`, 202, "", -1)
	f("bad second event", srv.URL, "POST", "{\"id\":\"a\",\"type\":\"t\",\"ts\":1}\n{\"id\":\"b\",\"ts\":2}", 400, "invalid_event", 1)
	f("too many events", srv.URL, "POST", `[{"id":"a","type":"t","ts":1},{"id":"b","type":"t","ts":2},{"id":"c","type":"t","ts":3}]`, 413, "too_large", -1)
	f("body too large", srv.URL, "POST", `[{"id":"a","type":"t","ts":1,"x":"`+strings.Repeat("x", 400)+`"}]`, 413, "too_large", -1)
	f("GET", srv.URL, "GET", "", 405, "method_not_allowed", -1)
	f("no sink", noSink.URL, "POST", `[{"id":"a","type":"t","ts":1}]`, 503, "unavailable", -1)
	if len(sink.got) != 2 {
		t.Fatalf("sink holds %d events, want the 2 of the accepted batch", len(sink.got))
	}
}
