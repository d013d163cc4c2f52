package tracing

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// TraceID and SpanID identify a trace and one of its spans.
type (
	TraceID [16]byte
	SpanID  [8]byte
)

// String is the id in lowercase hex.
func (id TraceID) String() string { return hex.EncodeToString(id[:]) }

// String is the id in lowercase hex.
func (id SpanID) String() string { return hex.EncodeToString(id[:]) }

// SpanContext is what a span passes on to its children and peers: the
// W3C traceparent's ids and sampled flag, and its tracestate.
type SpanContext struct {
	TraceID TraceID
	SpanID  SpanID
	Sampled bool
	// Remote: the context came from another process.
	Remote bool
	// State is the W3C tracestate header, passed on unchanged.
	State string
}

// Valid reports whether both ids are set.
func (sc SpanContext) Valid() bool { return sc.TraceID != (TraceID{}) && sc.SpanID != (SpanID{}) }

// The W3C trace context headers (gRPC metadata keys alike).
const (
	TraceparentHeader = "traceparent"
	TracestateHeader  = "tracestate"
)

// ErrTraceparent wraps every traceparent ParseTraceparent refuses.
var ErrTraceparent = errors.New("tracing: invalid traceparent")

// maxTracestate bounds a tracestate passed on (W3C: 32 members of at
// most 256 bytes; longer ones may be dropped).
const maxTracestate = 512

// ParseTraceparent parses a W3C traceparent header:
// version "-" trace-id "-" parent-id "-" trace-flags, lowercase hex. A
// future version (not 00, not ff) may carry more fields after a "-",
// which are ignored, as the recommendation says.
func ParseTraceparent(h string) (SpanContext, error) {
	var sc SpanContext
	if len(h) < 55 {
		return sc, fmt.Errorf("%w: %d bytes, want 55", ErrTraceparent, len(h))
	}
	ver, ok := hexByte(h[0:2])
	if !ok || ver == 0xff || h[2] != '-' || h[35] != '-' || h[52] != '-' {
		return sc, fmt.Errorf("%w: not version-traceid-parentid-flags", ErrTraceparent)
	}
	if ver == 0 && len(h) != 55 || ver != 0 && len(h) > 55 && h[55] != '-' {
		return sc, fmt.Errorf("%w: trailing bytes", ErrTraceparent)
	}
	if !lowerHex(h[3:35]) || !lowerHex(h[36:52]) {
		return sc, fmt.Errorf("%w: ids must be lowercase hex", ErrTraceparent)
	}
	_, _ = hex.Decode(sc.TraceID[:], []byte(h[3:35]))
	_, _ = hex.Decode(sc.SpanID[:], []byte(h[36:52]))
	flags, ok := hexByte(h[53:55])
	if !ok {
		return SpanContext{}, fmt.Errorf("%w: flags must be lowercase hex", ErrTraceparent)
	}
	if !sc.Valid() {
		return SpanContext{}, fmt.Errorf("%w: all-zero trace or parent id", ErrTraceparent)
	}
	sc.Sampled = flags&1 == 1
	sc.Remote = true
	return sc, nil
}

// Traceparent is sc as a version-00 traceparent header.
func (sc SpanContext) Traceparent() string {
	var b [55]byte
	b[0], b[1], b[2] = '0', '0', '-'
	hex.Encode(b[3:35], sc.TraceID[:])
	b[35] = '-'
	hex.Encode(b[36:52], sc.SpanID[:])
	b[52], b[53], b[54] = '-', '0', '0'
	if sc.Sampled {
		b[54] = '1'
	}
	return string(b[:])
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func hexByte(s string) (byte, bool) {
	if len(s) != 2 || !lowerHex(s) {
		return 0, false
	}
	var b [1]byte
	_, _ = hex.Decode(b[:], []byte(s))
	return b[0], true
}

// Extract is the trace context of the W3C headers get returns (an
// http.Header's Get, or a gRPC metadata lookup); zero without a valid
// traceparent, which then starts a new trace, as W3C asks.
func Extract(get func(string) string) SpanContext {
	h := get(TraceparentHeader)
	if h == "" {
		return SpanContext{}
	}
	sc, err := ParseTraceparent(strings.TrimSpace(h))
	if err != nil {
		return SpanContext{}
	}
	if st := get(TracestateHeader); len(st) <= maxTracestate {
		sc.State = st
	}
	return sc
}

// InjectHTTP sets the W3C headers of sc on h.
func InjectHTTP(h http.Header, sc SpanContext) {
	if !sc.Valid() {
		return
	}
	h.Set(TraceparentHeader, sc.Traceparent())
	if sc.State != "" {
		h.Set(TracestateHeader, sc.State)
	}
}
