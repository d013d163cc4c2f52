// Package tracing is counterd's optional distributed tracing: spans in
// the OpenTelemetry model, W3C trace context (traceparent) in and out of
// HTTP requests and gRPC metadata, and export over OTLP (gRPC or HTTP,
// protobuf) to a collector (docs/tracing.md).
//
// It is a small tracer of its own rather than the OpenTelemetry SDK and
// exporters, which would add about 1 MB to the release binary (the
// 40,000,000-byte budget of make check-lean): the spans it sends are
// plain OTLP, decoded by any collector.
//
// Off (a nil *Tracer, the default) it costs one nil check where a span
// would start: Start on a nil *Tracer returns the context unchanged and a
// nil *Span, whose methods do nothing.
package tracing

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// Config selects the collector and the sampling of one node.
type Config struct {
	// Endpoint is the OTLP collector: "" (off), host:port or
	// grpc://host:port (gRPC in plaintext), grpcs://host:port (gRPC over
	// TLS), http://host:port[/path] or https://host:port[/path] (OTLP/HTTP
	// protobuf; the path defaults to /v1/traces).
	Endpoint string
	// SampleRatio is the share of new traces sampled, 0 to 1; a request
	// that carries a trace context follows its parent's sampled flag.
	SampleRatio float64
	// Service, Instance and Version name the node in its spans' resource
	// (service.name, service.instance.id, service.version).
	Service, Instance, Version string
	// BatchTimeout is the longest a finished span waits before it is
	// sent (default 1s).
	BatchTimeout time.Duration
}

// ErrEndpoint wraps every invalid endpoint.
var ErrEndpoint = errors.New("tracing: invalid OTLP endpoint")

// Kind is a span's kind (OTLP SpanKind).
type Kind int8

// The span kinds, numbered as in OTLP.
const (
	KindInternal Kind = 1
	KindServer   Kind = 2
	KindClient   Kind = 3
	KindProducer Kind = 4
	KindConsumer Kind = 5
)

// Tracer starts the spans of one node and exports the sampled ones. Its
// methods are safe for concurrent use and on a nil *Tracer (tracing off).
type Tracer struct {
	threshold uint64 // a new trace is sampled when its id's low 63 bits are below it
	exp       *batcher
}

// Open starts exporting to cfg.Endpoint; nil (tracing off) when it is
// empty. The exporter connects lazily: a collector that is down loses
// spans, never requests.
func Open(cfg Config) (*Tracer, error) {
	if cfg.Endpoint == "" {
		return nil, nil
	}
	if !(cfg.SampleRatio >= 0 && cfg.SampleRatio <= 1) {
		return nil, fmt.Errorf("tracing: sample ratio must be between 0 and 1, not %v", cfg.SampleRatio)
	}
	send, err := newSender(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	if cfg.BatchTimeout <= 0 {
		cfg.BatchTimeout = time.Second
	}
	res := resource{service: cfg.Service, instance: cfg.Instance, version: cfg.Version}
	return &Tracer{threshold: ratioThreshold(cfg.SampleRatio), exp: newBatcher(res, send, cfg.BatchTimeout)}, nil
}

// ratioThreshold is the sampling bound of ratio over 63-bit values.
func ratioThreshold(ratio float64) uint64 {
	if ratio >= 1 {
		return math.MaxUint64
	}
	return uint64(ratio * (1 << 63))
}

// CheckEndpoint reports whether endpoint is one Open accepts; the error
// wraps ErrEndpoint.
func CheckEndpoint(endpoint string) error {
	_, _, _, err := parseEndpoint(endpoint)
	return err
}

// parseEndpoint splits an endpoint into its scheme (grpc, grpcs, http,
// https), host:port and, for HTTP, path.
func parseEndpoint(endpoint string) (scheme, host, path string, err error) {
	raw := endpoint
	if !strings.Contains(raw, "://") {
		raw = "grpc://" + raw
	}
	u, perr := url.Parse(raw)
	if perr != nil || u.Hostname() == "" || u.Port() == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", "", "", fmt.Errorf("%w %q: want host:port, grpc://host:port, grpcs://host:port or http(s)://host:port[/path]", ErrEndpoint, endpoint)
	}
	switch u.Scheme {
	case "grpc", "grpcs":
		if u.Path != "" && u.Path != "/" {
			return "", "", "", fmt.Errorf("%w %q: an OTLP gRPC endpoint has no path", ErrEndpoint, endpoint)
		}
		return u.Scheme, u.Host, "", nil
	case "http", "https":
		path = u.Path
		if path == "" || path == "/" {
			path = "/v1/traces"
		}
		return u.Scheme, u.Host, path, nil
	}
	return "", "", "", fmt.Errorf("%w %q: unknown scheme %q", ErrEndpoint, endpoint, u.Scheme)
}

// Close sends the spans not yet exported (until ctx is done) and stops
// the exporter. Spans ended afterwards are dropped.
func (t *Tracer) Close(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.exp.close(ctx)
}

// Exported is the number of spans the collector accepted.
func (t *Tracer) Exported() uint64 {
	if t == nil {
		return 0
	}
	return t.exp.exported.Load()
}

