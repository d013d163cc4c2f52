package server

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/counterd/counterd/internal/shed"
)

// TestShedUnary: with every slot taken, a client call fails with
// RESOURCE_EXHAUSTED at once, while a cluster peer call still runs.
func TestShedUnary(t *testing.T) {
	lim := shed.New(shed.Config{MaxInflight: 1, MaxQueue: -1, MaxWait: time.Millisecond})
	if err := lim.Acquire(context.Background(), "test"); err != nil {
		t.Fatal(err)
	}
	ic := shedUnary(lim)
	ran := false
	h := func(context.Context, any) (any, error) { ran = true; return "ok", nil }
	_, err := ic(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"}, h)
	if status.Code(err) != codes.ResourceExhausted || ran {
		t.Fatalf("client call under overload: %v (ran %v), want RESOURCE_EXHAUSTED", err, ran)
	}
	if _, err := ic(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: peerService + "Apply"}, h); err != nil || !ran {
		t.Fatalf("peer call: %v (ran %v)", err, ran)
	}
	lim.Release()
	ran = false
	if _, err := ic(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"}, h); err != nil || !ran || lim.Inflight() != 0 {
		t.Fatalf("client call with a free slot: %v (ran %v, %d in flight after)", err, ran, lim.Inflight())
	}
}
