package main

// BenchmarkClusterConsumeCost: the CPU the pipeline costs per event when
// 1 and then 3 counterd nodes of a cluster (--join, loopback) consume the
// same events (scripts/bench-pipeline.sh; docs/pipeline.md, "Scaling and
// cost"). Each run appends the events to a fresh stream of a private
// nats-server (natstest) once every node is up and the cluster formed;
// the nodes share one durable consumer with the four rules of the
// consume-cost benchmark (views, unique viewers, hourly likes, a per-user
// window). Then, in the same run, a bare consumer (poll and ack, nothing
// applied; in the benchmark process) reads the same stream.
//
// Reported: events/s (append start until the nodes' metrics, read every
// 250 ms, count every event applied or found a duplicate and the views
// hold every impression), the nodes' CPU (utime + stime from /proc) per
// event in total and per node, the bare consumer's, and the total as a
// multiple of the bare consumer's, and the ring changes the nodes logged
// during the run (0 in a steady state; more when a node loaded beyond
// its gossip timeouts was suspected dead and came back). A node's CPU includes what the cluster
// adds: routing each coalesced op to its counter's owner (ApplyMarked),
// the owner's dedupe marks, and the replication of every written counter
// to a write quorum of its replicas.
//
// It runs only when COUNTERD_BENCH_CLUSTER_CONSUME is set (the number of
// events) and COUNTERD_BIN names a counterd binary: not in CI.
// COUNTERD_BENCH_NODES (default "1,3") lists the cluster sizes.
// COUNTERD_BENCH_PROFILE=DIR writes a CPU profile of each node
// (COUNTERD_BENCH_PROFILE_SECONDS, default 5).

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/pipeline/stream"
	"github.com/counterd/counterd/internal/testutil/natstest"
	"github.com/counterd/counterd/internal/testutil/pipelinetest"
)

func BenchmarkClusterConsumeCost(b *testing.B) {
	events := os.Getenv("COUNTERD_BENCH_CLUSTER_CONSUME")
	if events == "" {
		b.Skip("set COUNTERD_BENCH_CLUSTER_CONSUME (events) and COUNTERD_BIN; scripts/bench-pipeline.sh does")
	}
	n, err := strconv.Atoi(events)
	if err != nil || n <= 0 {
		b.Fatalf("COUNTERD_BENCH_CLUSTER_CONSUME=%q: want a positive number", events)
	}
	sizes := os.Getenv("COUNTERD_BENCH_NODES")
	if sizes == "" {
		sizes = "1,3"
	}
	url := natstest.New(b)
	for _, s := range strings.Split(sizes, ",") {
		nodes, err := strconv.Atoi(s)
		if err != nil || nodes <= 0 {
			b.Fatalf("COUNTERD_BENCH_NODES=%q: want sizes like 1,3", sizes)
		}
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			for b.Loop() {
				benchClusterConsume(b, url, nodes, n)
			}
		})
	}
}

