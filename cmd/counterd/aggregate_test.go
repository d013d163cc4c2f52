package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	cdclient "github.com/counterd/counterd/client"
)

// aggPoller polls GET /counters/{prefix}*/aggregate on every node in turn
// every 50 ms and classifies each answer: exact, wrong (a test failure),
// 503 (allowed during a membership change, reported and bounded) or no
// connection (the node is down).
type aggPoller struct {
	nodes     []*cnode
	prefix    string
	wantValue int64
	wantCount int

	mu          sync.Mutex
	gen         int  // bumped when the expectation changes
	paused      bool // writes to the prefix in progress: answers not checked
	exact       int
	slowest     time.Duration // of the exact answers (retries during a change)
	wrong       []string
	unavailable map[string][]time.Time // per node: when it answered 503
	down        int
	stop        chan struct{}
	done        chan struct{}
}

// aggc outlasts the server's read-view budget (5 s), so a read that waits
// shows as its answer (exact, or 503), never as a client timeout.
var aggc = &http.Client{Timeout: 10 * time.Second}

func startAggPoller(nodes []*cnode, prefix string, value int64, count int) *aggPoller {
	p := &aggPoller{nodes: nodes, prefix: prefix, wantValue: value, wantCount: count,
		unavailable: map[string][]time.Time{}, stop: make(chan struct{}), done: make(chan struct{})}
	go p.loop()
	return p
}

func (p *aggPoller) loop() {
	defer close(p.done)
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		p.once(p.nodes[i%len(p.nodes)])
	}
}

// expect pauses checking (want nil) or sets the exact answer expected from
// now on.
func (p *aggPoller) expect(want *cdclient.Aggregate) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gen++
	p.paused = want == nil
	if want != nil {
		p.wantValue, p.wantCount = want.Value, want.Count
	}
}

