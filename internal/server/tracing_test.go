package server

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	cnode "github.com/counterd/counterd/internal/cluster/node"
	"github.com/counterd/counterd/internal/cluster/ring"
	"github.com/counterd/counterd/internal/coarse"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/pipeline"
	"github.com/counterd/counterd/internal/pipeline/stream"
	"github.com/counterd/counterd/internal/testutil/pgtest"
	"github.com/counterd/counterd/internal/testutil/redistest"
	"github.com/counterd/counterd/internal/tracing"
)

// otlpReceiver is an OTLP collector's trace service: it keeps every span
// it is sent, with its resource's service.instance.id.
type otlpReceiver struct {
	collectorpb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []receivedSpan
}

type receivedSpan struct {
	instance string
	service  string
	span     *tracepb.Span
}

func (r *otlpReceiver) Export(_ context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		var inst, svc string
		for _, kv := range rs.GetResource().GetAttributes() {
			switch kv.GetKey() {
			case "service.instance.id":
				inst = kv.GetValue().GetStringValue()
			case "service.name":
				svc = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, receivedSpan{instance: inst, service: svc, span: s})
			}
		}
	}
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

// trace is the spans received so far with trace id tid.
func (r *otlpReceiver) trace(tid []byte) []receivedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []receivedSpan
	for _, s := range r.spans {
		if string(s.span.GetTraceId()) == string(tid) {
			out = append(out, s)
		}
	}
	return out
}

// startReceiver serves an otlpReceiver on a loopback port.
func startReceiver(t testing.TB) (*otlpReceiver, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rcv := &otlpReceiver{}
	gs := grpc.NewServer()
	collectorpb.RegisterTraceServiceServer(gs, rcv)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	return rcv, ln.Addr().String()
}

