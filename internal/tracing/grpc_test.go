package tracing

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

// recordingHealth answers Check and keeps the span context each call's
// handler saw.
type recordingHealth struct {
	*health.Server
	mu  sync.Mutex
	got []SpanContext
}

func (h *recordingHealth) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.mu.Lock()
	h.got = append(h.got, FromContext(ctx))
	h.mu.Unlock()
	return h.Server.Check(ctx, req)
}

// TestGRPCPropagation: a call made within a span carries traceparent in
// its metadata, and the server's handler runs in a child of the client's
// span; a call outside any trace carries none, and a method the server
// traces only with a parent then runs untraced.
func TestGRPCPropagation(t *testing.T) {
	tr := &Tracer{threshold: ratioThreshold(1), exp: newBatcher(resource{}, discard{}, time.Hour)}
	defer tr.Close(context.Background())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &recordingHealth{Server: health.NewServer()}
	gs := grpc.NewServer(ServerOptions(tr, func(m string) bool { return m == "/grpc.health.v1.Health/Check" })...)
	healthpb.RegisterHealthServer(gs, hs)
	go func() { _ = gs.Serve(ln) }()
	defer gs.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), append(DialOptions(tr), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Outside any trace: no traceparent, and Check (parent only) is not traced.
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	// Within a span.
	sctx, span := tr.Start(ctx, "request", KindServer)
	if _, err := client.Check(sctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	span.End()
	// A caller's own traceparent in metadata (another process) is honoured.
	remote := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if _, err := client.Check(metadata.AppendToOutgoingContext(ctx, "traceparent", remote), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if len(hs.got) != 3 {
		t.Fatalf("%d calls recorded", len(hs.got))
	}
	if hs.got[0].Valid() {
		t.Errorf("call outside a trace ran in %+v", hs.got[0])
	}
	if g := hs.got[1]; g.TraceID != span.Context().TraceID || g.SpanID == span.Context().SpanID || !g.Sampled {
		t.Errorf("call within span %+v ran in %+v, want a descendant", span.Context(), g)
	}
	if g := hs.got[2]; g.TraceID.String() != "4bf92f3577b34da6a3ce929d0e0e4736" || g.SpanID.String() == "00f067aa0ba902b7" || !g.Sampled {
		t.Errorf("call with a caller's traceparent ran in %+v", g)
	}
}
