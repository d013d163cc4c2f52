package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	cdclient "github.com/counterd/counterd/client"
)

// BenchmarkClusterScale: the same measurements on a cluster of 3 nodes and
// of BENCH_NODES (16) nodes, one after the other in the same run, every
// process on loopback on the machine's cores:
//
//	join         one more node started until every node sees it alive (ms),
//	             and the bytes of state handed off meanwhile
//	             (counterd_cluster_handoff_bytes_total, summed over nodes)
//	leave        one node stopped with SIGTERM until every other node sees
//	             it gone (ms), and the bytes handed off
//	convergence  a pn increment acknowledged by one node until visible on
//	             every other node's reads (P50/P99 ms)
//	failover     a counter's owner killed with SIGKILL until a keyed sync
//	             increment of it is acknowledged again (P50/max ms over
//	             BENCH_KILLS kills)
//	aggregate    GET /counters/scale:*/aggregate on a node over the
//	             BENCH_IDS counters (P50/P99 ms)
//	cpu          the nodes' CPU while idle for BENCH_SECONDS, then
//	             counterctl bench (async increments over 1000 ids, the
//	             load spread over every node) for BENCH_SECONDS: ops/s and
//	             the nodes' CPU time per operation, in total, above idle
//	             and per node
//
// BENCH_IDS (5000) counters are written before the join and leave, so the
// handoffs have state to move.
//
//	scripts/bench-cluster-scale.sh
//
// Every process, load generators included, shares the machine's cores: a
// 16-node cluster on 2 cores is a test of the protocol's costs (gossip,
// handoff, fan-out), not of 16 machines' capacity.
//
// It runs only when BENCH_NODES is set (the script sets it): a 16-node
// cluster is not for every CI run's make bench-smoke.
func BenchmarkClusterScale(b *testing.B) {
	if os.Getenv("BENCH_NODES") == "" {
		b.Skip("set BENCH_NODES (scripts/bench-cluster-scale.sh runs 3 and 16 nodes)")
	}
	big := envInt("BENCH_NODES", 16)
	for _, n := range []int{3, big} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			for b.Loop() {
				benchScale(b, n)
			}
		})
	}
}

func benchScale(b *testing.B, size int) {
	start := time.Now()
	c := newCluster(b, size-1, loopback)
	b.Logf("%d nodes formed in %v", size-1, time.Since(start).Round(time.Millisecond))
	ids := envInt("BENCH_IDS", 5000)
	writeScaleIDs(b, c.nodes, ids)

	// join
	before := handoffBytes(b, c.nodes)
	t0 := time.Now()
	joined := c.add(b)
	waitAlive(b, c.nodes, 120*time.Second)
	join := time.Since(t0)
	// The handoff into the new node runs after the ring changed: wait
	// until the byte counters stop moving.
	joinBytes := settledHandoffBytes(b, c.nodes) - before
	b.ReportMetric(float64(join.Milliseconds()), "join-ms")
	b.ReportMetric(joinBytes, "join-handoff-bytes")
	b.Logf("join of %s: %v, %.0f bytes handed off", joined.id, join.Round(time.Millisecond), joinBytes)

	benchScaleConvergence(b, c)
	benchScaleAggregate(b, c, ids)
	benchScaleCPU(b, c)
	benchScaleFailover(b, c)

	// leave: the last node stops gracefully and hands its state off.
	leaver := c.nodes[len(c.nodes)-1]
	rest := c.nodes[:len(c.nodes)-1]
	before = handoffBytes(b, rest)
	t0 = time.Now()
	_ = leaver.p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-leaver.p.done:
	case <-time.After(60 * time.Second):
		b.Fatalf("%s did not exit within 60s of SIGTERM", leaver.id)
	}
	leaver.p = nil
	waitAlive(b, rest, 120*time.Second)
	leave := time.Since(t0)
	// The leaver's own handoff: its metrics went with it, its log stays.
	leaveBytes := settledHandoffBytes(b, rest) - before + loggedHandoffBytes(leaver)
	b.ReportMetric(float64(leave.Milliseconds()), "leave-ms")
	b.ReportMetric(leaveBytes, "leave-handoff-bytes")
	b.Logf("leave of %s: %v, %.0f bytes handed off", leaver.id, leave.Round(time.Millisecond), leaveBytes)
	c.nodes = rest
	for _, n := range c.nodes {
		n.sigkill(b)
	}
}

