package main

// The pipeline consuming on every node of a cluster (docs/pipeline.md,
// "Where it applies"; docs/cluster.md, "Dedupe marks"): three counterd
// nodes joined with --join, each with --rules and the same stream (one
// Kafka consumer group on kfake; one shared durable consumer on a real
// JetStream), while a collector-only counterd takes the events. Mid-run
// one node is SIGKILLed and another joins; every counter must equal the
// truth: each event applied once to every counter it touches while
// partitions and counter ownership move.

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/counterd/counterd/internal/testutil/natstest"
)

// pipelineEvents is the events of a multi-node pipeline run: 50,000
// (10,000 with -short), or the number in the environment variable env
// (1000000 for the run by hand).
func pipelineEvents(t *testing.T, env string) int {
	if s := os.Getenv(env); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("%s=%q: want a positive number", env, s)
		}
		return n
	}
	if testing.Short() {
		return 10000
	}
	return 50000
}

func TestClusterPipelineKafkaExactlyOnce(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	args := []string{"--kafka", kc.ListenAddrs()[0], "--kafka-topic", "ev", "--kafka-dead-topic", "ev-dead", "--kafka-partitions", "8"}
	runClusterPipeline(t, makeWorkload(pipelineEvents(t, "COUNTERD_CLUSTER_PIPELINE_EVENTS"), 1000), args)
}

func TestClusterPipelineJetStreamExactlyOnce(t *testing.T) {
	url := natstest.New(t)
	name := natstest.Name("C")
	args := []string{"--nats", url, "--nats-stream", name, "--nats-subject", name + ".events",
		"--nats-dead-subject", name + ".dead", "--nats-consumer", name, "--nats-ack-wait", "3s"}
	runClusterPipeline(t, makeWorkload(pipelineEvents(t, "COUNTERD_CLUSTER_PIPELINE_EVENTS"), 1000), args)
}

