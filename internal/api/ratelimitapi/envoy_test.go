package ratelimitapi

import (
	"context"
	"net"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	rls "github.com/counterd/counterd/api/counterd/envoyrls/v3"
	"github.com/counterd/counterd/internal/ratelimit"
)

// envoyClient serves RegisterEnvoy on a loopback listener and returns a
// real gRPC client of it.
func envoyClient(t *testing.T, l ratelimit.Checker, opts EnvoyOptions) rlsv3.RateLimitServiceClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	RegisterEnvoy(srv, l, opts)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

func desc(kv ...string) *rlcommonv3.RateLimitDescriptor {
	d := &rlcommonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func TestEnvoyShouldRateLimit(t *testing.T) {
	clk := newFakeClock()
	l := newLimiter(t, clk.Now,
		ratelimit.Policy{Name: "per-ip", Match: "edge:remote_address=*", Algorithm: ratelimit.FixedWindow, Limit: 2, Period: time.Minute},
		ratelimit.Policy{Name: "api-path", Match: "edge:path=/api*", Algorithm: ratelimit.TokenBucket, Limit: 100, Period: time.Second})
	c := envoyClient(t, l, EnvoyOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{
		desc("remote_address", "10.0.0.1"),
		desc("path", "/api/users"),
		desc("user_agent", "curl"), // no policy: not limited
	}}
	for i := range 2 {
		resp, err := c.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode != rlsv3.RateLimitResponse_OK || len(resp.Statuses) != 3 {
			t.Fatalf("request %d: %v", i, resp)
		}
		s := resp.Statuses[0]
		if s.Code != rlsv3.RateLimitResponse_OK || s.LimitRemaining != uint32(1-i) || s.CurrentLimit.GetName() != "per-ip" ||
			s.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || s.CurrentLimit.GetRequestsPerUnit() != 2 {
			t.Errorf("request %d, per-ip status: %v", i, s)
		}
		if u := resp.Statuses[2]; u.Code != rlsv3.RateLimitResponse_OK || u.CurrentLimit != nil {
			t.Errorf("unlimited descriptor: %v", u)
		}
	}
	resp, err := c.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT ||
		resp.Statuses[1].Code != rlsv3.RateLimitResponse_OK {
		t.Fatalf("third request: %v", resp)
	}
	if d := resp.Statuses[0].DurationUntilReset.AsDuration(); d != time.Minute {
		t.Errorf("duration until reset %v", d)
	}
	headers := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		headers[h.Key] = h.Value
	}
	if headers["Retry-After"] != "60" || headers["X-RateLimit-Limit"] != "2" ||
		headers["RateLimit-Policy"] != `"per-ip";q=2;w=60, "api-path";q=100;w=1` {
		t.Errorf("headers: %v", headers)
	}
	// Atomic: the over-limit request did not charge the path limit.
	if s, _ := l.Check("edge:path=/api/users", l.Policies()[1].RateLimit(), 0); s.Remaining != 98 {
		t.Errorf("api-path remaining %d, want 98", s.Remaining)
	}

	// A descriptor's own limit, hits_addend, and a cost above the limit.
	over := &rlsv3.RateLimitRequest{Domain: "svc", HitsAddend: 3, Descriptors: []*rlcommonv3.RateLimitDescriptor{{
		Entries: desc("k", "v").Entries,
		Limit:   &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_HOUR},
	}}}
	resp, err = c.ShouldRateLimit(ctx, over)
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 2 ||
		resp.Statuses[0].CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR {
		t.Fatalf("override: %v %v", resp, err)
	}
	over.Descriptors[0].HitsAddend = wrapperspb.UInt64(6)
	resp, err = c.ShouldRateLimit(ctx, over)
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("cost above the limit: %v %v", resp, err)
	}

	// Bad requests.
	for _, r := range []*rlsv3.RateLimitRequest{
		{Domain: "", Descriptors: req.Descriptors},
		{Domain: "edge"},
		{Domain: "svc", Descriptors: []*rlcommonv3.RateLimitDescriptor{{Entries: desc("k", "v").Entries,
			Limit: &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 0, Unit: typev3.RateLimitUnit_HOUR}}}},
	} {
		if _, err := c.ShouldRateLimit(ctx, r); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: %v, want InvalidArgument", r, err)
		}
	}
	l.Close()
	if _, err := c.ShouldRateLimit(ctx, req); status.Code(err) != codes.Unavailable {
		t.Errorf("closed limiter: %v", err)
	}
}

func TestDescriptorKey(t *testing.T) {
	entries := []*rls.RateLimitDescriptor_Entry{{Key: "a", Value: "1"}, {Key: "b", Value: "x/y"}}
	if got := DescriptorKey("edge", entries); got != "edge:a=1/b=x/y" {
		t.Errorf("DescriptorKey = %q", got)
	}
}
