package tracing

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"
)

func TestParseTraceparent(t *testing.T) {
	good := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	sc, err := ParseTraceparent(good)
	if err != nil {
		t.Fatal(err)
	}
	if sc.TraceID.String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID.String() != "00f067aa0ba902b7" || !sc.Sampled || !sc.Remote {
		t.Fatalf("parsed %+v", sc)
	}
	if got := sc.Traceparent(); got != good {
		t.Fatalf("Traceparent() = %q, want %q", got, good)
	}
	// A future version may append fields after a "-".
	if _, err := ParseTraceparent("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-what-the-future"); err != nil {
		t.Errorf("future version: %v", err)
	}
	for _, bad := range []string{
		"",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",        // short
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", // version 00 has no more fields
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",       // invalid version
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",       // upper case
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01",       // zero trace id
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",       // zero parent id
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",       // flags not hex
		"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",       // separator
		"cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",      // future version, no "-"
		"00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",       // misplaced separator
		"0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",       // version not hex
	} {
		if _, err := ParseTraceparent(bad); !errors.Is(err, ErrTraceparent) {
			t.Errorf("ParseTraceparent(%q) = %v, want ErrTraceparent", bad, err)
		}
	}
}

// TestTraceparentRoundTrip: every valid context survives formatting and
// parsing.
func TestTraceparentRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var sc SpanContext
		copy(sc.TraceID[:], rapid.SliceOfN(rapid.Byte(), 16, 16).Draw(t, "trace"))
		copy(sc.SpanID[:], rapid.SliceOfN(rapid.Byte(), 8, 8).Draw(t, "span"))
		sc.Sampled = rapid.Bool().Draw(t, "sampled")
		got, err := ParseTraceparent(sc.Traceparent())
		if !sc.Valid() {
			if err == nil {
				t.Fatalf("all-zero id accepted: %q", sc.Traceparent())
			}
			return
		}
		sc.Remote = true
		if err != nil || got != sc {
			t.Fatalf("round trip of %+v: %+v, %v", sc, got, err)
		}
	})
}

// FuzzParseTraceparent: any header either fails with ErrTraceparent or
// parses to a valid context that formats back to the header's first 55
// bytes (the version aside, which is always written as 00).
func FuzzParseTraceparent(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	f.Add("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03-x")
	f.Add("00-00000000000000000000000000000000-00f067aa0ba902b7-01")
	f.Fuzz(func(t *testing.T, h string) {
		sc, err := ParseTraceparent(h)
		if err != nil {
			if !errors.Is(err, ErrTraceparent) {
				t.Fatalf("error %v does not wrap ErrTraceparent", err)
			}
			return
		}
		if !sc.Valid() {
			t.Fatalf("%q parsed to an invalid context", h)
		}
		out := sc.Traceparent()
		flags, _ := hexByte(h[53:55])
		if out[3:52] != h[3:52] || (flags&1 == 1) != sc.Sampled {
			t.Fatalf("%q formats back to %q", h, out)
		}
	})
}

func TestExtractInject(t *testing.T) {
	h := http.Header{}
	h.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	h.Set("Tracestate", "vendor=x")
	sc := Extract(h.Get)
	if !sc.Valid() || sc.State != "vendor=x" {
		t.Fatalf("Extract: %+v", sc)
	}
	out := http.Header{}
	InjectHTTP(out, sc)
	if out.Get("traceparent") != h.Get("traceparent") || out.Get("tracestate") != "vendor=x" {
		t.Fatalf("InjectHTTP: %v", out)
	}
	h.Set("Traceparent", "garbage")
	if sc := Extract(h.Get); sc.Valid() {
		t.Fatalf("Extract of an invalid traceparent: %+v", sc)
	}
}

// TestNilTracer: tracing off is a nil *Tracer whose spans are nil and
// ignore every call; the context is returned unchanged.
func TestNilTracer(t *testing.T) {
	var tr *Tracer
	ctx := context.Background()
	got, span := tr.Start(ctx, "x", KindServer)
	if got != ctx || span != nil {
		t.Fatalf("nil tracer: %v, %v", got, span)
	}
	span.SetString("k", "v")
	span.SetInt("k", 1)
	span.SetError(errors.New("x"))
	span.End()
	if span.Recording() || span.Context().Valid() {
		t.Fatal("nil span records")
	}
	if err := tr.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if HTTPHandler(nil, http.NotFoundHandler()) == nil || ServerOptions(nil, nil) != nil || DialOptions(nil) != nil {
		t.Fatal("nil tracer adds options")
	}
	tp, err := Open(Config{})
	if tp != nil || err != nil {
		t.Fatalf("Open without an endpoint: %v, %v", tp, err)
	}
}

