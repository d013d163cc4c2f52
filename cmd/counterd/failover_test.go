package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	cdclient "github.com/counterd/counterd/client"
)

// BenchmarkFailover measures the failover window of a 3-node cluster: the
// time from SIGKILL of an id's owner to the first acknowledged sync write
// of that id through a surviving node. A writer retries every 10 ms (one
// attempt each, with its own idempotency key). Each iteration kills one
// node (in turn), measures, restarts it and waits until every node sees
// three members again. Reports P50, P99 and max in ms. With
// FAILOVER_DEBUG=DIR, the survivors' logs of every kill slower than 1 s are
// written to DIR.
//
//	COUNTERD_BIN=/path/to/counterd go test -run '^$' -bench '^BenchmarkFailover$' -benchtime 20x -timeout 30m ./cmd/counterd/
func BenchmarkFailover(b *testing.B) {
	c := newCluster(b, 3, loopback)
	var windows []time.Duration
	for i := 0; b.Loop(); i++ {
		victim := c.nodes[i%len(c.nodes)]
		var survivors []*cnode
		for _, n := range c.nodes {
			if n != victim {
				survivors = append(survivors, n)
			}
		}
		id := ownedBy(b, survivors[0], victim.id, fmt.Sprintf("fo:%d:", i))
		if err := incrUntil(survivors, id, fmt.Sprintf("pre-%d", i), time.Now().Add(30*time.Second)); err != nil {
			b.Fatalf("write before the kill: %v", err)
		}
		victim.sigkill(b)
		killed := time.Now()
		if err := incrUntil(survivors, id, fmt.Sprintf("fo-%d", i), killed.Add(60*time.Second)); err != nil {
			b.Fatalf("no write on %s within 60s of killing %s: %v", id, victim.id, err)
		}
		windows = append(windows, time.Since(killed))
		if dir := os.Getenv("FAILOVER_DEBUG"); dir != "" && windows[len(windows)-1] > time.Second {
			// A slow kill: keep the survivors' logs (run with
			// COUNTERD_LOG_LEVEL=debug for gossip details).
			for _, n := range survivors {
				f := filepath.Join(dir, fmt.Sprintf("failover-kill%d-%s.log", i, n.id))
				b.Logf("kill %d of %s took %v; log of %s in %s", i, victim.id, windows[len(windows)-1], n.id, f)
				if err := os.WriteFile(f, []byte(n.logs.tail(100000)), 0o644); err != nil {
					b.Log(err)
				}
			}
		}
		victim.start(b)
		waitAlive(b, c.nodes, 60*time.Second)
	}
	slices.Sort(windows)
	q := func(p float64) float64 {
		return float64(windows[min(len(windows)-1, int(p*float64(len(windows))))].Microseconds()) / 1000
	}
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(float64(windows[len(windows)-1].Microseconds())/1000, "max-ms")
	b.Logf("failover windows over %d kills: %v", len(windows), windows)
}

// ownedBy returns an id starting with prefix whose owner, in via's view of
// the ring, is owner.
func ownedBy(tb testing.TB, via *cnode, owner, prefix string) string {
	tb.Helper()
	v, err := via.view()
	if err != nil {
		tb.Fatal(err)
	}
	r := ringOf(v)
	for j := 0; ; j++ {
		if id := fmt.Sprintf("%s%d", prefix, j); r.Owner(id) == owner {
			return id
		}
	}
}

// incrUntil sends one keyed sync increment of id to the nodes in turn,
// one attempt per request (a new key per attempt) every 10 ms, until one
// is acknowledged or deadline.
func incrUntil(nodes []*cnode, id, key string, deadline time.Time) error {
	for try := 0; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := nodes[try%len(nodes)].raw.Incr(ctx, id, 1, cdclient.WithKind(cdclient.KindCounter),
			cdclient.WithDurability("sync"), cdclient.WithIdempotencyKey(fmt.Sprintf("%s-%d", key, try)))
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sigkill kills the node with SIGKILL and waits for it to exit.
func (n *cnode) sigkill(tb testing.TB) {
	tb.Helper()
	_ = n.p.cmd.Process.Signal(syscall.SIGKILL)
	<-n.p.done
	n.p = nil
}

// failTimes records the first and last failed request per target node
// since the last reset. Not safe for concurrent use (load.mu guards it).
type failTimes struct {
	first, last map[string]time.Time
}

func (f *failTimes) add(node string, at time.Time) {
	if f.first == nil {
		f.first, f.last = map[string]time.Time{}, map[string]time.Time{}
	}
	if _, ok := f.first[node]; !ok {
		f.first[node] = at
	}
	f.last[node] = at
}

// resetFails forgets the failures recorded so far.
func (l *load) resetFails() {
	l.mu.Lock()
	l.fails = failTimes{}
	l.mu.Unlock()
}

// errorWindow is the span from since to the last failed request sent to
// one of nodes (0 when none failed): how long clients of the surviving
// nodes saw errors.
func (l *load) errorWindow(nodes []*cnode, since time.Time) (time.Duration, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var w time.Duration
	failedNodes := 0
	for _, n := range nodes {
		if last, ok := l.fails.last[n.id]; ok {
			failedNodes++
			w = max(w, last.Sub(since))
		}
	}
	return w, failedNodes
}
