package main

// Benchmarks of the event pipeline end to end (scripts/bench-pipeline.sh):
// events posted to a collector-only counterd in batches of 1000, four
// batches in flight, until a consumer counterd has applied them all, on
// kfake (franz-go's in-process Kafka-protocol cluster) and on a real NATS
// JetStream server; and, for comparison, the same events as individual
// HTTP requests (one per counter op). Each b.N is 1000 events.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/counterd/counterd/internal/testutil/natstest"
)

// benchEvents returns n valid events (no copies, none malformed) of 1000
// posts in NDJSON batches of 1000, and the ops they mean.
func benchEvents(n int) (batches []string, posts []string) {
	var b strings.Builder
	ts := time.Now().UnixMilli()
	for i := range n {
		post := fmt.Sprintf("p%d", i%1000)
		fmt.Fprintf(&b, `{"id":"b%d","type":"impression","ts":%d,"post":%q,"user":"u%d","country":"c%d"}`+"\n", i, ts, post, i%50000, i%5)
		posts = append(posts, post)
		if (i+1)%1000 == 0 || i == n-1 {
			batches = append(batches, b.String())
			b.Reset()
		}
	}
	return batches, posts
}

var (
	lagRE     = regexp.MustCompile(`(?m)^counterd_pipeline_consumer_lag\{partition="\d+"\} (\S+)$`)
	appliedRE = regexp.MustCompile(`(?m)^counterd_pipeline_events_total\{result="applied"\} (\S+)$`)
)

// consumerProgress reads the consumer's /metrics: its lag gauges summed
// and the events it applied (-1, -1 when it does not answer). Cheap for
// the consumer, unlike an aggregate over every counter (the markers too).
func consumerProgress(addr string) (lag, applied float64) {
	resp, err := client.Get(addr + "/metrics")
	if err != nil {
		return -1, -1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, m := range lagRE.FindAllSubmatch(body, -1) {
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		lag += v
	}
	if m := appliedRE.FindSubmatch(body); m != nil {
		applied, _ = strconv.ParseFloat(string(m[1]), 64)
	}
	return lag, applied
}

// procCPU returns the CPU time (user + system) process pid used so far.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The fields after the command name (which may hold spaces), from
	// field 3 on: utime and stime are fields 14 and 15, in clock ticks.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ is 100 on Linux
}

// selfCPU returns the CPU time of the benchmark process (the sender, the
// pollers and, with Kafka, kfake).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// natsServerPID finds the nats-server listening on url's port (0: none
// found, e.g. a server on another machine).
func natsServerPID(url string) int {
	_, port, _ := strings.Cut(strings.TrimPrefix(url, "nats://"), ":")
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cl, _ := os.ReadFile("/proc/" + d.Name() + "/cmdline")
		args := strings.Split(string(cl), "\x00")
		if len(args) == 0 || filepath.Base(args[0]) != "nats-server" {
			continue
		}
		if port == "" || slices.Contains(args, port) || port == "4222" && !slices.Contains(args, "-p") {
			return pid
		}
	}
	return 0
}

var adminRE = regexp.MustCompile(`msg="admin listening" addr=(\S+)`)

// profileDir is where benchPipeline writes CPU profiles of the collector
// and the consumer (COUNTERD_BENCH_PROFILE=DIR), each of the first
// COUNTERD_BENCH_PROFILE_SECONDS (default 5) of the run.
func profileArgs() []string {
	if os.Getenv("COUNTERD_BENCH_PROFILE") == "" {
		return nil
	}
	return []string{"--pprof", "--admin", "127.0.0.2:0"}
}

// startProfile fetches a CPU profile of p into COUNTERD_BENCH_PROFILE/name.pprof.
func startProfile(b *testing.B, p *proc, name string) (wait func()) {
	dir := os.Getenv("COUNTERD_BENCH_PROFILE")
	if dir == "" {
		return func() {}
	}
	return fetchProfile(b, p.logs, name, dir)
}