func TestOpenErrors(t *testing.T) {
	for _, ep := range []string{"localhost", "ftp://h:1", "grpc://h:1/path", "http://user@h:1", "http://h:1/?q=1", "http://:1", "grpc://h"} {
		if _, err := Open(Config{Endpoint: ep, SampleRatio: 1}); !errors.Is(err, ErrEndpoint) {
			t.Errorf("Open(%q) = %v, want ErrEndpoint", ep, err)
		}
	}
	for _, r := range []float64{-0.1, 1.5} {
		if _, err := Open(Config{Endpoint: "h:1", SampleRatio: r}); err == nil {
			t.Errorf("ratio %v accepted", r)
		}
	}
}

// TestSampling: a new trace is sampled at the ratio; a child follows its
// parent, remote or local, whatever the ratio.
func TestSampling(t *testing.T) {
	tr := &Tracer{threshold: ratioThreshold(0.25), exp: newBatcher(resource{}, discard{}, time.Hour)}
	defer tr.Close(context.Background())
	n, sampled := 20000, 0
	for range n {
		_, s := tr.Start(context.Background(), "x", KindInternal)
		if s.Context().Sampled {
			sampled++
		}
	}
	if sampled < n/5 || sampled > n*3/10 { // 25% ± 5 points, far outside chance
		t.Errorf("ratio 0.25 sampled %d of %d", sampled, n)
	}
	never := &Tracer{threshold: ratioThreshold(0), exp: tr.exp}
	for _, flag := range []bool{true, false} {
		sc := SpanContext{TraceID: TraceID{1}, SpanID: SpanID{2}, Sampled: flag}
		ctx, s := never.Start(ContextWithRemote(context.Background(), sc), "child", KindServer)
		if s.Context().Sampled != flag || s.Context().TraceID != sc.TraceID || s.parent != sc.SpanID || !s.parentRemote {
			t.Errorf("child of %+v: %+v", sc, s)
		}
		gctx, g := never.Start(ctx, "grandchild", KindInternal)
		if flag && (!g.Context().Sampled || g.parent != s.Context().SpanID || g.parentRemote) {
			t.Errorf("grandchild: %+v", g)
		}
		// Within an unsampled local span, a child costs nothing: it is
		// the same span and context.
		if !flag && (g != s || gctx != ctx) {
			t.Errorf("unsampled grandchild: %+v, want its parent", g)
		}
	}
	if _, s := never.Start(context.Background(), "root", KindServer); s.Context().Sampled {
		t.Error("ratio 0 sampled a new trace")
	}
}

type discard struct{}

func (discard) send(context.Context, []byte) error { return nil }
func (discard) close() error                       { return nil }