// Dropped is the number of spans lost: the export queue was full or an
// export failed.
func (t *Tracer) Dropped() uint64 {
	if t == nil {
		return 0
	}
	return t.exp.dropped.Load()
}

// Span is one operation of a trace. A nil *Span (tracing off) ignores
// every call; an unsampled span carries its context to children and
// peers but records nothing.
type Span struct {
	t      *Tracer
	sc     SpanContext
	parent SpanID
	// parentRemote: the parent came from another process.
	parentRemote bool
	name         string
	kind         Kind
	start        time.Time
	end          time.Time
	attrs        []attr
	err          string // status message; "" with failed false: unset
	failed       bool
	ended        atomic.Bool
}

// attr is one span attribute: a string or an int64 value.
type attr struct {
	key   string
	str   string
	num   int64
	isNum bool
}

type ctxKey struct{}

// spanFrom is the span ctx carries: a local span, or a remote parent
// (a Span with only sc set) extracted from a request.
func spanFrom(ctx context.Context) *Span {
	s, _ := ctx.Value(ctxKey{}).(*Span)
	return s
}

// ContextWithRemote returns ctx with sc as the remote parent of the
// spans started from it. An invalid sc leaves ctx as it is.
func ContextWithRemote(ctx context.Context, sc SpanContext) context.Context {
	if !sc.Valid() {
		return ctx
	}
	sc.Remote = true
	return context.WithValue(ctx, ctxKey{}, &Span{sc: sc})
}

// FromContext is the context of the span ctx carries (zero: none).
func FromContext(ctx context.Context) SpanContext {
	if s := spanFrom(ctx); s != nil {
		return s.sc
	}
	return SpanContext{}
}

// Start starts a span named name as a child of the span ctx carries (a
// new trace without one) and returns ctx carrying it. On a nil *Tracer
// it returns ctx and a nil *Span.
func (t *Tracer) Start(ctx context.Context, name string, kind Kind) (context.Context, *Span) {
	if t == nil {
		return ctx, nil
	}
	p := spanFrom(ctx)
	if p != nil && p.t != nil && !p.sc.Sampled {
		// Within a local unsampled span nothing is recorded: the span is
		// its parent's (same context passed on), at no cost.
		return ctx, p
	}
	s := &Span{t: t, name: name, kind: kind}
	if p != nil && p.sc.Valid() {
		s.sc.TraceID, s.parent = p.sc.TraceID, p.sc.SpanID
		s.sc.Sampled, s.sc.State = p.sc.Sampled, p.sc.State
		s.parentRemote = p.sc.Remote
	} else {
		s.sc.TraceID = newTraceID()
		s.sc.Sampled = binary.BigEndian.Uint64(s.sc.TraceID[8:])&(1<<63-1) < t.threshold
	}
	s.sc.SpanID = newSpanID()
	if s.sc.Sampled {
		s.start = time.Now()
	}
	return context.WithValue(ctx, ctxKey{}, s), s
}

// Context is the span's context (zero for a nil span).
func (s *Span) Context() SpanContext {
	if s == nil {
		return SpanContext{}
	}
	return s.sc
}

// Recording reports whether the span records attributes (it is sampled).
func (s *Span) Recording() bool { return s != nil && s.sc.Sampled && s.t != nil }

// SetName renames the span (a name known only once it is sampled costs
// nothing otherwise).
func (s *Span) SetName(name string) {
	if s.Recording() {
		s.name = name
	}
}

// SetString sets a string attribute.
func (s *Span) SetString(key, value string) {
	if s.Recording() {
		s.attrs = append(s.attrs, attr{key: key, str: value})
	}
}

// SetInt sets an integer attribute.
func (s *Span) SetInt(key string, value int64) {
	if s.Recording() {
		s.attrs = append(s.attrs, attr{key: key, num: value, isNum: true})
	}
}

// SetError marks the span failed with err's message; a nil err does
// nothing.
func (s *Span) SetError(err error) {
	if err != nil && s.Recording() {
		s.failed, s.err = true, err.Error()
	}
}

// Fail marks the span failed with msg.
func (s *Span) Fail(msg string) {
	if s.Recording() {
		s.failed, s.err = true, msg
	}
}

// End finishes the span and queues it for export if it is sampled. Only
// the first call counts.
func (s *Span) End() {
	if !s.Recording() || s.ended.Swap(true) {
		return
	}
	s.end = time.Now()
	s.t.exp.add(s)
}

// newTraceID is a random trace id (W3C: random in its low 56 bits at
// least; all 128 bits here), never all zeros.
func newTraceID() (id TraceID) {
	for id == (TraceID{}) {
		binary.BigEndian.PutUint64(id[:8], rand.Uint64())
		binary.BigEndian.PutUint64(id[8:], rand.Uint64())
	}
	return id
}

// newSpanID is a random span id, never all zeros.
func newSpanID() (id SpanID) {
	for id == (SpanID{}) {
		binary.BigEndian.PutUint64(id[:], rand.Uint64())
	}
	return id
}
