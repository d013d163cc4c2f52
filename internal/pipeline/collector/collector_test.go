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
	mu       sync.Mutex
	got      [][]byte
	rejected []event.Rejected
}

// Reject keeps the refused events, as a stream's dead letters would.
func (s *memSink) Reject(_ context.Context, _ string, rs []event.Rejected) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range rs {
		r.Raw = bytes.Clone(r.Raw) // the request's buffer, like the batch
		s.rejected = append(s.rejected, r)
	}
	return nil
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
				Rejected []RejectedEvent
				Error    struct {
					Code  string
					Index *int
				}
			}
			json.NewDecoder(resp.Body).Decode(&m)
			if resp.StatusCode != status || m.Error.Code != code {
				t.Fatalf("%d %q, want %d %q", resp.StatusCode, m.Error.Code, status, code)
			}
			if status == 202 {
				if index >= 0 && (len(m.Rejected) != 1 || m.Rejected[0].Index != index || m.Rejected[0].Error == "") {
					t.Fatalf("rejected %+v, want event %d with its error", m.Rejected, index)
				}
				if index < 0 && (m.Rejected == nil || len(m.Rejected) != 0) {
					t.Fatalf("rejected %+v, want []", m.Rejected)
				}
				return
			}
			if index >= 0 && (m.Error.Index == nil || *m.Error.Index != index) {
				t.Fatalf("index %v, want %d", m.Error.Index, index)
			}
		})
	}
	f("accepted", srv.URL, "POST", `[{"id":"a","type":"t","ts":1},{"id":"b","type":"t","ts":2}]`, 202, "", -1)
	// A partial batch: the good event is appended, the bad one refused
	// on its own (202 with its index), and handed to the sink's Reject.
	f("bad second event", srv.URL, "POST", "{\"id\":\"a\",\"type\":\"t\",\"ts\":1}\n{\"id\":\"b\",\"ts\":2}", 202, "", 1)
	f("every event bad", srv.URL, "POST", "{\"id\":\"a\",\"ts\":1}\n{\"id\":\"b\",\"ts\":2}", 400, "invalid_event", 0)
	f("not events", srv.URL, "POST", `[{"id":"a","type":"t","ts":1},`, 400, "invalid_event", -1)
	f("too many events", srv.URL, "POST", `[{"id":"a","type":"t","ts":1},{"id":"b","type":"t","ts":2},{"id":"c","type":"t","ts":3}]`, 413, "too_large", -1)
	f("body too large", srv.URL, "POST", `[{"id":"a","type":"t","ts":1,"x":"`+strings.Repeat("x", 400)+`"}]`, 413, "too_large", -1)
	f("GET", srv.URL, "GET", "", 405, "method_not_allowed", -1)
	f("no sink", noSink.URL, "POST", `[{"id":"a","type":"t","ts":1}]`, 503, "unavailable", -1)
	if len(sink.got) != 3 || string(sink.got[2]) != `{"id":"a","type":"t","ts":1}` {
		t.Fatalf("sink holds %q, want the 2 of the accepted batch and the good one of the partial batch", sink.got)
	}
	if len(sink.rejected) != 1 || sink.rejected[0].Index != 1 || string(sink.rejected[0].Raw) != `{"id":"b","ts":2}` {
		t.Fatalf("sink's rejected %+v, want event 1 of the partial batch", sink.rejected)
	}
}
