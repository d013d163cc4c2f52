package tracing

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"
)

// Export limits: a batch holds at most maxBatch spans, the queue at most
// maxQueue (further spans are dropped and counted, never waited for),
// and one export may take exportTimeout.
const (
	maxBatch      = 512
	maxQueue      = 4096
	exportTimeout = 10 * time.Second
	// scopeName is the instrumentation scope of every span.
	scopeName = "github.com/counterd/counterd"
	// exportMethod is the OTLP gRPC method.
	exportMethod = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
)

// resource is what names the node in every batch.
type resource struct{ service, instance, version string }

// sender delivers one encoded ExportTraceServiceRequest.
type sender interface {
	send(ctx context.Context, body []byte) error
	close() error
}

// batcher queues ended spans and exports them in batches from its own
// goroutine, at least every interval.
type batcher struct {
	res      resource
	out      sender
	queue    chan *Span
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
	closed   atomic.Bool
	dropped  atomic.Uint64
	exported atomic.Uint64
	// flushNow asks the loop for an export before the interval.
	flushNow chan struct{}
}

func newBatcher(res resource, out sender, interval time.Duration) *batcher {
	b := &batcher{res: res, out: out, queue: make(chan *Span, maxQueue), stop: make(chan struct{}),
		done: make(chan struct{}), flushNow: make(chan struct{}, 1)}
	go b.loop(interval)
	return b
}

// add queues s; a full queue or a closed batcher drops it.
func (b *batcher) add(s *Span) {
	if b.closed.Load() {
		b.dropped.Add(1)
		return
	}
	select {
	case b.queue <- s:
		if len(b.queue) >= maxBatch {
			select {
			case b.flushNow <- struct{}{}:
			default:
			}
		}
	default:
		b.dropped.Add(1)
	}
}

func (b *batcher) loop(interval time.Duration) {
	defer close(b.done)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-b.flushNow:
		case <-b.stop:
			return // close exports what is left
		}
		b.drain(context.Background())
	}
}

// drain exports every queued span, a batch at a time.
func (b *batcher) drain(ctx context.Context) {
	for {
		batch := make([]*Span, 0, min(len(b.queue), maxBatch))
	fill:
		for len(batch) < maxBatch {
			select {
			case s := <-b.queue:
				batch = append(batch, s)
			default:
				break fill
			}
		}
		if len(batch) == 0 {
			return
		}
		b.export(ctx, batch)
		if len(batch) < maxBatch {
			return
		}
	}
}

func (b *batcher) export(ctx context.Context, batch []*Span) {
	ctx, cancel := context.WithTimeout(ctx, exportTimeout)
	defer cancel()
	if err := b.out.send(ctx, encodeRequest(b.res, batch)); err != nil {
		b.dropped.Add(uint64(len(batch)))
		return
	}
	b.exported.Add(uint64(len(batch)))
}

// close stops the loop, then exports what is queued until ctx is done.
func (b *batcher) close(ctx context.Context) error {
	b.closed.Store(true)
	b.stopOnce.Do(func() { close(b.stop) })
	select {
	case <-b.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	b.drain(ctx)
	return errors.Join(ctx.Err(), b.out.close())
}

// encodeRequest is an OTLP ExportTraceServiceRequest of spans, all of
// one resource and one instrumentation scope (opentelemetry-proto,
// collector/trace/v1 and trace/v1).
func encodeRequest(res resource, spans []*Span) []byte {
	var scope []byte
	scope = protowire.AppendTag(scope, 1, protowire.BytesType) // ScopeSpans.scope
	scope = protowire.AppendBytes(scope, protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), scopeName))
	for _, s := range spans {
		scope = protowire.AppendTag(scope, 2, protowire.BytesType) // ScopeSpans.spans
		scope = protowire.AppendBytes(scope, encodeSpan(s))
	}
	var r []byte // Resource
	r = appendKV(r, 1, attr{key: "service.name", str: res.service})
	if res.instance != "" {
		r = appendKV(r, 1, attr{key: "service.instance.id", str: res.instance})
	}
	if res.version != "" {
		r = appendKV(r, 1, attr{key: "service.version", str: res.version})
	}
	var rs []byte                                        // ResourceSpans
	rs = protowire.AppendTag(rs, 1, protowire.BytesType) // resource
	rs = protowire.AppendBytes(rs, r)
	rs = protowire.AppendTag(rs, 2, protowire.BytesType) // scope_spans
	rs = protowire.AppendBytes(rs, scope)
	req := protowire.AppendTag(nil, 1, protowire.BytesType) // resource_spans
	return protowire.AppendBytes(req, rs)
}

