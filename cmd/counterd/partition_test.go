//go:build linux

package main

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cdclient "github.com/counterd/counterd/client"
	"github.com/counterd/counterd/internal/testutil/netns"
)

// inNetns places node i in namespace i of nw, every listener on its own
// address with the default ports. The addresses are not loopback, so the
// nodes run with --insecure: the namespaces' network is private to the test.
func inNetns(nw *netns.Network) placement {
	return func(_ testing.TB, i int) (string, []string, func(string, ...string) *exec.Cmd) {
		return nw.IP(i), []string{"8080", "6380", "9090", "7946"}, func(name string, args ...string) *exec.Cmd {
			return nw.Command(i, name, append(args, "--insecure")...)
		}
	}
}

// TestClusterPartition: three nodes in their own network namespaces; n3 is
// cut off from n1 and n2 (not from the test) while both sides keep writing:
// pn and sharded increments, with idempotency keys (retried until
// acknowledged) and without (one attempt, applied where they arrive), are
// accepted on both sides; sync counter increments only where a quorum is
// reachable. After healing, every node must read exactly the acknowledged
// sum of every pn and sharded id, and at least the acknowledged sum of
// every counter id.
func TestClusterPartition(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster of counterd processes")
	}
	nw := netns.New(t, 3)
	c := newCluster(t, 3, inNetns(nw))
	major, minor := c.nodes[:2], c.nodes[2:]
	keyed := slices.Concat(specs("part:pn:", 6, cdclient.KindPN, ""), specs("part:sh:", 6, cdclient.KindSharded, ""))
	keyless := slices.Concat(specs("part:pn-nokey:", 4, cdclient.KindPN, ""), specs("part:sh-nokey:", 4, cdclient.KindSharded, ""))
	counters := specs("part:c:", 8, cdclient.KindCounter, "sync")
	led := newLedger()
	// Each kind of write has loads of its own, so that writes that stall
	// during the partition (counter) do not hold up the others.
	majorKeyed := startLoad(led, "majority-keyed", keyed, major, 2, 20*time.Second)
	minorKeyed := startLoad(led, "minority-keyed", keyed, minor, 2, 20*time.Second)
	majorKeyless := startLoad(led, "majority-keyless", keyless, major, 1, 0)
	minorKeyless := startLoad(led, "minority-keyless", keyless, minor, 1, 0)
	majorCounter := startLoad(led, "majority-counter", counters, major, 2, 3*time.Second)
	minorCounter := startLoad(led, "minority-counter", counters, minor, 1, time.Second)
	loads := []*load{majorKeyed, minorKeyed, majorKeyless, minorKeyless, majorCounter, minorCounter}
	for _, l := range loads {
		defer l.stop(t)
	}
	for _, l := range loads {
		l.waitAcks(t, 50, 60*time.Second)
	}

	if err := nw.Partition([]int{2}, []int{0, 1}); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	minorityAcks := minorCounter.acks.Load()
	if _, err := awaitAlive(major, 20*time.Second); err != nil {
		t.Logf("n1, n2 still list n3 alive 20s after the cut: %v", err)
	} else {
		t.Logf("n1, n2 dropped n3 %v after the cut", time.Since(cut).Round(time.Millisecond))
	}
	for _, l := range []*load{majorKeyed, minorKeyed, majorKeyless, minorKeyless} {
		l.waitAcks(t, 200, 30*time.Second)
	}
	t.Logf("partition held %v; the minority acknowledged %d sync counter increments meanwhile",
		time.Since(cut).Round(time.Millisecond), minorCounter.acks.Load()-minorityAcks)

	if err := nw.Heal(); err != nil {
		t.Fatal(err)
	}
	healed := time.Now()
	majorKeyed.waitAcks(t, 100, 30*time.Second)
	for _, l := range loads {
		l.stop(t)
	}
	if _, err := awaitAlive(c.nodes, 30*time.Second); err != nil {
		t.Errorf("membership did not heal within 30s: %v", err)
	} else {
		t.Logf("membership healed %v after the routes were restored", time.Since(healed).Round(time.Millisecond))
	}
	crdt := slices.Concat(keyed, keyless)
	for _, s := range crdt {
		if acked, sent := led.counts(s.id); acked != sent {
			t.Errorf("%s: %d of %d %s increments were not acknowledged; every node should accept them", s.id, sent-acked, sent, s.kind)
		}
	}
	exact := func(s counterSpec) bool { return s.kind != cdclient.KindCounter && led.resolved(s) }
	start := time.Now()
	if err := poll(10*time.Second, func() error { return converged(c.nodes, led, slices.Concat(crdt, counters), exact) }); err != nil {
		t.Errorf("10s after membership healed, nodes do not hold the acknowledged sums:\n%v", err)
	} else {
		t.Logf("every node holds the acknowledged sums %v after membership healed", time.Since(start).Round(time.Millisecond))
	}
}