func (p *aggPoller) once(n *cnode) {
	p.mu.Lock()
	gen := p.gen
	p.mu.Unlock()
	sent := time.Now()
	resp, err := aggc.Get(n.url + "/counters/" + p.prefix + "*/aggregate")
	at := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused || p.gen != gen {
		if err == nil {
			resp.Body.Close()
		}
		return // the expectation changed while this request was out
	}
	if err != nil {
		p.down++
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	switch resp.StatusCode {
	case http.StatusOK:
		var a cdclient.Aggregate
		if err := json.Unmarshal(body, &a); err != nil {
			p.wrong = append(p.wrong, fmt.Sprintf("%s %s: bad JSON %s", at.Format("15:04:05.000"), n.id, body))
		} else if a.Value != p.wantValue || a.Count != p.wantCount {
			p.wrong = append(p.wrong, fmt.Sprintf("%s %s: value %d count %d (want %d, %d)", at.Format("15:04:05.000"), n.id, a.Value, a.Count, p.wantValue, p.wantCount))
		} else {
			p.exact++
			p.slowest = max(p.slowest, at.Sub(sent))
		}
	case http.StatusServiceUnavailable:
		p.unavailable[n.id] = append(p.unavailable[n.id], at)
	default:
		p.wrong = append(p.wrong, fmt.Sprintf("%s %s: HTTP %d %s", at.Format("15:04:05.000"), n.id, resp.StatusCode, body))
	}
}

// finish stops the poller and returns, per node, the longest span between
// the first and last 503 of one run of consecutive 503 answers.
func (p *aggPoller) finish() map[string]time.Duration {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	spans := map[string]time.Duration{}
	for id, ts := range p.unavailable {
		// Polls of one node are 150 ms apart; a gap over 1 s ends a run.
		start := ts[0]
		for i := range ts {
			if i > 0 && ts[i].Sub(ts[i-1]) > time.Second {
				start = ts[i]
			}
			spans[id] = max(spans[id], ts[i].Sub(start))
		}
	}
	return spans
}

// TestClusterAggregateExactThroughRejoin: an aggregate poller every 50 ms
// (round robin over the three nodes) while one node is SIGKILLed, restarts
// on its data and rejoins, with sync increments going on to other ids, and
// the prefix itself written while the node is down (it must catch up
// before it answers for its ids again).
// Every 200 answer must be the exact sum and count; 503 answers are
// allowed while the membership changes, reported, and bounded.
func TestClusterAggregateExactThroughRejoin(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster of counterd processes")
	}
	c := newCluster(t, 3, loopback)
	ctx := context.Background()
	kinds := []cdclient.Kind{cdclient.KindCounter, cdclient.KindPN, cdclient.KindSharded}
	var value int64
	const count = 20
	for i := range count {
		n := c.nodes[i%3]
		id := fmt.Sprintf("agg:%02d", i)
		if _, err := n.c.Incr(ctx, id, int64(i+1), cdclient.WithKind(kinds[i%3]), cdclient.WithDurability("sync")); err != nil {
			t.Fatal(err)
		}
		value += int64(i + 1)
	}
	if err := poll(10*time.Second, func() error {
		for _, n := range c.nodes {
			a, err := n.raw.Aggregate(ctx, "agg:")
			if err != nil {
				return err
			}
			if a.Value != value || a.Count != count {
				return fmt.Errorf("%s: %+v", n.id, a)
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("aggregate never exact before the crash: %v", err)
	}

	victim := c.nodes[2]
	survivors := c.nodes[:2]
	sp := slices.Concat(specs("aggload:c:", 8, cdclient.KindCounter, "sync"), specs("aggload:pn:", 4, cdclient.KindPN, ""))
	l := startLoad(newLedger(), "aggload", sp, survivors, 2, 15*time.Second)
	defer l.stop(t)
	p := startAggPoller(c.nodes, "agg:", value, count)
	time.Sleep(time.Second)

	victim.kill(t)
	killed := time.Now()
	if _, err := awaitAlive(survivors, 30*time.Second); err != nil {
		t.Errorf("survivors did not drop %s: %v", victim.id, err)
	}
	t.Logf("survivors dropped %s after %v", victim.id, time.Since(killed).Round(time.Millisecond))
	// While the victim is down: new ids and adds to existing ones (sync
	// counters: on their owner when acknowledged). After the rejoin the
	// victim owns some of them and must not answer before it has them.
	p.expect(nil)
	for i := range 6 {
		n := survivors[i%2]
		if _, err := n.c.Incr(ctx, fmt.Sprintf("agg:new:%d", i), 100, cdclient.WithKind(cdclient.KindCounter), cdclient.WithDurability("sync")); err != nil {
			t.Fatal(err)
		}
		if _, err := n.c.Incr(ctx, fmt.Sprintf("agg:%02d", 3*i), 1000, cdclient.WithDurability("sync")); err != nil {
			t.Fatal(err)
		}
	}
	value += 6*100 + 6*1000
	p.expect(&cdclient.Aggregate{Value: value, Count: count + 6})
	time.Sleep(time.Second)
	victim.start(t)
	restarted := time.Now()
	waitAlive(t, c.nodes, 60*time.Second)
	t.Logf("%s rejoined %v after restart", victim.id, time.Since(restarted).Round(time.Millisecond))
	time.Sleep(3 * time.Second)
	spans := p.finish()
	l.stop(t)

	p.mu.Lock()
	defer p.mu.Unlock()
	n503 := 0
	for _, ts := range p.unavailable {
		n503 += len(ts)
	}
	t.Logf("aggregate polls: %d exact (slowest %v), %d wrong, %d answered 503, %d without connection (node down); longest 503 run per node: %v",
		p.exact, p.slowest.Round(time.Millisecond), len(p.wrong), n503, p.down, spans)
	for _, w := range p.wrong {
		t.Errorf("wrong aggregate: %s", w)
	}
	if p.exact == 0 {
		t.Error("no exact aggregate answer")
	}
	// The bound is loose (2 shared cores, -race elsewhere): the goal is
	// that 503s last only while the membership changes.
	for id, d := range spans {
		if d > 8*time.Second {
			t.Errorf("%s answered 503 for %v in a row", id, d)
		}
	}
	// After the rejoin every node answers exactly.
	for _, n := range c.nodes {
		a, err := n.raw.Aggregate(ctx, "agg:")
		if err != nil || a.Value != value || a.Count != count+6 {
			t.Errorf("%s after the rejoin: %+v, %v", n.id, a, err)
		}
	}
}
