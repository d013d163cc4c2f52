package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"testing"
	"time"

	cdclient "github.com/counterd/counterd/client"
)

// TestClusterAggregateChaos: a 3-node cluster under keyed sync writes
// (counter and pn ids) while two CPU hog processes run beside it; CHAOS_KILLS (20) times a node
// is killed with SIGKILL (every node owns some of the ids), the others
// drop it, it restarts and rejoins. Meanwhile an aggregate of the ids'
// prefix is read every 50 ms from the nodes in turn: no answer may be
// below what was acknowledged before the read was sent, nor above what
// had been sent by the time it came back (a 503 is allowed while the
// membership changes). At the end every node reads a value within the
// same bounds.
func TestClusterAggregateChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster of counterd processes with CPU hogs beside it")
	}
	kills := envInt("CHAOS_KILLS", 20)
	startHogs(t, 2)
	c := newCluster(t, 3, loopback)
	led := newLedger()
	sp := append(specs("chaos:c:", 12, cdclient.KindCounter, "sync"), specs("chaos:pn:", 4, cdclient.KindPN, "sync")...)
	l := startLoad(led, "chaos", sp, c.nodes, 4, 20*time.Second)
	defer l.stop(t)
	l.waitAcks(t, 50, 60*time.Second)

	p := startBoundsPoller(c.nodes, "chaos:", led)
	for k := range kills {
		victim := c.nodes[k%len(c.nodes)]
		var survivors []*cnode
		for _, n := range c.nodes {
			if n != victim {
				survivors = append(survivors, n)
			}
		}
		victim.sigkill(t)
		if _, err := awaitAlive(survivors, 60*time.Second); err != nil {
			t.Fatalf("kill %d: the survivors did not drop %s: %v", k, victim.id, err)
		}
		victim.start(t)
		waitAlive(t, c.nodes, 60*time.Second)
		l.waitAcks(t, 20, 60*time.Second) // writes go on between kills
	}
	time.Sleep(time.Second) // reads right after the last rejoin
	reads, unavailable, bad := p.finish()
	l.stop(t)
	t.Logf("%d kills: %d aggregate reads within bounds, %d answered 503", kills, reads, unavailable)
	for _, b := range bad {
		t.Errorf("aggregate out of bounds: %s", b)
	}
	if reads < kills {
		t.Errorf("only %d aggregate reads answered", reads)
	}
	acked, sent := led.sums()
	if err := poll(30*time.Second, func() error {
		for _, n := range c.nodes {
			a, err := n.raw.Aggregate(context.Background(), "chaos:")
			if err != nil {
				return err
			}
			if a.Value < acked || a.Value > sent {
				return fmt.Errorf("%s: %d, want within [%d, %d]", n.id, a.Value, acked, sent)
			}
		}
		return nil
	}); err != nil {
		t.Errorf("after the last rejoin: %v", err)
	}
}

// boundsPoller reads a prefix aggregate every 50 ms from the nodes in
// turn and checks each answer against the ledger: at least what was
// acknowledged when the read was sent, at most what had been sent when it
// came back.
type boundsPoller struct {
	stop, done chan struct{}

	mu          sync.Mutex // guards the fields below
	reads       int
	unavailable int
	bad         []string
}

func startBoundsPoller(nodes []*cnode, prefix string, led *ledger) *boundsPoller {
	p := &boundsPoller{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for i := 0; ; i++ {
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
			n := nodes[i%len(nodes)]
			lo, _ := led.sums()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			a, err := n.raw.Aggregate(ctx, prefix)
			cancel()
			_, hi := led.sums()
			var ce *cdclient.Error
			p.mu.Lock()
			switch {
			case err == nil && (a.Value < lo || a.Value > hi):
				p.bad = append(p.bad, fmt.Sprintf("%s %s: %d, want within [%d, %d]", time.Now().Format("15:04:05.000"), n.id, a.Value, lo, hi))
			case err == nil:
				p.reads++
			case errors.As(err, &ce) && ce.Status == 503:
				p.unavailable++
			}
			// Other errors: the node is down (killed, or not listening yet).
			p.mu.Unlock()
		}
	}()
	return p
}

// finish stops the poller and returns its counts.
func (p *boundsPoller) finish() (reads, unavailable int, bad []string) {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reads, p.unavailable, p.bad
}

// startHogs runs n processes that spin on a core each until the test ends,
// to reproduce a loaded machine.
func startHogs(t *testing.T, n int) {
	t.Helper()
	for range n {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatalf("CPU hog: %v", err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
}
