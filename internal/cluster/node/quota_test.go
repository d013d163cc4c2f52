package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/quota"
)

// setTestQuotas gives every running node of c the quotas file text
// (recounted by the first), as a SIGHUP of each process does.
func setTestQuotas(t *testing.T, c *testCluster, text string) *quota.Config {
	t.Helper()
	q, err := quota.Parse(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	for _, tn := range c.running() {
		if err := tn.n.SetQuotas(q); err != nil {
			t.Fatalf("%s: %v", tn.id, err)
		}
	}
	return q
}

// quotaKeys is the usage of quota name as node tn reads it.
func quotaKeys(t *testing.T, tn *testNode, name string) int64 {
	t.Helper()
	us, err := tn.n.Quotas(context.Background())
	if err != nil {
		t.Fatalf("%s: quotas: %v", tn.id, err)
	}
	for _, u := range us {
		if u.Quota == name {
			return u.Keys
		}
	}
	t.Fatalf("%s: quota %s not in %+v", tn.id, name, us)
	return 0
}

// wantRefused fails unless err is the refusal of quota q:* at max.
func wantRefused(t *testing.T, what string, err error, max int64) {
	t.Helper()
	var qe *quota.ExceededError
	if !errors.Is(err, contract.ErrQuotaExceeded) || !errors.As(err, &qe) {
		t.Fatalf("%s: %v, want a quota refusal", what, err)
	}
	if qe.Quota != "q:*" || qe.Limit != "max_keys" || qe.Max != max {
		t.Fatalf("%s: refused by %+v, want q:* max_keys %d", what, *qe, max)
	}
}

// existing counts the ids under prefix that exist, read on tn.
func existing(t *testing.T, tn *testNode, ids []string) int64 {
	t.Helper()
	var n int64
	for _, id := range ids {
		v, err := tn.n.Get(context.Background(), id)
		if err != nil {
			t.Fatalf("get %s: %v", id, err)
		}
		if v.Kind != contract.KindNone {
			n++
		}
	}
	return n
}

// TestQuotaKeysAcrossOwners: max_keys counts the keys of the whole
// cluster: keys owned by different nodes, created through different
// nodes one after another, are refused at exactly max_keys, whichever
// node the write goes to and whichever owns the new key; a delete gives
// one key's room back.
func TestQuotaKeysAcrossOwners(t *testing.T) {
	c := newTestCluster(t, "n1", "n2", "n3")
	setTestQuotas(t, c, "namespaces:\n  \"q:*\": {max_keys: 5}\n")
	nodes := c.running()
	ctx := context.Background()
	owners := map[string]bool{}
	var ids []string
	for i := 0; i < 5; i++ {
		id := fmt.Sprintf("q:%d", i)
		if _, err := nodes[i%3].n.Apply(ctx, contract.Op{Type: contract.OpAdd, ID: id, Delta: 1}, contract.WriteOptions{}); err != nil {
			t.Fatalf("key %d of 5: %v", i+1, err)
		}
		owners[nodes[0].n.Ring().Owner(id)] = true
		ids = append(ids, id)
	}
	if len(owners) < 2 {
		t.Fatalf("the 5 keys have one owner %v: the test proves nothing", owners)
	}
	refusedOwners := map[string]bool{}
	for i := 5; i < 14; i++ {
		id := fmt.Sprintf("q:%d", i)
		_, err := nodes[i%3].n.Apply(ctx, contract.Op{Type: contract.OpAdd, ID: id, Delta: 1}, contract.WriteOptions{})
		wantRefused(t, id, err, 5)
		refusedOwners[nodes[0].n.Ring().Owner(id)] = true
		ids = append(ids, id)
	}
	if len(refusedOwners) < 2 {
		t.Errorf("the refused keys have one owner %v", refusedOwners)
	}
	if got := existing(t, nodes[1], ids); got != 5 {
		t.Fatalf("%d keys exist, want 5", got)
	}
	for _, tn := range nodes {
		if k := quotaKeys(t, tn, "q:*"); k != 5 {
			t.Errorf("%s: usage %d, want 5", tn.id, k)
		}
	}
	// Adds to existing keys go on.
	if _, err := nodes[2].n.Apply(ctx, contract.Op{Type: contract.OpAdd, ID: "q:0", Delta: 1}, contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := nodes[1].n.Apply(ctx, contract.Op{Type: contract.OpDelete, ID: "q:3"}, contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := nodes[0].n.Apply(ctx, contract.Op{Type: contract.OpPFAdd, ID: "q:20", Items: [][]byte{[]byte("x")}}, contract.WriteOptions{}); err != nil {
		t.Fatalf("a key after a delete: %v", err)
	}
	_, err := nodes[2].n.Apply(ctx, contract.Op{Type: contract.OpAdd, ID: "q:21", Delta: 1}, contract.WriteOptions{})
	wantRefused(t, "q:21", err, 5)
	if k := quotaKeys(t, nodes[2], "q:*"); k != 5 {
		t.Errorf("usage %d after delete and create, want 5", k)
	}
	// Clients cannot write the counts.
	if _, err := nodes[0].n.Apply(ctx, contract.Op{Type: contract.OpSet, ID: QuotaIDPrefix + "r:q:*", Value: 0}, contract.WriteOptions{}); !errors.Is(err, contract.ErrInvalidArgument) {
		t.Errorf("a client's write of a count: %v, want %v", err, contract.ErrInvalidArgument)
	}
	if k := quotaKeys(t, nodes[0], "q:*"); k != 5 {
		t.Errorf("usage %d after a client's write of the count, want 5", k)
	}
}

// TestQuotaHandoffAndRestart: the counts are ordinary counters that move
// with the ring: a node joining, a node leaving (handoff) and a node
// restarting keep them exact, with no recount.
func TestQuotaHandoffAndRestart(t *testing.T) {
	c := newTestCluster(t, "n1", "n2", "n3")
	const text = "namespaces:\n  \"q:*\": {max_keys: 20}\ndefault: {max_keys: 1000}\n"
	q := setTestQuotas(t, c, text)
	ctx := context.Background()
	create := func(via *testNode, id string) error {
		_, err := via.n.Apply(ctx, contract.Op{Type: contract.OpAdd, ID: id, Delta: 1}, contract.WriteOptions{Durability: contract.Sync})
		return err
	}
	next := 0
	fill := func(k int) {
		t.Helper()
		for i := 0; i < k; i++ {
			nodes := c.running()
			id := fmt.Sprintf("q:%d", next)
			next++
			if err := create(nodes[i%len(nodes)], id); err != nil {
				t.Fatalf("%s: %v", id, err)
			}
		}
	}
	usage := func(want int64) {
		t.Helper()
		for _, tn := range c.running() {
			if k := quotaKeys(t, tn, "q:*"); k != want {
				t.Fatalf("%s: usage %d, want %d", tn.id, k, want)
			}
		}
	}
	fill(12)
	usage(12)

	// n4 joins with the quotas but no recount: the counts it comes to
	// own arrive by handoff.
	tn4 := c.start("n4", "")
	if err := tn4.n.setQuotas(q, false); err != nil {
		t.Fatal(err)
	}
	c.waitRing("n1", "n2", "n3", "n4")
	usage(12)
	fill(4)
	usage(16)

	// n2 leaves (drain and handoff).
	c.leave("n2")
	c.waitRing("n1", "n3", "n4")
	usage(16)

	// n3 restarts on its data.
	dir := c.node("n3").dir
	c.leave("n3")
	c.waitRing("n1", "n4")
	tn3 := c.start("n3", dir)
	if err := tn3.n.setQuotas(q, false); err != nil {
		t.Fatal(err)
	}
	c.waitRing("n1", "n3", "n4")
	usage(16)

	fill(4)
	usage(20)
	for i, tn := range c.running() {
		err := create(tn, fmt.Sprintf("q:x%d", i))
		wantRefused(t, "a key past 20 after the handoffs", err, 20)
	}
	usage(20)
}

// TestQuotaConcurrentCreates: creates racing from every node never pass
// max_keys, and the count equals the keys that exist afterwards.
func TestQuotaConcurrentCreates(t *testing.T) {
	c := newTestCluster(t, "n1", "n2", "n3")
	setTestQuotas(t, c, "namespaces:\n  \"q:*\": {max_keys: 10}\n")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	var ids []string
	var mu sync.Mutex
	for w := 0; w < 12; w++ {
		tn := c.running()[w%3]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 4; i++ {
				id := fmt.Sprintf("q:%d:%d", w, i)
				mu.Lock()
				ids = append(ids, id)
				mu.Unlock()
				_, err := tn.n.Apply(ctx, contract.Op{Type: contract.OpAdd, ID: id, Delta: 1}, contract.WriteOptions{})
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, contract.ErrQuotaExceeded):
					refused.Add(1)
				default:
					t.Errorf("%s: %v", id, err)
				}
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 10 || refused.Load() != 38 {
		t.Errorf("%d created and %d refused, want 10 and 38", ok.Load(), refused.Load())
	}
	if got := existing(t, c.running()[0], ids); got != ok.Load() {
		t.Errorf("%d keys exist, %d acknowledged", got, ok.Load())
	}
	if k := quotaKeys(t, c.running()[1], "q:*"); k != 10 {
		t.Errorf("usage %d, want 10", k)
	}
}

// BenchmarkQuotaAddExisting compares adds to existing counters on their
// owner (a one-node cluster) without and with a max_keys quota over them:
// the path quotas must keep free of any quota call.
func BenchmarkQuotaAddExisting(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "none"
		if on {
			name = "quotas"
		}
		b.Run(name, func(b *testing.B) {
			c := newTestCluster(b, "n1")
			n := c.node("n1").n
			ctx := context.Background()
			if on {
				q, err := quota.Parse(strings.NewReader("namespaces:\n  \"a:*\": {max_keys: 1000}\n  \"q:*\": {max_keys: 100000}\n"))
				if err != nil {
					b.Fatal(err)
				}
				if err := n.SetQuotas(q); err != nil {
					b.Fatal(err)
				}
			}
			ids := make([]string, 256)
			for i := range ids {
				ids[i] = fmt.Sprintf("q:%d", i)
				if _, err := n.Apply(ctx, contract.Op{Type: contract.OpAdd, ID: ids[i], Delta: 1}, contract.WriteOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if _, err := n.Apply(ctx, contract.Op{Type: contract.OpAdd, ID: ids[i%len(ids)], Delta: 1}, contract.WriteOptions{}); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		})
	}
}