// fetchProfile fetches, in the background, a CPU profile of
// COUNTERD_BENCH_PROFILE_SECONDS (default 5) from the admin listener that
// logs names (a process started with --pprof --admin) into
// dir/name.pprof; wait waits for it.
func fetchProfile(b *testing.B, logs func() string, name, dir string) (wait func()) {
	m := adminRE.FindStringSubmatch(logs())
	for deadline := time.Now().Add(10 * time.Second); m == nil && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond) // logged after "http listening"
		m = adminRE.FindStringSubmatch(logs())
	}
	if m == nil {
		b.Fatalf("%s: no admin listener in the log", name)
	}
	secs := os.Getenv("COUNTERD_BENCH_PROFILE_SECONDS")
	if secs == "" {
		secs = "5"
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		hc := &http.Client{Timeout: 5 * time.Minute}
		resp, err := hc.Get("http://" + m[1] + "/debug/pprof/profile?seconds=" + secs)
		if err != nil {
			b.Logf("%s: profile: %v", name, err)
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		os.WriteFile(filepath.Join(dir, name+".pprof"), body, 0o644)
	}()
	return func() { <-done }
}

// benchPipeline runs the events of b.N batches through a collector and a
// consumer on the stream of streamArgs. natsPID, when not 0, is the
// stream server's process, whose CPU is reported too.
func benchPipeline(b *testing.B, streamArgs []string, natsPID int) {
	rulesPath := filepath.Join(b.TempDir(), "rules.yaml")
	os.WriteFile(rulesPath, []byte(pipelineRules), 0o644)
	col := start(b, b.TempDir(), append(append([]string{"--events-no-consume"}, profileArgs()...), streamArgs...)...)
	cons := start(b, b.TempDir(), append(append([]string{"--rules", rulesPath, "--node-id", "bench"}, profileArgs()...), streamArgs...)...)
	n := b.N * 1000
	batches, _ := benchEvents(n)
	name := strings.TrimPrefix(b.Name(), "BenchmarkPipeline")
	if i := strings.IndexByte(name, '-'); i >= 0 {
		name = name[:i]
	}
	cpu0 := [4]time.Duration{procCPU(col.cmd.Process.Pid), procCPU(cons.cmd.Process.Pid), selfCPU(), procCPU(natsPID)}
	b.ResetTimer()
	waitCol := startProfile(b, col, name+"-collector")
	waitCons := startProfile(b, cons, name+"-consumer")
	began := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var sendErr atomic.Pointer[string]
	for range 4 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(batches) {
					return
				}
				resp, err := client.Post(col.addr+"/events", "application/x-ndjson", strings.NewReader(batches[i]))
				if err != nil || resp.StatusCode != http.StatusAccepted {
					msg := fmt.Sprint(err)
					if resp != nil {
						msg = resp.Status
					}
					sendErr.Store(&msg)
					return
				}
				resp.Body.Close()
			}
		})
	}
	// Until the consumer's metrics count every event applied, sample its
	// lag every 20 ms; then read the counters until they hold them all.
	var lags []float64
	for {
		if e := sendErr.Load(); e != nil {
			b.Fatal(*e)
		}
		if time.Since(began) > 10*time.Minute {
			b.Fatalf("events not applied after 10 minutes")
		}
		lag, applied := consumerProgress(cons.addr)
		if applied >= float64(n) {
			break
		}
		lags = append(lags, lag)
		time.Sleep(20 * time.Millisecond)
	}
	for {
		resp, err := client.Get(cons.addr + "/counters/views:*/aggregate")
		if err != nil {
			b.Fatal(err)
		}
		var m struct{ Value int64 }
		json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		if m.Value == int64(n) {
			break
		}
		if time.Since(began) > 10*time.Minute {
			b.Fatalf("%d of %d events applied after 10 minutes", m.Value, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	el := time.Since(began)
	wg.Wait()
	b.StopTimer()
	cpu1 := [4]time.Duration{procCPU(col.cmd.Process.Pid), procCPU(cons.cmd.Process.Pid), selfCPU(), procCPU(natsPID)}
	waitCol()
	waitCons()
	b.ReportMetric(float64(n)/el.Seconds(), "events/s")
	b.ReportMetric(0, "ns/op")
	// CPU per event of each process (µs): where the two cores went.
	for i, what := range []string{"collector", "consumer", "bench", "nats"} {
		if i == 3 && natsPID == 0 {
			continue
		}
		b.ReportMetric(float64(cpu1[i]-cpu0[i])/float64(time.Microsecond)/float64(n), what+"-cpu-us/event")
	}
	if len(lags) > 0 {
		slices.Sort(lags)
		b.ReportMetric(lags[min(len(lags)-1, len(lags)*99/100)], "lag-p99-records")
	}
}

func BenchmarkPipelineKafka(b *testing.B) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		b.Fatal(err)
	}
	defer kc.Close()
	benchPipeline(b, []string{"--kafka", kc.ListenAddrs()[0], "--kafka-partitions", "4"}, 0)
}

