package main

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/testutil/ports"
)

// BenchmarkRegionReads measures the latency of HTTP GET /counters/{id} at
// scope=local, region and global on three regions (one counterd process
// each, --region-interval 200ms) on loopback. Every region increments the
// same 100 counters first and the global values converge; then one client
// (keep-alive) reads region a, the three scopes taking turns id by id so
// that load on the machine falls on all three alike. BENCH_SAMPLES reads
// per scope (default 3000). COUNTERD_BIN runs another build (an A/B).
//
//	go test -run '^$' -bench BenchmarkRegionReads -benchtime 1x ./cmd/counterd/
func BenchmarkRegionReads(b *testing.B) {
	names := []string{"a", "b", "c"}
	gp, err := ports.Free(len(names))
	if err != nil {
		b.Fatal(err)
	}
	grpcAddr := map[string]string{}
	for i, n := range names {
		grpcAddr[n] = fmt.Sprintf("127.0.0.1:%d", gp[i])
	}
	procs := map[string]*proc{}
	for _, n := range names {
		var peers []string
		for _, o := range names {
			if o != n {
				peers = append(peers, o+"="+grpcAddr[o])
			}
		}
		procs[n] = start(b, filepath.Join(b.TempDir(), n), "--region", n, "--node-id", n+"-1", "--grpc", grpcAddr[n],
			"--peer-regions", strings.Join(peers, ","), "--region-interval", "200ms")
	}
	const ids = 100
	for _, n := range names {
		for i := range ids {
			if code, _, _, err := post(fmt.Sprintf("%s/counters/bench:region:%d/increment", procs[n].addr, i), "", `{"delta":3}`); err != nil || code != 200 {
				b.Fatalf("increment in %s: %d %v", n, code, err)
			}
		}
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if g := getGlobal(b, procs["a"].addr, fmt.Sprintf("bench:region:%d", ids-1)); g.Value == 3*int64(len(names)) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("global values did not converge in 60 s")
		}
	}
	scopes := []string{"local", "region", "global"}
	lat := make([][]time.Duration, len(scopes))
	hc := &http.Client{Timeout: 10 * time.Second}
	read := func(url string) time.Duration {
		t0 := time.Now()
		resp, err := hc.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("GET %s: %d", url, resp.StatusCode)
		}
		return time.Since(t0)
	}
	samples := envInt("BENCH_SAMPLES", 3000)
	for i := range samples / 10 { // warm-up
		read(fmt.Sprintf("%s/counters/bench:region:%d?scope=global", procs["a"].addr, i%ids))
	}
	b.ResetTimer()
	for i := range samples {
		for k, s := range scopes {
			lat[k] = append(lat[k], read(fmt.Sprintf("%s/counters/bench:region:%d?scope=%s", procs["a"].addr, i%ids, s)))
		}
	}
	b.StopTimer()
	for k, s := range scopes {
		quantiles(b, s, lat[k], time.Microsecond, "µs")
	}
}
