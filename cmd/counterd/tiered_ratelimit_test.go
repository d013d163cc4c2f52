package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/counterd/counterd/internal/testutil/pgtest"
	"github.com/counterd/counterd/internal/testutil/redistest"
)

// TestTieredRateLimitTwoNodes: two counterd processes in tiered mode share
// one Redis (and then one Redis Cluster) and one PostgreSQL database. A
// policy created through one node's HTTP API is visible on the other, and
// 40 checks spread over both nodes and all three front ends (HTTP, RESP
// RL.CHECK, Envoy gRPC) admit exactly the limit of 10. A policies file
// seeds the store; a node started with a different file keeps the stored
// policy.
func TestTieredRateLimitTwoNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	t.Run("Redis", func(t *testing.T) { testTieredRateLimitTwoNodes(t, redistest.New(t).URL) })
	t.Run("RedisCluster", func(t *testing.T) { testTieredRateLimitTwoNodes(t, redistest.NewCluster(t).URL()) })
}

// tieredNode is a tiered counterd with all three front ends.
type tieredNode struct {
	p          *proc
	resp, grpc string
}

func startTiered(t *testing.T, redisURL, dsn string, args ...string) *tieredNode {
	t.Helper()
	n := &tieredNode{resp: "127.0.0.1:" + freePort(t), grpc: "127.0.0.1:" + freePort(t)}
	n.p = start(t, t.TempDir(), append([]string{"--redis", redisURL, "--postgres", dsn, "--resp", n.resp, "--grpc", n.grpc}, args...)...)
	return n
}

func policyFile(t *testing.T, limit int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policies.yaml")
	err := os.WriteFile(path, fmt.Appendf(nil, "policies:\n  - name: seeded\n    match: \"seed:*\"\n    algorithm: fixed_window\n    limit: %d\n    period: 1m\n", limit), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// getPolicy returns the policy's limit on node p (0 when it has none).
func getPolicy(t *testing.T, p *proc, name string) int64 {
	t.Helper()
	resp, err := client.Get(p.addr + "/ratelimit/policies/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return 0
	}
	var pol struct{ Limit int64 }
	if err := json.NewDecoder(resp.Body).Decode(&pol); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET policy %s: %d %v", name, resp.StatusCode, err)
	}
	return pol.Limit
}

func testTieredRateLimitTwoNodes(t *testing.T, redisURL string) {
	dsn := pgtest.StartServer(t).DSN(t)
	a := startTiered(t, redisURL, dsn, "--ratelimit-policies", policyFile(t, 5))
	b := startTiered(t, redisURL, dsn, "--ratelimit-policies", policyFile(t, 99))
	if got := getPolicy(t, b.p, "seeded"); got != 5 {
		t.Errorf("node b started with a file saying 99 serves seeded limit %d; the stored 5 must win", got)
	}

	req, _ := http.NewRequest("PUT", a.p.addr+"/ratelimit/policies/edge-ip",
		strings.NewReader(`{"match":"edge:remote_address=*","algorithm":"token_bucket","limit":10,"period":"1h"}`))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("PUT policy on node a: %d %s", resp.StatusCode, body)
	}
	if err := poll(10*time.Second, func() error {
		if got := getPolicy(t, b.p, "edge-ip"); got != 10 {
			return fmt.Errorf("node b serves edge-ip limit %d", got)
		}
		return nil
	}); err != nil {
		t.Fatalf("policy created on node a never reached node b: %v", err)
	}

	const key, checks, limit = "edge:remote_address=10.0.0.1", 40, 10
	var admitted, denied atomic.Int64
	var wg sync.WaitGroup
	for i := range checks {
		n := []*tieredNode{a, b}[i%2]
		wg.Go(func() {
			ok, err := checkVia(i%3, n, key)
			if err != nil {
				t.Errorf("check %d: %v", i, err)
				return
			}
			if ok {
				admitted.Add(1)
			} else {
				denied.Add(1)
			}
		})
	}
	wg.Wait()
	if admitted.Load() != limit || denied.Load() != checks-limit {
		t.Fatalf("%d checks over two nodes: %d admitted, %d denied; want exactly %d admitted", checks, admitted.Load(), denied.Load(), limit)
	}
}

// checkVia checks key against its policies on node n through front end
// fe: 0 HTTP, 1 RESP RL.CHECK, 2 Envoy gRPC.
func checkVia(fe int, n *tieredNode, key string) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch fe {
	case 0:
		resp, err := client.Post(n.p.addr+"/ratelimit/check", "application/json", strings.NewReader(`{"key":"`+key+`"}`))
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 && resp.StatusCode != 429 {
			return false, fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		return resp.StatusCode == 200, nil
	case 1:
		conn, err := net.Dial("tcp", n.resp)
		if err != nil {
			return false, err
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(conn, "*2\r\n$8\r\nRL.CHECK\r\n$%d\r\n%s\r\n", len(key), key)
		rd := bufio.NewReader(conn)
		hdr, _ := rd.ReadString('\n')
		allowed, err := rd.ReadString('\n')
		if strings.TrimSpace(hdr) != "*4" || err != nil {
			return false, fmt.Errorf("RL.CHECK answered %q %q (%v)", hdr, allowed, err)
		}
		return strings.TrimSpace(allowed) == ":1", nil
	default:
		cc, err := grpc.NewClient(n.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return false, err
		}
		defer cc.Close()
		domain, entry, _ := strings.Cut(key, ":")
		k, v, _ := strings.Cut(entry, "=")
		resp, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain,
			Descriptors: []*rlcommonv3.RateLimitDescriptor{{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: k, Value: v}}}}})
		if err != nil {
			return false, err
		}
		return resp.OverallCode == rlsv3.RateLimitResponse_OK, nil
	}
}
