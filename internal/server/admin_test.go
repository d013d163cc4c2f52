package server

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/counterd/counterd/internal/shed"
)

// TestShedUnary: with the only slot taken and the queue full, a client
// call fails at once with UNAVAILABLE (node overloaded), one of a client
// whose own queue is full with RESOURCE_EXHAUSTED, both counted by
// reason; a cluster peer call still runs; with a free slot a call runs
// with its slot in its context (shed.IOWait parks it).
func TestShedUnary(t *testing.T) {
	fair := shed.NewFair(shed.FairConfig{MaxLimit: 1, MinLimit: 1, MaxQueue: 2, MaxClientQueue: 1, MaxWait: time.Minute})
	_, sm := newShedder(Config{MaxInflight: -1}, prometheus.NewRegistry())
	ic := shedUnary(fair, sm)
	from := func(ip string) context.Context {
		return peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: 1}})
	}
	var holder shed.Ticket
	if fair.Acquire(&holder, shed.ClientKey(netipOf(t, "10.0.0.9")), 0) != shed.Admitted {
		t.Fatal("first request shed")
	}
	client := &grpc.UnaryServerInfo{FullMethod: "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"}
	ran := 0
	h := func(ctx context.Context, _ any) (any, error) {
		ran++
		if !shed.TicketFrom(ctx).Holding() && ctx.Value(peerMarker{}) == nil {
			t.Error("admitted call without its slot in its context")
		}
		return "ok", nil
	}
	// Fill the queue: one waiter each from A and B.
	queued := make(chan error, 2)
	for _, ip := range []string{"10.0.0.1", "10.0.0.2"} {
		go func() { _, err := ic(from(ip), nil, client, h); queued <- err }()
	}
	waitFor(t, func() bool {
		return sm.shedCount("grpc", "overload")+sm.shedCount("grpc", "client") == 0 && fairQueued(fair) == 2
	})
	if _, err := ic(from("10.0.0.3"), nil, client, h); status.Code(err) != codes.Unavailable {
		t.Fatalf("client call with the queue full: %v, want UNAVAILABLE", err)
	}
	if _, err := ic(context.WithValue(from("10.0.0.3"), peerMarker{}, true), nil, &grpc.UnaryServerInfo{FullMethod: peerService + "Apply"}, h); err != nil || ran != 1 {
		t.Fatalf("peer call: %v (ran %d)", err, ran)
	}
	if got := sm.shedCount("grpc", "overload"); got != 1 {
		t.Fatalf("shed overload counted %v, want 1", got)
	}
	fair.Release(&holder) // A's call runs, then B's
	for range 2 {
		if err := <-queued; err != nil {
			t.Fatalf("queued call: %v", err)
		}
	}
	if ran != 3 || fair.Running() != 0 {
		t.Fatalf("ran %d, %d slots held after", ran, fair.Running())
	}
	// A client over its share while another waits: RESOURCE_EXHAUSTED.
	small := shed.NewFair(shed.FairConfig{MaxLimit: 1, MinLimit: 1, MaxQueue: 8, MaxClientQueue: 1, MaxWait: time.Minute})
	ic = shedUnary(small, sm)
	if small.Acquire(&holder, shed.ClientKey(netipOf(t, "10.0.0.1")), 0) != shed.Admitted {
		t.Fatal("first request shed")
	}
	for i, ip := range []string{"10.0.0.1", "10.0.0.2"} {
		go func() { _, err := ic(from(ip), nil, client, h); queued <- err }()
		waitFor(t, func() bool { return fairQueued(small) == i+1 })
	}
	if _, err := ic(from("10.0.0.1"), nil, client, h); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("call of a client whose queue is full: %v, want RESOURCE_EXHAUSTED", err)
	}
	if got := sm.shedCount("grpc", "client"); got != 1 {
		t.Fatalf("shed client counted %v, want 1", got)
	}
	small.Release(&holder)
	for range 2 {
		if err := <-queued; err != nil {
			t.Fatal(err)
		}
	}
}

type peerMarker struct{}

func (m *shedMetrics) shedCount(fe, reason string) float64 {
	var d dto.Metric
	if err := m.shed.WithLabelValues(fe, reason).Write(&d); err != nil {
		return -1
	}
	return d.GetCounter().GetValue()
}

func netipOf(t *testing.T, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// fairQueued is how many requests wait in f (Running counts the rest).
func fairQueued(f *shed.Fair) int { return f.Queued() }

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		time.Sleep(time.Millisecond)
	}
}