// writeScaleIDs writes ids counters (async, spread over the nodes).
func writeScaleIDs(b *testing.B, nodes []*cnode, ids int) {
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < ids; i += 8 {
				n := nodes[i%len(nodes)]
				if _, err := n.c.Incr(context.Background(), fmt.Sprintf("scale:%d", i), 1); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// handoffBytes sums counterd_cluster_handoff_bytes_total over the nodes.
func handoffBytes(b *testing.B, nodes []*cnode) float64 {
	var sum float64
	for _, n := range nodes {
		resp, err := pollc.Get(n.url + "/metrics")
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		v, _ := metricSum(string(body), "counterd_cluster_handoff_bytes_total ")
		sum += v
	}
	return sum
}

// loggedHandoffBytes sums the bytes= of a node's "cluster handoff" log
// lines since its last start.
func loggedHandoffBytes(n *cnode) float64 {
	logs := n.logs.tail(1 << 20)
	if i := strings.LastIndex(logs, "=== "); i >= 0 {
		logs = logs[i:]
	}
	var sum float64
	for _, line := range strings.Split(logs, "\n") {
		if !strings.Contains(line, "cluster handoff") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "bytes="); ok {
				x, _ := strconv.ParseFloat(v, 64)
				sum += x
			}
		}
	}
	return sum
}

// settledHandoffBytes waits until the handed-off bytes are unchanged for
// 2 s (at most 60 s) and returns them.
func settledHandoffBytes(b *testing.B, nodes []*cnode) float64 {
	last, since := handoffBytes(b, nodes), time.Now()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if v := handoffBytes(b, nodes); v != last {
			last, since = v, time.Now()
		} else if time.Since(since) > 2*time.Second {
			break
		}
	}
	return last
}

// benchScaleConvergence: BENCH_SAMPLES/10 (30) pn increments, each sent to
// one node (in turn) and polled every 2 ms on every other node until all
// read it; the samples are the per-node times.
func benchScaleConvergence(b *testing.B, c *testCluster) {
	ctx := context.Background()
	samples := max(envInt("BENCH_SAMPLES", 300)/10, 5)
	var lat []time.Duration
	timeouts := 0
	for s := range samples {
		a := c.nodes[s%len(c.nodes)]
		var others []*cnode
		for _, o := range c.nodes {
			if o != a {
				others = append(others, o)
			}
		}
		id := fmt.Sprintf("scale:conv:%d", s)
		for want := int64(1); want <= 2; want++ { // the first write warms the id
			if _, err := a.raw.Incr(ctx, id, 1, cdclient.WithKind(cdclient.KindPN)); err != nil {
				b.Fatal(err)
			}
			took := visibleOn(others, id, want)
			if want == 1 {
				continue
			}
			for _, d := range took {
				if d < 0 {
					timeouts++
				} else {
					lat = append(lat, d)
				}
			}
		}
	}
	quantiles(b, "conv", lat, time.Millisecond, "ms")
	b.ReportMetric(float64(timeouts), "conv-timeouts")
}

// benchScaleAggregate: 40 prefix aggregates over the written counters, on
// the nodes in turn; each must count every id.
func benchScaleAggregate(b *testing.B, c *testCluster, ids int) {
	ctx := context.Background()
	var lat []time.Duration
	for i := range 40 {
		n := c.nodes[i%len(c.nodes)]
		t0 := time.Now()
		agg, err := n.c.Aggregate(ctx, "scale:")
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
		// scale:conv:* ids count too.
		if agg.Count < ids {
			b.Fatalf("aggregate on %s counted %d ids, want at least %d", n.id, agg.Count, ids)
		}
	}
	quantiles(b, "agg", lat, time.Millisecond, "ms")
}