// TestClusterPartitionFencesOldOwner: the small side of a partition may
// not acknowledge, nor make the cluster lose, anything. n3 owns a counter
// id; after 5 acknowledged increments of 1, n3 is cut off and at once
// receives 24 concurrent keyed sync increments of 1000, which it applies
// locally before it notices the partition (none can be acknowledged: no
// write quorum). n1 and n2 take the id over and acknowledge 2 more
// increments of 1, then the 24 increments of 1000 are retried through n1
// with their keys until acknowledged. After healing every node must read
// exactly 7 + 24*1000: the majority's increments are never lost to the
// minority's higher write count (ownership epochs), and each keyed
// increment counts once: a retry is not answered from the record of a
// minority write that was lost (records are kept only with their write).
func TestClusterPartitionFencesOldOwner(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster of counterd processes")
	}
	nw := netns.New(t, 3)
	c := newCluster(t, 3, inNetns(nw))
	n1, n3 := c.nodes[0], c.nodes[2]
	id := ownedBy(t, n1, n3.id, "fence:c:")
	incr := func(n *cnode, delta int64, key string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cl := n.raw
		opts := []cdclient.IncrOption{cdclient.WithKind(cdclient.KindCounter), cdclient.WithDurability("sync")}
		if key != "" {
			opts = append(opts, cdclient.WithIdempotencyKey(key))
		}
		_, err := cl.Incr(ctx, id, delta, opts...)
		return err
	}
	acked := int64(0)
	for i := range 5 {
		if err := poll(10*time.Second, func() error { return incr(n1, 1, fmt.Sprintf("before-%d", i)) }); err != nil {
			t.Fatalf("increment before the partition: %v", err)
		}
		acked++
	}
	if err := nw.Partition([]int{2}, []int{0, 1}); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	const attempts = 24
	var minorityAcked atomic.Int64
	var wg sync.WaitGroup
	for i := range attempts {
		wg.Go(func() {
			if incr(n3, 1000, fmt.Sprintf("minority-%d", i)) == nil {
				minorityAcked.Add(1)
			}
		})
	}
	if _, err := awaitAlive(c.nodes[:2], 20*time.Second); err != nil {
		t.Fatalf("n1, n2 did not drop n3 within 20s of the cut: %v", err)
	}
	t.Logf("n1, n2 dropped n3 %v after the cut", time.Since(cut).Round(time.Millisecond))
	for i := range 2 {
		if err := poll(10*time.Second, func() error { return incr(c.nodes[i], 1, fmt.Sprintf("during-%d", i)) }); err != nil {
			t.Fatalf("increment on the majority during the partition: %v", err)
		}
		acked++
	}
	wg.Wait()
	// The clients of the minority retry through the majority with the same
	// keys: each retry is answered from a record only if its write is in
	// the new owner's state, else applied there.
	for i := range attempts {
		if err := poll(10*time.Second, func() error { return incr(n1, 1000, fmt.Sprintf("minority-%d", i)) }); err != nil {
			t.Fatalf("retry of minority-%d through n1: %v", i, err)
		}
	}
	if err := nw.Heal(); err != nil {
		t.Fatal(err)
	}
	waitAlive(t, c.nodes, 30*time.Second)
	t.Logf("the minority acknowledged %d of %d attempts", minorityAcked.Load(), attempts)
	check := func() error {
		v, err := agreedValue(c.nodes, id)
		if err != nil {
			return err
		}
		small, big := v%1000, v/1000
		if small != acked || big != attempts {
			return fmt.Errorf("value %d: want %d acknowledged increments of 1 (got %d) and exactly %d of 1000, each acknowledged once (got %d)", v, acked, small, attempts, big)
		}
		return nil
	}
	if err := poll(15*time.Second, check); err != nil {
		t.Fatalf("after healing: %v", err)
	}
}
