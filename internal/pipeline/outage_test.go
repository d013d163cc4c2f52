package pipeline

// Outage tests with real components: NATS JetStream is a private
// nats-server (natstest.Server) stopped and started again on the same
// port and store; Kafka is franz-go's kfake, an in-process
// Kafka-protocol cluster, served through a listener the test can cut
// (every connection closed and new ones refused) and restore, so the
// cluster keeps its topics and offsets while the node cannot reach it.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/pipeline/stream"
	"github.com/counterd/counterd/internal/testutil/natstest"
)

const outageRules = `rules:
  - name: views
    filter: event.type == "view"
    counter: '"views:" + event.post'
    add: "1"
`

// syncBuffer is a log destination safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// outageBatch returns events from..to-1 (NDJSON), of 7 posts, and adds
// them to truth (post -> views).
func outageBatch(from, to int, truth map[string]int64) []byte {
	var b []byte
	for i := from; i < to; i++ {
		post := fmt.Sprintf("p%d", i%7)
		b = fmt.Appendf(b, `{"id":"ev-%d","type":"view","ts":%d,"post":%q}`+"\n", i, time.Now().UnixMilli(), post)
		if truth != nil {
			truth[post]++
		}
	}
	return b
}

type answer struct {
	status  int
	code    string
	took    time.Duration
	message string
}

func postEvents(t *testing.T, url string, body []byte) answer {
	t.Helper()
	t0 := time.Now()
	resp, err := http.Post(url+"/events", "application/x-ndjson", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m struct {
		Error struct{ Code, Message string }
	}
	json.Unmarshal(b, &m)
	return answer{status: resp.StatusCode, code: m.Error.Code, took: time.Since(t0), message: m.Error.Message}
}

func waitFor(t *testing.T, what string, d time.Duration, f func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !f(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", d, what)
		}
	}
}