// encodeSpan is one OTLP Span.
func encodeSpan(s *Span) []byte {
	b := make([]byte, 0, 128+32*len(s.attrs))
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, s.sc.TraceID[:])
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendBytes(b, s.sc.SpanID[:])
	if s.sc.State != "" {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendString(b, s.sc.State)
	}
	if s.parent != (SpanID{}) {
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendBytes(b, s.parent[:])
	}
	b = protowire.AppendTag(b, 5, protowire.BytesType)
	b = protowire.AppendString(b, s.name)
	b = protowire.AppendTag(b, 6, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(s.kind))
	b = protowire.AppendTag(b, 7, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, uint64(s.start.UnixNano()))
	b = protowire.AppendTag(b, 8, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, uint64(s.end.UnixNano()))
	for _, a := range s.attrs {
		b = appendKV(b, 9, a)
	}
	if s.failed {
		var st []byte // Status: message 2, code 3 (STATUS_CODE_ERROR = 2)
		st = protowire.AppendTag(st, 2, protowire.BytesType)
		st = protowire.AppendString(st, s.err)
		st = protowire.AppendTag(st, 3, protowire.VarintType)
		st = protowire.AppendVarint(st, 2)
		b = protowire.AppendTag(b, 15, protowire.BytesType)
		b = protowire.AppendBytes(b, st)
	}
	// flags: the W3C trace flags (sampled) and whether the parent was remote
	// (bits 8 and 9: SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK, IS_REMOTE).
	flags := uint32(1) | 1<<8
	if s.parentRemote {
		flags |= 1 << 9
	}
	b = protowire.AppendTag(b, 16, protowire.Fixed32Type)
	return protowire.AppendFixed32(b, flags)
}

// appendKV appends a KeyValue (key 1, AnyValue 2: string_value 1 or
// int_value 3) as field num.
func appendKV(b []byte, num protowire.Number, a attr) []byte {
	var v []byte
	if a.isNum {
		v = protowire.AppendTag(v, 3, protowire.VarintType)
		v = protowire.AppendVarint(v, uint64(a.num))
	} else {
		v = protowire.AppendTag(v, 1, protowire.BytesType)
		v = protowire.AppendString(v, a.str)
	}
	var kv []byte
	kv = protowire.AppendTag(kv, 1, protowire.BytesType)
	kv = protowire.AppendString(kv, a.key)
	kv = protowire.AppendTag(kv, 2, protowire.BytesType)
	kv = protowire.AppendBytes(kv, v)
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, kv)
}

// newSender is the OTLP client of endpoint.
func newSender(endpoint string) (sender, error) {
	scheme, host, path, err := parseEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	switch scheme {
	case "http", "https":
		return &httpSender{url: scheme + "://" + host + path, client: &http.Client{Timeout: exportTimeout}}, nil
	}
	creds := insecure.NewCredentials()
	if scheme == "grpcs" {
		creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
	}
	conn, err := grpc.NewClient(host, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrEndpoint, endpoint, err)
	}
	return &grpcSender{conn: conn}, nil
}

// grpcSender calls TraceService/Export with the request already encoded.
type grpcSender struct{ conn *grpc.ClientConn }

func (g *grpcSender) send(ctx context.Context, body []byte) error {
	var reply rawMessage
	return g.conn.Invoke(ctx, exportMethod, rawMessage(body), &reply, grpc.ForceCodec(rawCodec{}))
}

func (g *grpcSender) close() error { return g.conn.Close() }

// rawMessage is a message already in protobuf wire format.
type rawMessage []byte

// rawCodec passes rawMessages through as they are, under the proto
// content subtype a collector expects.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	m, ok := v.(rawMessage)
	if !ok {
		return nil, fmt.Errorf("tracing: cannot encode %T", v)
	}
	return m, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	m, ok := v.(*rawMessage)
	if !ok {
		return fmt.Errorf("tracing: cannot decode into %T", v)
	}
	*m = append((*m)[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }

// httpSender posts the request to an OTLP/HTTP endpoint.
type httpSender struct {
	url    string
	client *http.Client
}

func (h *httpSender) send(ctx context.Context, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	resp, err := h.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("tracing: OTLP/HTTP export: %s", resp.Status)
	}
	return nil
}

func (h *httpSender) close() error { h.client.CloseIdleConnections(); return nil }
