package main

// The pipeline consuming on every tiered node (--redis --postgres
// --rules): two nodes on one private Redis and PostgreSQL consume one
// stream while the first is SIGKILLed and restarted and a third joins;
// every counter equals the truth, in Redis and in PostgreSQL. Each counter's change from an event is
// guarded by a dedupe mark beside the counter (contract.CounterMarker),
// so the redeliveries of a Kafka rebalance or of JetStream messages
// another node's pull had taken count once.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/counterd/counterd/internal/testutil/natstest"
)

// runTieredPipeline sends w through a collector-only node to tiered
// consumers: two at first; the first is killed at 25% of the views and
// restarted, a third joins at 55%.
func runTieredPipeline(t *testing.T, w *workload, streamArgs []string) {
	t.Helper()
	env := newTieredEnv(t)
	scale := time.Duration(max(1, w.events/50000)) // the waits grow with a bigger run
	rulesPath := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesPath, []byte(pipelineRules), 0o644); err != nil {
		t.Fatal(err)
	}
	col := start(t, t.TempDir(), append([]string{"--events-no-consume"}, streamArgs...)...)
	node := func(name string) *proc {
		return env.start(t, append([]string{"--rules", rulesPath, "--node-id", name, "--flush-interval", "100ms"}, streamArgs...)...)
	}
	nodes := []*proc{node("tiered-1"), node("tiered-2")}

	began := time.Now()
	send := sendBatches(col.addr, w.batches)
	// The views, read from the hot tier (GET: Redis, the tiered mode's
	// truth for reads; GET /counters/.../aggregate sums PostgreSQL, see
	// the end).
	applied := func() int64 {
		var sum int64
		for post := range w.views {
			resp, err := client.Get(nodes[len(nodes)-1].addr + "/counters/views:" + post)
			if err != nil {
				return -1
			}
			var m struct{ Value int64 }
			err = json.NewDecoder(resp.Body).Decode(&m)
			resp.Body.Close()
			if err != nil {
				return -1
			}
			sum += m.Value
		}
		return sum
	}
	waitFor := func(frac float64) int64 {
		want := int64(frac * float64(w.total))
		deadline := time.Now().Add(scale * 120 * time.Second)
		for applied() < want && time.Now().Before(deadline) && send.err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		if err := send.err(); err != nil {
			t.Fatal(err)
		}
		return applied()
	}
	got := waitFor(0.25)
	nodes[0].kill(t)
	t.Logf("%v: tiered-1 killed at %d of %d views", time.Since(began).Round(time.Millisecond), got, w.total)
	nodes[0] = node("tiered-1")
	got = waitFor(0.55)
	nodes = append(nodes, node("tiered-3"))
	t.Logf("%v: tiered-3 joined at %d of %d views", time.Since(began).Round(time.Millisecond), got, w.total)
	if err := send.wait(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%v: all %d batches collected", time.Since(began).Round(time.Millisecond), len(w.batches))
	if err := poll(scale*180*time.Second, func() error {
		if got := applied(); got != w.total {
			return fmt.Errorf("views add up to %d, want %d", got, w.total)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%v: every view applied (%d events)", time.Since(began).Round(time.Millisecond), w.events)
	// Redeliveries still in flight would show as a count above the
	// truth: look again after a while, on every node.
	time.Sleep(2 * time.Second)
	for _, n := range nodes {
		checkCounts(t, n.addr, w)
	}
	// PostgreSQL converges to the truth too: what the killed node applied
	// in Redis but had not yet written behind is in the write-behind
	// journal, replayed once its lease ran out (docs/redis-tier.md,
	// "Crash window").
	var pgSum int64
	if err := poll(scale*90*time.Second, func() error {
		pgSum = 0
		var bad error
		for post, want := range w.views {
			v := env.pgValue(t, "views:"+post)
			if v != want && bad == nil {
				bad = fmt.Errorf("views:%s = %d in PostgreSQL, want %d", post, v, want)
			}
			pgSum += v
		}
		return bad
	}); err != nil {
		t.Errorf("PostgreSQL holds %d of the %d views: %v", pgSum, w.total, err)
	}
	t.Logf("%v: PostgreSQL holds %d of the %d views", time.Since(began).Round(time.Millisecond), pgSum, w.total)
}

// TestPipelineTieredKafkaExactlyOnce: tiered nodes in one consumer group
// (the same --kafka-group) on kfake share the topic's partitions.
func TestPipelineTieredKafkaExactlyOnce(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	w := makeWorkload(pipelineEvents(t, "COUNTERD_TIERED_PIPELINE_EVENTS"), 1000)
	runTieredPipeline(t, w, []string{"--kafka", kc.ListenAddrs()[0], "--kafka-topic", "ev", "--kafka-dead-topic", "ev-dead", "--kafka-partitions", "6"})
}

// TestPipelineTieredJetStreamExactlyOnce: tiered nodes pull from one
// shared durable consumer on a real NATS JetStream server.
func TestPipelineTieredJetStreamExactlyOnce(t *testing.T) {
	url := natstest.New(t)
	name := natstest.Name("TT")
	w := makeWorkload(pipelineEvents(t, "COUNTERD_TIERED_PIPELINE_EVENTS"), 1000)
	runTieredPipeline(t, w, []string{"--nats", url, "--nats-stream", name, "--nats-subject", name + ".events",
		"--nats-dead-subject", name + ".dead", "--nats-consumer", name, "--nats-ack-wait", "5s"})
}