func BenchmarkPipelineJetStream(b *testing.B) {
	url := natstest.New(b)
	name := natstest.Name("B")
	benchPipeline(b, []string{"--nats", url, "--nats-stream", name, "--nats-subject", name + ".events",
		"--nats-dead-subject", name + ".dead", "--nats-consumer", name}, natsServerPID(url))
}

// BenchmarkPipelineHTTPIncrements sends the same events' ops as individual
// HTTP requests (increment, pfadd, hincr per event) from 64 connections:
// async durability (the default) and no deduplication by event id. It
// fails on any refusal, and reports them by status (429, 503) with the
// node's own count by cause (counterd_admission_shed_total).
func BenchmarkPipelineHTTPIncrements(b *testing.B) {
	p := start(b, b.TempDir())
	n := b.N * 1000
	_, posts := benchEvents(n)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 30 * time.Second}
	b.ResetTimer()
	began := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed, refused429, refused503 atomic.Int64
	do := func(path, body string) {
		resp, err := hc.Post(p.addr+path, "application/json", strings.NewReader(body))
		if err != nil {
			failed.Add(1)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
		case http.StatusTooManyRequests:
			refused429.Add(1)
		case http.StatusServiceUnavailable:
			refused503.Add(1)
		default:
			failed.Add(1)
		}
	}
	for range 64 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				do("/counters/views:"+posts[i]+"/increment", `{"delta":1}`)
				do("/counters/viewers:"+posts[i]+"/pfadd", fmt.Sprintf(`{"items":["u%d"]}`, i%50000))
				do("/counters/countries:"+posts[i]+"/hincr", fmt.Sprintf(`{"fields":{"c%d":1}}`, i%5))
			}
		})
	}
	wg.Wait()
	el := time.Since(began)
	b.StopTimer()
	b.ReportMetric(float64(n)/el.Seconds(), "events/s")
	b.ReportMetric(3*float64(n)/el.Seconds(), "requests/s")
	b.ReportMetric(float64(refused429.Load()), "refused-429")
	b.ReportMetric(float64(refused503.Load()), "refused-503")
	b.ReportMetric(0, "ns/op")
	if f, r := failed.Load(), refused429.Load()+refused503.Load(); f > 0 || r > 0 {
		b.Fatalf("%d requests failed, %d refused (%d 429, %d 503); node: %s", f, r, refused429.Load(), refused503.Load(), shedMetrics(p.addr))
	}
}

// shedMetrics returns the node's non-zero shed counters
// (counterd_shed_requests_total and counterd_admission_shed_total) as
// one line.
func shedMetrics(addr string) string {
	resp, err := http.Get(addr + "/metrics")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err.Error()
	}
	return shedLines(string(b))
}