// TestEncodeRequest: what the exporter sends decodes with the OTLP
// protobuf definitions into the spans as recorded.
func TestEncodeRequest(t *testing.T) {
	tr := &Tracer{threshold: ratioThreshold(1), exp: newBatcher(resource{}, discard{}, time.Hour)}
	defer tr.Close(context.Background())
	parent := SpanContext{TraceID: TraceID{9, 8, 7}, SpanID: SpanID{6, 5}, Sampled: true, State: "k=v"}
	ctx, s := tr.Start(ContextWithRemote(context.Background(), parent), "HTTP POST", KindServer)
	s.SetString("url.path", "/counters/x")
	s.SetInt("http.response.status_code", -7)
	s.Fail("boom")
	s.end = s.start.Add(time.Millisecond)
	_, c := tr.Start(ctx, "engine.apply", KindInternal)
	c.end = c.start.Add(time.Microsecond)
	body := encodeRequest(resource{service: "counterd", instance: "n1", version: "v1"}, []*Span{s, c})
	var req collectorpb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		t.Fatal(err)
	}
	rs := req.GetResourceSpans()
	if len(rs) != 1 || len(rs[0].GetScopeSpans()) != 1 || rs[0].GetScopeSpans()[0].GetScope().GetName() != scopeName {
		t.Fatalf("request shape: %v", &req)
	}
	res := map[string]string{}
	for _, kv := range rs[0].GetResource().GetAttributes() {
		res[kv.GetKey()] = kv.GetValue().GetStringValue()
	}
	if res["service.name"] != "counterd" || res["service.instance.id"] != "n1" || res["service.version"] != "v1" {
		t.Errorf("resource: %v", res)
	}
	spans := rs[0].GetScopeSpans()[0].GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	a, b := spans[0], spans[1]
	if string(a.GetTraceId()) != string(parent.TraceID[:]) || string(a.GetParentSpanId()) != string(parent.SpanID[:]) ||
		string(a.GetSpanId()) != string(s.sc.SpanID[:]) || a.GetName() != "HTTP POST" || a.GetKind() != tracepb.Span_SPAN_KIND_SERVER ||
		a.GetTraceState() != "k=v" || a.GetEndTimeUnixNano()-a.GetStartTimeUnixNano() != uint64(time.Millisecond) ||
		a.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR || a.GetStatus().GetMessage() != "boom" ||
		a.GetFlags() != 0x301 {
		t.Errorf("server span: %v", a)
	}
	attrs := a.GetAttributes()
	if len(attrs) != 2 || attrs[0].GetKey() != "url.path" || attrs[0].GetValue().GetStringValue() != "/counters/x" ||
		attrs[1].GetKey() != "http.response.status_code" || attrs[1].GetValue().GetIntValue() != -7 {
		t.Errorf("attributes: %v", attrs)
	}
	if string(b.GetParentSpanId()) != string(a.GetSpanId()) || b.GetKind() != tracepb.Span_SPAN_KIND_INTERNAL || b.GetStatus() != nil || b.GetFlags() != 0x101 {
		t.Errorf("child span: %v", b)
	}
}

// TestHTTPExport: with an http:// endpoint, spans are posted as OTLP/HTTP
// protobuf to /v1/traces, and Close sends what is queued.
func TestHTTPExport(t *testing.T) {
	var mu sync.Mutex
	var names []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req collectorpb.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					names = append(names, s.GetName())
				}
			}
		}
		mu.Unlock()
	}))
	defer srv.Close()
	tr, err := Open(Config{Endpoint: srv.URL, SampleRatio: 1, Service: "counterd", BatchTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		_, s := tr.Start(context.Background(), "op"+string(rune('a'+i)), KindInternal)
		s.End()
		s.End() // a second End is ignored
	}
	if err := tr.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(names, ",") != "opa,opb,opc" {
		t.Fatalf("collector received %v", names)
	}
	if tr.Dropped() != 0 || tr.Exported() != 3 {
		t.Fatalf("%d dropped, %d exported", tr.Dropped(), tr.Exported())
	}
	// After Close, spans are dropped and counted.
	_, s := tr.Start(context.Background(), "late", KindInternal)
	s.End()
	if tr.Dropped() != 1 {
		t.Fatalf("late span: %d dropped", tr.Dropped())
	}
}

// TestHTTPHandler: the handler's span is the child of the request's
// traceparent and records the status; the context it passes on carries
// the span.
func TestHTTPHandler(t *testing.T) {
	tr := &Tracer{threshold: ratioThreshold(1), exp: newBatcher(resource{}, discard{}, time.Hour)}
	defer tr.Close(context.Background())
	var inner SpanContext
	h := HTTPHandler(tr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inner = FromContext(r.Context())
		w.WriteHeader(http.StatusTeapot)
	}))
	r := httptest.NewRequest("GET", "/x", nil)
	r.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusTeapot {
		t.Fatal(w.Code)
	}
	if inner.TraceID.String() != "4bf92f3577b34da6a3ce929d0e0e4736" || inner.Sampled || inner.SpanID.String() == "00f067aa0ba902b7" {
		t.Fatalf("handler's context: %+v (unsampled parent: unsampled child with its own id)", inner)
	}
}

// TestExportFailureDrops: spans a collector refuses are dropped and
// counted; the tracer never blocks on it.
func TestExportFailureDrops(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	tr, err := Open(Config{Endpoint: srv.URL + "/otlp", SampleRatio: 1, BatchTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		_, s := tr.Start(context.Background(), "op", KindInternal)
		s.End()
	}
	if err := tr.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if tr.Dropped() != 5 || tr.Exported() != 0 {
		t.Fatalf("%d dropped, %d exported", tr.Dropped(), tr.Exported())
	}
}