// TestTraceAcrossTwoNodes: an increment sent with a W3C traceparent to a
// node of a three-node cluster that does not own the counter is one trace
// at the OTLP collector, with spans from both the node it was sent to
// (the HTTP request, the engine op, the peer call) and the owner (the
// peer call's server span, a child of the caller's client span). The
// nodes sample no new traces (--trace-sample-ratio 0): the request's
// sampled flag decides (parent-based sampling).
func TestTraceAcrossTwoNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	rcv, endpoint := startReceiver(t)
	ids := []string{"tr1", "tr2", "tr3"}
	gossip := make([]string, len(ids))
	for i := range ids {
		gossip[i] = "127.0.0.1:" + freeTCPUDPPort(t)
	}
	base := map[string]string{}
	for i, id := range ids {
		cfg := DefaultConfig()
		cfg.Data = t.TempDir()
		cfg.NodeID = id
		cfg.HTTP, cfg.RESP, cfg.GRPC = "127.0.0.1:0", "", "127.0.0.1:0"
		cfg.Gossip = gossip[i]
		cfg.Join = strings.Join(gossip, ",")
		cfg.ShutdownTimeout = 5 * time.Second
		cfg.OTLPEndpoint = endpoint
		cfg.TraceSampleRatio = 0
		// Failure detection in seconds, not 0.6 s: on a loaded machine
		// the ring must not move under the test.
		cfg.ClusterTiming = "lan"
		addrs := runNode(t, cfg, &listenCapture{addrs: map[string]string{}, ready: make(chan struct{}), need: []string{"http"}})
		base[id] = "http://" + addrs["http"]
	}
	// Wait until every node has all three on its ring.
	var st cnode.Status
	deadline := time.Now().Add(60 * time.Second)
	for _, id := range ids {
		for {
			st = clusterStatus(t, base[id])
			alive := 0
			for _, m := range st.Members {
				if m.State == "alive" && m.Ownership > 0 && m.GRPC != "" {
					alive++
				}
			}
			if alive == len(ids) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %s does not see three members: %+v", id, st)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	rg := ring.New(ring.Config{VirtualNodes: st.VNodes, ReplicationFactor: st.ReplicationFactor})
	rg.SetTags(ids, st.HashTags)
	const counter = "traced:hits"
	owner := rg.Owner(counter)
	var via string
	for _, id := range ids {
		if id != owner {
			via = id
			break
		}
	}

	tid, _ := hex.DecodeString("4bf92f3577b34da6a3ce929d0e0e4736")
	parent, _ := hex.DecodeString("00f067aa0ba902b7")
	// One increment; retried (in the same trace) only if the owner was
	// briefly unavailable, as a client would.
	for deadline := time.Now().Add(30 * time.Second); ; {
		req, _ := http.NewRequest(http.MethodPost, base[via]+"/counters/"+counter+"/increment", strings.NewReader(`{"delta": 1}`))
		req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			break
		}
		if resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("increment via %s (owner %s): %s", via, owner, resp.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Spans are exported about every second: poll for the owner's.
	var spans []receivedSpan
	for deadline := time.Now().Add(30 * time.Second); ; {
		spans = rcv.trace(tid)
		if hasSpan(spans, owner, tracepb.Span_SPAN_KIND_SERVER, "/"+cnode.PeerService+"/") &&
			hasSpan(spans, via, tracepb.Span_SPAN_KIND_CLIENT, "/"+cnode.PeerService+"/") &&
			hasSpan(spans, via, tracepb.Span_SPAN_KIND_SERVER, "HTTP POST") && complete(spans, parent) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %x at the collector after 30s: %s", tid, describe(spans))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("trace %x: %s", tid, describe(spans))
	byID := map[string]receivedSpan{}
	instances := map[string]bool{}
	for _, s := range spans {
		byID[string(s.span.GetSpanId())] = s
		instances[s.instance] = true
		if s.service != "counterd" {
			t.Errorf("span %q: service.name %q", s.span.GetName(), s.service)
		}
	}
	if !instances[via] || !instances[owner] {
		t.Errorf("trace spans nodes %v, want %s (sent to) and %s (owner) among them", instances, via, owner)
	}
	var httpSpan, applySpan receivedSpan
	for _, s := range spans {
		switch {
		case s.instance == via && s.span.GetName() == "HTTP POST":
			httpSpan = s
		case s.instance == via && s.span.GetName() == "engine.apply":
			applySpan = s
		}
	}
	if httpSpan.span == nil || string(httpSpan.span.GetParentSpanId()) != string(parent) {
		t.Fatalf("HTTP span's parent is not the request's traceparent: %s", describe(spans))
	}
	if applySpan.span == nil || string(applySpan.span.GetParentSpanId()) != string(httpSpan.span.GetSpanId()) {
		t.Fatalf("engine.apply is not a child of the HTTP span: %s", describe(spans))
	}
	// Every peer call's server span is the child of the calling node's
	// client span of the same call (the owner may call its replicas in
	// turn); the owner's is a call from the engine op of the node the
	// request was sent to.
	fromApply := false
	for _, s := range spans {
		if s.span.GetEndTimeUnixNano() < s.span.GetStartTimeUnixNano() || s.span.GetStartTimeUnixNano() == 0 {
			t.Errorf("span %q: start %d, end %d", s.span.GetName(), s.span.GetStartTimeUnixNano(), s.span.GetEndTimeUnixNano())
		}
		if s.span.GetKind() != tracepb.Span_SPAN_KIND_SERVER || !strings.HasPrefix(s.span.GetName(), "/"+cnode.PeerService+"/") {
			continue
		}
		client, ok := byID[string(s.span.GetParentSpanId())]
		if !ok || client.instance == s.instance || client.span.GetKind() != tracepb.Span_SPAN_KIND_CLIENT || client.span.GetName() != s.span.GetName() {
			t.Errorf("%s span %q: parent is not another node's client span of the same call: %s", s.instance, s.span.GetName(), describe(spans))
			continue
		}
		if s.instance == owner && client.instance == via && string(client.span.GetParentSpanId()) == string(applySpan.span.GetSpanId()) {
			fromApply = true
		}
	}
	if !fromApply {
		t.Errorf("no peer call from %s's engine op served by the owner %s: %s", via, owner, describe(spans))
	}
}

func hasSpan(spans []receivedSpan, instance string, kind tracepb.Span_SpanKind, namePrefix string) bool {
	for _, s := range spans {
		if s.instance == instance && s.span.GetKind() == kind && strings.HasPrefix(s.span.GetName(), namePrefix) {
			return true
		}
	}
	return false
}

// complete reports whether every span's parent has arrived too (root: the
// request's own parent), as nodes export on their own schedules.
func complete(spans []receivedSpan, root []byte) bool {
	ids := map[string]bool{string(root): true}
	for _, s := range spans {
		ids[string(s.span.GetSpanId())] = true
	}
	for _, s := range spans {
		if !ids[string(s.span.GetParentSpanId())] {
			return false
		}
	}
	return true
}

func describe(spans []receivedSpan) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "\n  %s %s %v span=%x parent=%x", s.instance, s.span.GetName(), s.span.GetKind(), s.span.GetSpanId(), s.span.GetParentSpanId())
	}
	return b.String()
}