// benchClusterConsume is one run of BenchmarkClusterConsumeCost: n events
// through a cluster of size nodes, then through a bare consumer.
func benchClusterConsume(b *testing.B, url string, size, n int) {
	ctx := context.Background()
	name := natstest.Name("S")
	scfg := stream.JetStreamConfig{URL: url, Stream: name, Subject: name + ".events", DeadSubject: name + ".dead", Consumer: name}
	rulesPath := filepath.Join(b.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesPath, []byte(pipelinetest.CostRules), 0o644); err != nil {
		b.Fatal(err)
	}
	extra := []string{"--rules", rulesPath, "--nats", url, "--nats-stream", name, "--nats-subject", scfg.Subject,
		"--nats-dead-subject", scfg.DeadSubject, "--nats-consumer", name}
	profile := os.Getenv("COUNTERD_BENCH_PROFILE")
	if profile != "" {
		extra = append(extra, "--pprof", "--admin", "127.0.0.2:0")
	}
	msgs, impressions := pipelinetest.CostEvents(n)
	c := newClusterWith(b, size, loopback, extra)
	time.Sleep(time.Second) // the ring settles: no handoff in the measurement

	cpu := func() []time.Duration {
		out := make([]time.Duration, len(c.nodes))
		for i, nd := range c.nodes {
			out[i] = procCPU(nd.p.cmd.Process.Pid)
		}
		return out
	}
	var waits []func()
	if profile != "" {
		for _, nd := range c.nodes {
			waits = append(waits, nodeProfile(b, nd, fmt.Sprintf("cluster%d-%s", size, nd.id), profile))
		}
	}
	// Ring changes during the run (a node suspected dead under load and
	// back) mean handoffs and waits the steady state does not have.
	ringChanges := func() int {
		k := 0
		for _, nd := range c.nodes {
			k += strings.Count(nd.logs.tail(1<<30), `msg="cluster ring changed"`)
		}
		return k
	}
	rings0 := ringChanges()
	cpu0, began := cpu(), time.Now()
	if err := pipelinetest.Publish(ctx, scfg, msgs); err != nil {
		b.Fatal(err)
	}
	b.Logf("%v: %d events appended", time.Since(began).Round(time.Millisecond), n)
	logged := time.Now()
	// Done when the nodes' metrics count every event applied or found a
	// duplicate (an op whose answer was lost and whose retry found its
	// marks counts as a duplicate) and the views hold every impression.
	views := func() (int64, error) {
		resp, err := pollc.Get(c.nodes[0].url + "/counters/views:*/aggregate")
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		var m struct{ Value int64 }
		err = json.NewDecoder(resp.Body).Decode(&m)
		return m.Value, err
	}
	for {
		handled := 0.0
		for _, nd := range c.nodes {
			handled += nodeHandled(nd.url)
		}
		if handled >= float64(n) {
			if v, err := views(); err == nil && v >= int64(impressions) {
				break
			}
		}
		if time.Since(began) > 10*time.Minute {
			b.Fatalf("%.0f of %d events handled after 10 minutes", handled, n)
		}
		if time.Since(logged) > 10*time.Second {
			b.Logf("%v: %.0f of %d events handled", time.Since(began).Round(time.Second), handled, n)
			logged = time.Now()
		}
		time.Sleep(250 * time.Millisecond)
	}
	el, cpu1 := time.Since(began), cpu()
	rings := ringChanges() - rings0
	for _, w := range waits {
		w()
	}
	// Every impression counted once.
	if v, err := views(); err != nil || v != int64(impressions) {
		b.Fatalf("views add up to %d (%v), want the %d impressions", v, err, impressions)
	}
	for _, nd := range c.nodes {
		nd.p.cmd.Process.Kill()
		<-nd.p.done
		nd.p = nil
	}

	bareEl, bareCPU := bareConsume(b, scfg, name+"-bare", n)

	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) / float64(n) }
	var total time.Duration
	for i := range cpu0 {
		d := cpu1[i] - cpu0[i]
		total += d
		b.ReportMetric(us(d), fmt.Sprintf("n%d-cpu-us/event", i+1))
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(n)/el.Seconds(), "events/s")
	b.ReportMetric(us(total), "cpu-us/event")
	b.ReportMetric(float64(n)/bareEl.Seconds(), "bare-events/s")
	b.ReportMetric(us(bareCPU), "bare-cpu-us/event")
	b.ReportMetric(float64(total)/float64(bareCPU), "cpu-x-bare")
	b.ReportMetric(float64(rings), "ring-changes")
}

var handledRE = regexp.MustCompile(`(?m)^counterd_pipeline_events_total\{result="(?:applied|duplicate)"\} (\S+)$`)

// nodeHandled reads the events the node at url applied or found
// duplicates from its /metrics (0 when it does not answer), uncompressed:
// a gzipped /metrics every few milliseconds would be a good part of what
// is measured.
func nodeHandled(url string) float64 {
	req, err := http.NewRequest(http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return 0
	}
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := pollc.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	sum := 0.0
	for _, m := range handledRE.FindAllSubmatch(body, -1) {
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		sum += v
	}
	return sum
}

// bareConsume reads the n records of the stream of cfg through a new
// durable consumer, polling and acknowledging, nothing applied; it returns
// the time and this process's CPU it took.
func bareConsume(b *testing.B, cfg stream.JetStreamConfig, durable string, n int) (time.Duration, time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cfg.Consumer = durable
	cpu0, began := selfCPU(), time.Now()
	js, err := stream.OpenJetStream(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer js.Close()
	if err := js.Consume(ctx); err != nil {
		b.Fatal(err)
	}
	for got := 0; got < n; {
		groups, err := js.Poll(ctx)
		if err == nil {
			err = js.Commit(ctx, groups)
		}
		if err != nil {
			b.Fatalf("bare consumer, %d of %d records: %v", got, n, err)
		}
		for _, g := range groups {
			got += len(g)
		}
	}
	return time.Since(began), selfCPU() - cpu0
}

// nodeProfile fetches a CPU profile of nd (started with --pprof --admin)
// into dir/name.pprof in the background; wait waits for it.
func nodeProfile(b *testing.B, nd *cnode, name, dir string) (wait func()) {
	return fetchProfile(b, func() string { return nd.logs.tail(1000) }, name, dir)
}
