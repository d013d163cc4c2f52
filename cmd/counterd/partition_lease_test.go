//go:build linux

package main

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	cdclient "github.com/counterd/counterd/client"
	"github.com/counterd/counterd/internal/testutil/netns"
)

// leaseDefault is counterd's default --cluster-lease.
const leaseDefault = 400 * time.Millisecond

// TestClusterPartitionLeases: n3 owns a counter id and is cut off from n1
// and n2. From the cut on, clients of n3 keep sending it async increments
// of 1000, sync increments of 1,000,000 and reads of the id, and clients
// of the majority keyed sync increments of 1 (retried until acknowledged).
// n3 must acknowledge no write and serve no read that started later than
// one lease after the cut, whether or not it has noticed the partition;
// no sync write can be acknowledged by it at all (no quorum). After
// healing, every node must read exactly the majority's acknowledged
// increments of 1 and none of n3's: what n3 acknowledged (async, within
// its lease) is the only thing lost, as with an owner that crashes within
// the push interval, and the test logs how many those were.
func TestClusterPartitionLeases(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster of counterd processes")
	}
	nw := netns.New(t, 3)
	c := newCluster(t, 3, inNetns(nw))
	n1, n3 := c.nodes[0], c.nodes[2]
	id := ownedBy(t, n1, n3.id, "lease:c:")
	incr := func(n *cnode, delta int64, durability, key string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		opts := []cdclient.IncrOption{cdclient.WithKind(cdclient.KindCounter), cdclient.WithDurability(durability)}
		if key != "" {
			opts = append(opts, cdclient.WithIdempotencyKey(key))
		}
		_, err := n.raw.Incr(ctx, id, delta, opts...)
		return err
	}
	acked := int64(0)
	for i := range 3 {
		if err := poll(20*time.Second, func() error { return incr(n1, 1, "sync", fmt.Sprintf("before-%d", i)) }); err != nil {
			t.Fatalf("increment before the partition: %v", err)
		}
		acked++
	}

	if err := nw.Partition([]int{2}, []int{0, 1}); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	type served struct {
		mu   sync.Mutex
		n    int
		last time.Time // start of the last call n3 served
	}
	var async, syncs, reads served
	stop := make(chan struct{})
	var wg sync.WaitGroup
	minority := func(s *served, f func() error) {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				start := time.Now()
				if f() == nil {
					s.mu.Lock()
					s.n++
					s.last = start
					s.mu.Unlock()
				}
			}
		})
	}
	minority(&async, func() error { return incr(n3, 1000, "async", "") })
	minority(&syncs, func() error { return incr(n3, 1_000_000, "sync", "") })
	minority(&reads, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := n3.raw.Get(ctx, id)
		return err
	})
	if _, err := awaitAlive(c.nodes[:2], 20*time.Second); err != nil {
		t.Fatalf("n1, n2 did not drop n3 within 20s of the cut: %v", err)
	}
	t.Logf("n1, n2 dropped n3 %v after the cut", time.Since(cut).Round(time.Millisecond))
	for i := range 4 {
		n := c.nodes[i%2]
		if err := poll(20*time.Second, func() error { return incr(n, 1, "sync", fmt.Sprintf("during-%d", i)) }); err != nil {
			t.Fatalf("increment on the majority during the partition: %v", err)
		}
		acked++
	}
	// n3 keeps being asked for a while longer.
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	if err := nw.Heal(); err != nil {
		t.Fatal(err)
	}
	waitAlive(t, c.nodes, 30*time.Second)

	for _, k := range []struct {
		name string
		s    *served
	}{{"async increments", &async}, {"sync increments", &syncs}, {"reads", &reads}} {
		if k.s.n == 0 {
			t.Logf("n3 served no %s after the cut", k.name)
			continue
		}
		after := k.s.last.Sub(cut)
		t.Logf("n3 served %d %s after the cut, the last started %v after it", k.s.n, k.name, after.Round(time.Millisecond))
		if after >= leaseDefault {
			t.Errorf("n3 served %s that started %v after the cut, beyond its %v lease", k.name, after, leaseDefault)
		}
	}
	if syncs.n > 0 {
		t.Errorf("n3 acknowledged %d sync increments without a write quorum", syncs.n)
	}
	check := func() error {
		v, err := agreedValue(c.nodes, id)
		if err != nil {
			return err
		}
		if v != acked {
			return fmt.Errorf("value %d, want exactly the %d increments of 1 the majority acknowledged (n3's attempts, of 1000 and 1,000,000, lose to the new owner's epoch)", v, acked)
		}
		return nil
	}
	if err := poll(20*time.Second, check); err != nil {
		t.Fatalf("after healing: %v", err)
	}
	t.Logf("after healing every node reads %d; lost: the %d async increments n3 acknowledged within its lease", acked, async.n)
}