func clusterStatus(t *testing.T, base string) cnode.Status {
	t.Helper()
	resp, err := http.Get(base + "/cluster")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st cnode.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestTraceTiered: in tiered mode, requests that carry a trace context
// have client spans for the Redis commands and PostgreSQL statements
// they make, children of their engine op or HTTP span.
func TestTraceTiered(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Redis and PostgreSQL")
	}
	rcv, endpoint := startReceiver(t)
	cfg := DefaultConfig()
	cfg.Data = t.TempDir()
	cfg.NodeID = "tiered1"
	cfg.Redis = redistest.New(t).URL
	cfg.Postgres = pgtest.StartServer(t).DSN(t)
	cfg.HTTP, cfg.RESP, cfg.GRPC = "127.0.0.1:0", "", ""
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.OTLPEndpoint = endpoint
	cfg.TraceSampleRatio = 0
	addrs := runNode(t, cfg, &listenCapture{addrs: map[string]string{}, ready: make(chan struct{}), need: []string{"http"}})
	base := "http://" + addrs["http"]

	tid, _ := hex.DecodeString("0af7651916cd43dd8448eb211c80319c")
	send := func(method, path, body string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("%s %s: %s", method, path, resp.Status)
		}
	}
	send(http.MethodPost, "/counters/tiered:a/increment", `{"delta": 2}`)
	send(http.MethodGet, "/counters/tiered:a", "")
	send(http.MethodPut, "/counters/tiered:b", `{"value": 5}`)
	send(http.MethodGet, "/counters/tiered:b", "")

	var spans []receivedSpan
	for deadline := time.Now().Add(30 * time.Second); ; {
		spans = rcv.trace(tid)
		if hasSpan(spans, "tiered1", tracepb.Span_SPAN_KIND_CLIENT, "redis ") && hasSpan(spans, "tiered1", tracepb.Span_SPAN_KIND_CLIENT, "postgresql ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Redis and PostgreSQL client spans in trace %x after 30s: %s", tid, describe(spans))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("trace %x: %s", tid, describe(spans))
	byID := map[string]receivedSpan{}
	for _, s := range spans {
		byID[string(s.span.GetSpanId())] = s
	}
	for _, s := range spans {
		name := s.span.GetName()
		if !strings.HasPrefix(name, "redis ") && !strings.HasPrefix(name, "postgresql ") {
			continue
		}
		sys := ""
		for _, kv := range s.span.GetAttributes() {
			if kv.GetKey() == "db.system" {
				sys = kv.GetValue().GetStringValue()
			}
		}
		if want := strings.Fields(name)[0]; sys != want {
			t.Errorf("span %q: db.system %q", name, sys)
		}
		if _, ok := byID[string(s.span.GetParentSpanId())]; !ok {
			t.Errorf("span %q: its parent is not a span of the request", name)
		}
	}
}