// benchScaleCPU: counterctl bench over every node for BENCH_SECONDS; the
// nodes' CPU time (user + system, from /proc) per acknowledged increment.
func benchScaleCPU(b *testing.B, c *testCluster) {
	ctl := os.Getenv("COUNTERCTL_BIN")
	if ctl == "" {
		b.Log("cpu: skipped (set COUNTERCTL_BIN; scripts/bench-cluster-scale.sh does)")
		return
	}
	secs, conc := envInt("BENCH_SECONDS", 5), max(envInt("BENCH_CONCURRENCY", 48), len(c.nodes))
	nodesCPU := func() float64 {
		var sum float64
		for _, n := range c.nodes {
			sum += cpuSeconds(b, n)
		}
		return sum
	}
	// Idle first: gossip, probes and timers cost CPU without any request.
	t0, idle0 := time.Now(), nodesCPU()
	time.Sleep(time.Duration(secs) * time.Second)
	idlePerSec := (nodesCPU() - idle0) / time.Since(t0).Seconds()
	t0, busy0 := time.Now(), nodesCPU()
	ops, p99 := runCtl(b, ctl, c.nodes, conc, secs, "scale:cpu:")
	busy := nodesCPU() - busy0
	elapsed := time.Since(t0).Seconds()
	perOp := busy / (ops * float64(secs)) * 1e6
	aboveIdle := (busy - idlePerSec*elapsed) / (ops * float64(secs)) * 1e6
	b.ReportMetric(ops, "incr-ops/s")
	b.ReportMetric(idlePerSec*100, "idle-cpu-%")
	b.ReportMetric(perOp, "cpu-us/op")
	b.ReportMetric(aboveIdle, "cpu-us/op-above-idle")
	b.ReportMetric(perOp/float64(len(c.nodes)), "cpu-us/op/node")
	b.Logf("cpu: %.0f increments/s (worst p99 %.1f ms); idle %.1f%% of a core for %d nodes; %.1f us of node CPU per increment, %.1f above idle",
		ops, p99, idlePerSec*100, len(c.nodes), perOp, aboveIdle)
}

// cpuSeconds is a node process's user + system CPU time so far.
func cpuSeconds(b *testing.B, n *cnode) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", n.p.cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name, which is in parentheses.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100 // USER_HZ
}

// benchScaleFailover: BENCH_KILLS (3) times, the owner of a fresh id is
// killed with SIGKILL; the window is until a keyed sync increment of the id
// is acknowledged by a survivor. The victim restarts and rejoins before
// the next kill.
func benchScaleFailover(b *testing.B, c *testCluster) {
	var windows []time.Duration
	for i := range envInt("BENCH_KILLS", 3) {
		victim := c.nodes[1+i%(len(c.nodes)-1)]
		var survivors []*cnode
		for _, n := range c.nodes {
			if n != victim {
				survivors = append(survivors, n)
			}
		}
		id := ownedBy(b, survivors[0], victim.id, fmt.Sprintf("scale:fo:%d:", i))
		if err := incrUntil(survivors, id, fmt.Sprintf("scale-pre-%d", i), time.Now().Add(30*time.Second)); err != nil {
			b.Fatalf("write before the kill: %v", err)
		}
		victim.sigkill(b)
		killed := time.Now()
		if err := incrUntil(survivors, id, fmt.Sprintf("scale-fo-%d", i), killed.Add(60*time.Second)); err != nil {
			b.Fatalf("no write on %s within 60s of killing %s: %v", id, victim.id, err)
		}
		windows = append(windows, time.Since(killed))
		victim.start(b)
		waitAlive(b, c.nodes, 120*time.Second)
	}
	slices.Sort(windows)
	b.ReportMetric(float64(windows[len(windows)/2].Milliseconds()), "failover-p50-ms")
	b.ReportMetric(float64(windows[len(windows)-1].Milliseconds()), "failover-max-ms")
	b.Logf("failover windows: %v", windows)
}
