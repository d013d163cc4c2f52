package main

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestRateLimitFrontEnds checks the rate limiter as counterd serves it: a
// policy file, the HTTP check with all three header families, RL.CHECK over
// the Redis protocol, and Envoy's rate-limit service over gRPC.
func TestRateLimitFrontEnds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	dir := t.TempDir()
	policies := filepath.Join(dir, "policies.yaml")
	os.WriteFile(policies, []byte(`policies:
  - name: per-ip
    match: "edge:remote_address=*"
    algorithm: fixed_window
    limit: 2
    period: 1m
`), 0o644)
	respPort, grpcPort := freePort(t), freePort(t)
	p := start(t, filepath.Join(dir, "data"), "--resp", "127.0.0.1:"+respPort, "--grpc", "127.0.0.1:"+grpcPort, "--ratelimit-policies", policies)

	// HTTP: two allowed, the third is 429 with Retry-After and the headers.
	body := `{"key": "user:42", "limits": [{"algorithm": "sliding_window", "limit": 2, "period": "1m"}]}`
	var last *http.Response
	for i := 0; i < 3; i++ {
		resp, err := client.Post(p.addr+"/ratelimit/check", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		last = resp
		if i < 2 && resp.StatusCode != 200 {
			t.Fatalf("check %d: %d", i, resp.StatusCode)
		}
	}
	if last.StatusCode != 429 {
		t.Fatalf("third check: %d, want 429", last.StatusCode)
	}
	for _, h := range []string{"Retry-After", "RateLimit", "RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
		if last.Header.Get(h) == "" {
			t.Errorf("429 without %s header", h)
		}
	}

	// RESP: RL.CHECK key limit period_ms -> [allowed, remaining, reset_ms, retry_after_ms].
	conn, err := net.Dial("tcp", "127.0.0.1:"+respPort)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rd := bufio.NewReader(conn)
	for i, want := range []string{":1", ":0"} {
		conn.Write([]byte("*4\r\n$8\r\nRL.CHECK\r\n$5\r\nlogin\r\n$1\r\n1\r\n$5\r\n60000\r\n"))
		hdr, _ := rd.ReadString('\n')
		allowed, _ := rd.ReadString('\n')
		for j := 0; j < 3; j++ {
			rd.ReadString('\n')
		}
		if strings.TrimSpace(hdr) != "*4" || strings.TrimSpace(allowed) != want {
			t.Fatalf("RL.CHECK %d: %q %q, want allowed %s", i, hdr, allowed, want)
		}
	}

	// Envoy: the per-ip policy from the file answers OK twice, then OVER_LIMIT.
	cc, err := grpc.NewClient("127.0.0.1:"+grpcPort, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	rls := rlsv3.NewRateLimitServiceClient(cc)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{{
		Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}},
	}}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp, err := rls.ShouldRateLimit(ctx, req)
		if err != nil || resp.OverallCode != want {
			t.Fatalf("ShouldRateLimit %d: %v %v, want %v", i, resp.GetOverallCode(), err, want)
		}
	}
}
