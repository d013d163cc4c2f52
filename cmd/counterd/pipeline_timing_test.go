package main

// Benchmarks of the event pipeline end to end (scripts/bench-pipeline.sh):
// events posted to a collector-only counterd in batches of 1000, four
// batches in flight, until a consumer counterd has applied them all, on
// kfake (franz-go's in-process Kafka-protocol cluster) and on a real NATS
// JetStream server; and, for comparison, the same events as individual
// HTTP requests (one per counter op). Each b.N is 1000 events.

import (
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

var lagRE = regexp.MustCompile(`(?m)^counterd_pipeline_consumer_lag\{partition="\d+"\} (\S+)$`)

// consumerLag sums the consumer's lag gauges.
func consumerLag(addr string) float64 {
	resp, err := client.Get(addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var sum float64
	for _, m := range lagRE.FindAllStringSubmatch(string(body), -1) {
		v, _ := strconv.ParseFloat(m[1], 64)
		sum += v
	}
	return sum
}

func benchPipeline(b *testing.B, streamArgs []string) {
	rulesPath := filepath.Join(b.TempDir(), "rules.yaml")
	os.WriteFile(rulesPath, []byte(pipelineRules), 0o644)
	col := start(b, b.TempDir(), append([]string{"--events-no-consume"}, streamArgs...)...)
	cons := start(b, b.TempDir(), append([]string{"--rules", rulesPath, "--node-id", "bench"}, streamArgs...)...)
	n := b.N * 1000
	batches, _ := benchEvents(n)
	b.ResetTimer()
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
	var lags []float64
	for {
		if e := sendErr.Load(); e != nil {
			b.Fatal(*e)
		}
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
		lags = append(lags, consumerLag(cons.addr))
		time.Sleep(20 * time.Millisecond)
	}
	el := time.Since(began)
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(n)/el.Seconds(), "events/s")
	b.ReportMetric(0, "ns/op")
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
	benchPipeline(b, []string{"--kafka", kc.ListenAddrs()[0], "--kafka-partitions", "4"})
}

func BenchmarkPipelineJetStream(b *testing.B) {
	url := natstest.New(b)
	name := natstest.Name("B")
	benchPipeline(b, []string{"--nats", url, "--nats-stream", name, "--nats-subject", name + ".events",
		"--nats-dead-subject", name + ".dead", "--nats-consumer", name})
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