// TestTracePipeline: with a stream, each batch consumed is a trace: a
// consumer span from the poll to the commit, its apply a child span.
func TestTracePipeline(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a Kafka (kfake) pipeline")
	}
	rcv, endpoint := startReceiver(t)
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	rulesPath := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesPath, []byte("rules:\n  - name: views\n    counter: '\"views:\" + event.post'\n    add: '1'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tp, err := tracing.Open(tracing.Config{Endpoint: endpoint, SampleRatio: 1, Service: "counterd", Instance: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close(context.Background())
	ecfg := engine.DefaultConfig()
	ecfg.InMemory = true
	e, err := engine.Open(ecfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	p, err := pipeline.Open(context.Background(), pipeline.Config{
		Kafka:  stream.KafkaConfig{Brokers: kc.ListenAddrs(), Topic: "traced", DeadTopic: "traced-dead", Partitions: 1},
		Rules:  rulesPath,
		Tracer: tp,
	}, engine.Local(e), nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := p.AddEvents(context.Background(), []byte(`{"id":"e1","type":"view","ts":`+strconv.FormatInt(time.Now().UnixMilli(), 10)+`,"post":"p"}`))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("AddEvents: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for {
		var consume, apply *receivedSpan
		rcv.mu.Lock()
		all := slices.Clone(rcv.spans)
		rcv.mu.Unlock()
		for i, s := range all {
			switch {
			case strings.HasPrefix(s.span.GetName(), "stream consume ") && s.span.GetKind() == tracepb.Span_SPAN_KIND_CONSUMER:
				consume = &all[i]
			case s.span.GetName() == "pipeline.apply":
				apply = &all[i]
			}
		}
		if consume != nil && apply != nil {
			if string(apply.span.GetParentSpanId()) != string(consume.span.GetSpanId()) || string(apply.span.GetTraceId()) != string(consume.span.GetTraceId()) {
				t.Fatalf("pipeline.apply is not a child of %q: %s", consume.span.GetName(), describe(all))
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no consume and apply spans after 60s: %s", describe(all))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestTracingOffAddsNothing: without --otlp-endpoint the front ends are
// built exactly as without tracing: the HTTP handler and the backend are
// not wrapped, no gRPC interceptor or dial option is added, and the
// cluster and tiered stores get no hook (the RESP server checks one nil
// pointer per command).
func TestTracingOffAddsNothing(t *testing.T) {
	var tp *tracing.Tracer
	h := http.NotFoundHandler()
	if got := tracing.HTTPHandler(tp, h); fmt.Sprintf("%p", got) != fmt.Sprintf("%p", h) {
		t.Error("HTTP handler wrapped with tracing off")
	}
	ecfg := engine.DefaultConfig()
	ecfg.InMemory = true
	e, err := engine.Open(ecfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	be := engine.Local(e)
	if got := traceBackend(tp, be); got != be {
		t.Errorf("backend wrapped with tracing off: %T", got)
	}
	if len(grpcTracing(tp)) != 0 || len(tracing.DialOptions(tp)) != 0 {
		t.Error("gRPC options added with tracing off")
	}
	if len(redisTracing(tp).Hooks) != 0 || postgresTracing(tp).Tracer != nil {
		t.Error("store hooks added with tracing off")
	}
	// On, the backend keeps the coarse clock the RESP event loops use.
	on, err := tracing.Open(tracing.Config{Endpoint: "127.0.0.1:1", SampleRatio: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer on.Close(context.Background())
	_, had := any(be).(interface{ CoarseClock() *coarse.Clock })
	_, has := traceBackend(on, be).(interface{ CoarseClock() *coarse.Clock })
	if !had || !has {
		t.Errorf("coarse clock: backend %v, traced backend %v", had, has)
	}
}

// TestTraceRESP: a Redis-protocol command is a server span of its own
// trace, its engine op a child span, on a node sampling every trace.
func TestTraceRESP(t *testing.T) {
	rcv, endpoint := startReceiver(t)
	cfg := DefaultConfig()
	cfg.Data = t.TempDir()
	cfg.NodeID = "resp1"
	cfg.HTTP, cfg.RESP, cfg.GRPC = "127.0.0.1:0", "127.0.0.1:0", ""
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.OTLPEndpoint = endpoint
	addrs := runNode(t, cfg, &listenCapture{addrs: map[string]string{}, ready: make(chan struct{}), need: []string{"http", "resp"}})
	conn, err := net.DialTimeout("tcp", addrs["resp"], 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := conn.Write([]byte("*3\r\n$6\r\nINCRBY\r\n$8\r\nresp:hit\r\n$1\r\n3\r\n")); err != nil {
		t.Fatal(err)
	}
	reply, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || reply != ":3\r\n" {
		t.Fatalf("INCRBY: %q, %v", reply, err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		rcv.mu.Lock()
		all := slices.Clone(rcv.spans)
		rcv.mu.Unlock()
		var cmd, apply *receivedSpan
		for i, s := range all {
			switch s.span.GetName() {
			case "RESP incrby":
				cmd = &all[i]
			case "engine.apply":
				apply = &all[i]
			}
		}
		if cmd != nil && apply != nil {
			if cmd.span.GetKind() != tracepb.Span_SPAN_KIND_SERVER || len(cmd.span.GetParentSpanId()) != 0 ||
				string(apply.span.GetParentSpanId()) != string(cmd.span.GetSpanId()) || cmd.instance != "resp1" {
				t.Fatalf("RESP spans: %s", describe(all))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no RESP command and engine spans after 30s: %s", describe(all))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The node counts what it exported.
	for deadline := time.Now().Add(30 * time.Second); ; {
		resp, err := http.Get("http://" + addrs["http"] + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m := regexp.MustCompile(`(?m)^counterd_trace_spans_exported_total (\d+)$`).FindSubmatch(body)
		if m != nil && string(m[1]) != "0" && strings.Contains(string(body), "counterd_trace_spans_dropped_total 0") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace metrics: %q", m)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestTracingFlags: --otlp-endpoint and --trace-sample-ratio are checked
// before the node starts, with errors naming the flag; the environment
// and --config set them like every flag.
func TestTracingFlags(t *testing.T) {
	for _, tc := range []struct {
		endpoint string
		ratio    float64
		want     string
	}{
		{"127.0.0.1:4317", 0.5, ""},
		{"http://collector:4318/v1/traces", 1, ""},
		{"grpcs://collector:4317", 0, ""},
		{"", 1.5, "--trace-sample-ratio must be between 0 and 1"},
		{"", math.NaN(), "--trace-sample-ratio must be between 0 and 1"},
		{"collector", 1, "--otlp-endpoint: tracing: invalid OTLP endpoint"},
		{"ftp://collector:21", 1, "unknown scheme"},
	} {
		c := DefaultConfig()
		c.OTLPEndpoint, c.TraceSampleRatio = tc.endpoint, tc.ratio
		err := c.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%q ratio %v: %v, want %q", tc.endpoint, tc.ratio, err, tc.want)
		}
		if tc.want != "" && tc.endpoint != "" && !errors.Is(err, tracing.ErrEndpoint) {
			t.Errorf("%q: %v does not wrap tracing.ErrEndpoint", tc.endpoint, err)
		}
	}
	t.Setenv("COUNTERD_OTLP_ENDPOINT", "127.0.0.1:4317")
	t.Setenv("COUNTERD_TRACE_SAMPLE_RATIO", "0.25")
	c := DefaultConfig()
	fs := flag.NewFlagSet("counterd", flag.ContinueOnError)
	c.BindFlags(fs)
	if err := fs.Parse(nil); err != nil || c.EnvErr() != nil {
		t.Fatal(err, c.EnvErr())
	}
	if c.OTLPEndpoint != "127.0.0.1:4317" || c.TraceSampleRatio != 0.25 {
		t.Fatalf("from the environment: %q %v", c.OTLPEndpoint, c.TraceSampleRatio)
	}
	t.Setenv("COUNTERD_TRACE_SAMPLE_RATIO", "half")
	c = DefaultConfig()
	c.BindFlags(flag.NewFlagSet("counterd", flag.ContinueOnError))
	if err := c.EnvErr(); err == nil || !strings.Contains(err.Error(), "COUNTERD_TRACE_SAMPLE_RATIO") {
		t.Fatalf("bad ratio in the environment: %v", err)
	}
}