// runClusterPipeline sends w through a collector-only node to a 3-node
// cluster that consumes it, SIGKILLs n2 once 30% of the views are in and
// starts n4 at 60%, then checks every counter.
func runClusterPipeline(t *testing.T, w *workload, streamArgs []string) {
	if testing.Short() && os.Getenv("COUNTERD_CLUSTER_PIPELINE_EVENTS") == "" {
		t.Log("-short: 10,000 events")
	}
	rulesPath := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesPath, []byte(pipelineRules), 0o644); err != nil {
		t.Fatal(err)
	}
	extra := append([]string{"--rules", rulesPath}, streamArgs...)
	col := start(t, t.TempDir(), append([]string{"--events-no-consume", "--node-id", "collector"}, streamArgs...)...)

	c := newClusterWith(t, 3, loopback, extra)

	began := time.Now()
	send := sendBatches(col.addr, w.batches)
	var alive atomic.Pointer[[]*cnode]
	setAlive := func(ns ...*cnode) { alive.Store(&ns) }
	setAlive(c.nodes...)
	// applied is the sum of views (a read view: every counter once) from
	// the first alive node that answers; -1 while none does.
	applied := func() int64 {
		for _, nd := range *alive.Load() {
			resp, err := pollc.Get(nd.url + "/counters/views:*/aggregate")
			if err != nil {
				continue
			}
			var m struct{ Value int64 }
			err = json.NewDecoder(resp.Body).Decode(&m)
			resp.Body.Close()
			if err == nil && resp.StatusCode == http.StatusOK {
				return m.Value
			}
		}
		return -1
	}
	waitFor := func(frac float64) {
		want := int64(frac * float64(w.total))
		deadline := time.Now().Add(120 * time.Second)
		for {
			got := applied()
			if got > w.total {
				t.Fatalf("views add up to %d, above the %d sent: events applied twice", got, w.total)
			}
			if got >= want || time.Now().After(deadline) {
				t.Logf("%v: %d of %d views applied", time.Since(began).Round(time.Millisecond), got, w.total)
				return
			}
			if err := send.err(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	waitFor(0.3)
	n1, n2, n3 := c.nodes[0], c.nodes[1], c.nodes[2]
	n2.kill(t)
	setAlive(n1, n3)
	t.Logf("%v: n2 killed", time.Since(began).Round(time.Millisecond))
	waitFor(0.6)
	n4 := c.add(t)
	setAlive(n1, n3, n4)
	waitAlive(t, []*cnode{n1, n3, n4}, 60*time.Second)
	t.Logf("%v: n4 joined", time.Since(began).Round(time.Millisecond))

	if err := send.wait(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%v: all %d batches collected", time.Since(began).Round(time.Millisecond), len(w.batches))
	// n2's Kafka partitions move once the group's session timeout
	// expires; JetStream redelivers its unacknowledged messages after the
	// ack wait.
	if err := poll(180*time.Second, func() error {
		if got := applied(); got != w.total {
			if got > w.total {
				t.Fatalf("views add up to %d, above the %d sent: events applied twice", got, w.total)
			}
			return fmt.Errorf("views add up to %d, want %d", got, w.total)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%v: every view applied", time.Since(began).Round(time.Millisecond))
	checkClusterCounts(t, []*cnode{n1, n3, n4}, w)
	t.Logf("%v: counts checked", time.Since(began).Round(time.Millisecond))
}

// checkClusterCounts checks views and countries exactly and unique viewers
// within the HLL's error, read through each node in turn.
func checkClusterCounts(t *testing.T, nodes []*cnode, w *workload) {
	t.Helper()
	i := 0
	get := func(path string, into any) {
		t.Helper()
		err := poll(20*time.Second, func() error {
			nd := nodes[i%len(nodes)]
			i++
			resp, err := pollc.Get(nd.url + path)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s GET %s: %d %s", nd.id, path, resp.StatusCode, body)
			}
			return json.Unmarshal(body, into)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for post, want := range w.views {
		var v struct{ Value int64 }
		get("/counters/views:"+post, &v)
		if v.Value != want {
			t.Errorf("views:%s = %d, want %d", post, v.Value, want)
		}
	}
	for post, want := range w.countries {
		var m struct{ Fields map[string]int64 }
		get("/counters/countries:"+post+"/fields", &m)
		for country, n := range want {
			if m.Fields[country] != n {
				t.Errorf("countries:%s field %s = %d, want %d", post, country, m.Fields[country], n)
			}
		}
	}
	for post, users := range w.viewers {
		var v struct{ Value float64 }
		get("/counters/viewers:"+post, &v)
		exact := float64(len(users))
		if math.Abs(v.Value-exact) > 4*0.0081*exact+1 {
			t.Errorf("viewers:%s = %v, exact %v", post, v.Value, exact)
		}
	}
}

// batchSender posts a workload's batches to a collector in the
// background (sendBatches).
type batchSender struct {
	failed atomic.Pointer[error]
	wg     sync.WaitGroup
}

// sendBatches posts batches to the collector at addr, one after the
// other, and stops at the first failure or answer other than 202.
func sendBatches(addr string, batches [][]byte) *batchSender {
	s := &batchSender{}
	s.wg.Go(func() {
		for _, b := range batches {
			resp, err := client.Post(addr+"/events", "application/x-ndjson", strings.NewReader(string(b)))
			if err != nil {
				s.failed.Store(&err)
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				err := fmt.Errorf("POST /events answered %d: %s", resp.StatusCode, body)
				s.failed.Store(&err)
				return
			}
		}
	})
	return s
}

// err is the first failure so far (nil: none).
func (s *batchSender) err() error {
	if e := s.failed.Load(); e != nil {
		return *e
	}
	return nil
}

// wait waits until every batch was sent and returns err.
func (s *batchSender) wait() error {
	s.wg.Wait()
	return s.err()
}