// runOutage runs a consuming pipeline over cfg's stream through one
// outage (cut, then restore) and checks the answers, the stream's state,
// the gauge, the logs and that every event counts exactly once.
func runOutage(t *testing.T, cfg Config, cut, restore func()) {
	ecfg := engine.DefaultConfig()
	ecfg.InMemory = true
	e, err := engine.Open(ecfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	be := engine.Local(e)
	cfg.Rules = filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(cfg.Rules, []byte(outageRules), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.EventsTimeout = time.Second
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := Open(ctx, cfg, be, prometheus.NewRegistry(), log)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	defer func() {
		if t.Failed() {
			t.Logf("log:\n%s", logs.String())
		}
	}()

	truth := map[string]int64{}
	total := func() int64 {
		var n int64
		for post := range truth {
			v, _ := be.Get(ctx, "views:"+post)
			n += v.Value
		}
		return n
	}
	want := func() int64 {
		var n int64
		for _, v := range truth {
			n += v
		}
		return n
	}
	if st, _ := p.Stream(); !st.OK || st.State != StateConnected {
		t.Fatalf("stream at start: %+v", st)
	}
	if a := postEvents(t, srv.URL, outageBatch(0, 200, truth)); a.status != http.StatusAccepted {
		t.Fatalf("before the outage: %+v", a)
	}
	waitFor(t, "the first batch applied", time.Minute, func() bool { return total() == want() })

	cut()
	t.Log("stream cut")
	// A batch sent during the outage: 503 stream_unavailable, within the
	// events timeout (1 s) plus a generous margin, never the outage's
	// length. It may be partly appended: it is retried below.
	during := outageBatch(200, 400, nil)
	for range 3 {
		a := postEvents(t, srv.URL, during)
		if a.status != http.StatusServiceUnavailable || a.code != "stream_unavailable" {
			t.Fatalf("during the outage: %+v, want 503 stream_unavailable", a)
		}
		if a.took > 10*time.Second {
			t.Fatalf("during the outage the answer took %s (--events-timeout 1s)", a.took)
		}
	}
	waitFor(t, "the stream reported unreachable", 30*time.Second, func() bool {
		st, _ := p.Stream()
		return st.State == StateUnreachable && !st.OK && st.Error != ""
	})
	if up := gaugeValue(p.link.up); up != 0 {
		t.Fatalf("counterd_pipeline_stream_up = %v during the outage", up)
	}
	a := postEvents(t, srv.URL, during)
	if a.status != http.StatusServiceUnavailable || a.code != "stream_unavailable" || !strings.Contains(a.message, "unreachable since") {
		t.Fatalf("during the outage, once known: %+v", a)
	}
	time.Sleep(2 * time.Second) // several probes fail: still one log line

	restore()
	t.Log("stream restored")
	waitFor(t, "the stream reported connected again", time.Minute, func() bool {
		st, _ := p.Stream()
		return st.OK && st.State == StateConnected
	})
	if up := gaugeValue(p.link.up); up != 1 {
		t.Fatalf("counterd_pipeline_stream_up = %v after the outage", up)
	}
	outageBatch(200, 400, truth) // the retried batch counts once
	for _, b := range [][]byte{during, outageBatch(400, 600, truth)} {
		var a answer
		waitFor(t, "a batch accepted after the outage", 30*time.Second, func() bool {
			a = postEvents(t, srv.URL, b)
			return a.status == http.StatusAccepted
		})
	}
	waitFor(t, "every view applied", 2*time.Minute, func() bool { return total() >= want() })
	time.Sleep(time.Second) // a late duplicate would show now
	for post, n := range truth {
		if v, _ := be.Get(ctx, "views:"+post); v.Value != n {
			t.Errorf("views:%s = %d, want %d", post, v.Value, n)
		}
	}
	l := logs.String()
	if n := strings.Count(l, `msg="pipeline: stream unreachable:`); n != 1 {
		t.Errorf("%d log lines of the loss, want 1", n)
	}
	if n := strings.Count(l, `msg="pipeline: stream reachable again"`); n != 1 {
		t.Errorf("%d log lines of the recovery, want 1", n)
	}
	if n := strings.Count(l, `msg="pipeline: consumer cannot poll`); n > 1 {
		t.Errorf("%d log lines of the consumer's outage, want at most 1", n)
	}
}

// TestOutageJetStream: a real nats-server is stopped during the run and
// started again.
func TestOutageJetStream(t *testing.T) {
	srv := natstest.NewServer(t)
	name := natstest.Name("T")
	cfg := Config{NATS: stream.JetStreamConfig{URL: srv.URL, Stream: name, Subject: name + ".events",
		DeadSubject: name + ".dead", Consumer: name, AckWait: 3 * time.Second}}
	runOutage(t, cfg, srv.Stop, srv.Start)
}

// TestOutageKafka: kfake behind a listener the test cuts and restores.
func TestOutageKafka(t *testing.T) {
	var cl *cutListener
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.ListenFn(func(network, address string) (net.Listener, error) {
		ln, err := net.Listen(network, address)
		if err != nil {
			return nil, err
		}
		cl = &cutListener{Listener: ln, conns: map[net.Conn]bool{}}
		return cl, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	cfg := Config{Kafka: stream.KafkaConfig{Brokers: kc.ListenAddrs(), Topic: "ev", DeadTopic: "ev-dead", Partitions: 2, Group: "g"}}
	runOutage(t, cfg, cl.cut, cl.restore)
}

// cutListener accepts connections until cut: then it closes every
// connection it accepted and closes new ones at once, until restored.
type cutListener struct {
	net.Listener
	mu    sync.Mutex
	down  bool
	conns map[net.Conn]bool
}

func (l *cutListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		if l.down {
			l.mu.Unlock()
			c.Close()
			continue
		}
		l.conns[c] = true
		l.mu.Unlock()
		return c, nil
	}
}

func (l *cutListener) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = true
	for c := range l.conns {
		c.Close()
	}
	clear(l.conns)
}

func (l *cutListener) restore() {
	l.mu.Lock()
	l.down = false
	l.mu.Unlock()
}

func gaugeValue(g prometheus.Gauge) float64 {
	var m dto.Metric
	g.Write(&m)
	return m.GetGauge().GetValue()
}

// TestDownAtStartKafka: with kfake cut when the node starts, Open fails
// with --events-fail-fast; without, it returns, answers 503
// stream_unavailable, and connects and consumes once kfake is reachable.
func TestDownAtStartKafka(t *testing.T) {
	var cl *cutListener
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.ListenFn(func(network, address string) (net.Listener, error) {
		ln, err := net.Listen(network, address)
		if err != nil {
			return nil, err
		}
		cl = &cutListener{Listener: ln, conns: map[net.Conn]bool{}}
		return cl, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	cl.cut()
	ecfg := engine.DefaultConfig()
	ecfg.InMemory = true
	e, err := engine.Open(ecfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	be := engine.Local(e)
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte(outageRules), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Kafka: stream.KafkaConfig{Brokers: kc.ListenAddrs(), Topic: "ev", DeadTopic: "ev-dead", Partitions: 1, Group: "g"},
		Rules: rules, EventsTimeout: time.Second, FailFast: true}
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if p, err := Open(ctx, cfg, be, nil, log); err == nil || !errors.Is(err, stream.ErrUnavailable) {
		if p != nil {
			p.Close()
		}
		t.Fatalf("Open with FailFast and the stream cut: %v", err)
	}
	cfg.FailFast = false
	p, err := Open(ctx, cfg, be, prometheus.NewRegistry(), log)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	if st, _ := p.Stream(); st.OK || st.State != StateConnecting || st.Error == "" {
		t.Fatalf("stream state at start: %+v", st)
	}
	if a := postEvents(t, srv.URL, outageBatch(0, 10, nil)); a.status != http.StatusServiceUnavailable || a.code != "stream_unavailable" {
		t.Fatalf("before the stream was reached: %+v", a)
	}
	cl.restore()
	waitFor(t, "the stream connected", time.Minute, func() bool { st, _ := p.Stream(); return st.OK })
	truth := map[string]int64{}
	if a := postEvents(t, srv.URL, outageBatch(0, 100, truth)); a.status != http.StatusAccepted {
		t.Fatalf("once connected: %+v", a)
	}
	waitFor(t, "the batch applied", time.Minute, func() bool {
		for post, n := range truth {
			if v, _ := be.Get(ctx, "views:"+post); v.Value != n {
				return false
			}
		}
		return true
	})
	if n := strings.Count(logs.String(), `msg="pipeline: stream connected"`); n != 1 {
		t.Errorf("%d log lines of the connection, want 1\n%s", n, logs.String())
	}
}
