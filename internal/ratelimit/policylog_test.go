package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"

	"pgregory.net/rapid"

	"github.com/counterd/counterd/internal/ratelimit"
	"github.com/counterd/counterd/internal/ratelimit/policystoretest"
)

// mapPersister keeps encoded records in a map, as the engine keeps them in
// Pebble; fail makes every store fail.
type mapPersister struct {
	mu   sync.Mutex
	m    map[string][]byte
	fail bool
}

func (p *mapPersister) LoadPolicyRecords() ([][]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Collect(maps.Values(p.m)), nil
}

func (p *mapPersister) StorePolicyRecords(kv map[string][]byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail {
		return errors.New("disk full")
	}
	if p.m == nil {
		p.m = map[string][]byte{}
	}
	maps.Copy(p.m, kv)
	return nil
}

func openLog(t testing.TB, node string, p ratelimit.PolicyPersister) *ratelimit.PolicyLog {
	t.Helper()
	l, err := ratelimit.OpenPolicyLog(node, p)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestPolicyLogIsAPolicyStore(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		policystoretest.Run(t, func(t *testing.T) ratelimit.PolicyStore { return openLog(t, "n1", nil) })
	})
	t.Run("persisted", func(t *testing.T) {
		policystoretest.Run(t, func(t *testing.T) ratelimit.PolicyStore { return openLog(t, "n1", &mapPersister{}) })
	})
}

// TestPolicyLogSurvivesReopen: what a log stored is what it loads again,
// deletions included; a failed store changes nothing.
func TestPolicyLogSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	p := &mapPersister{}
	l := openLog(t, "n1", p)
	a, b, c := policystoretest.Policy("a", 1), policystoretest.Policy("b", 2), policystoretest.Policy("c", 3)
	if err := l.ReplacePolicies(ctx, []ratelimit.Policy{c, a, b}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.DeletePolicy(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	p.fail = true
	if err := l.PutPolicy(ctx, policystoretest.Policy("d", 4)); err == nil {
		t.Fatal("PutPolicy succeeded although the store failed")
	}
	p.fail = false
	want, _ := l.LoadPolicies(ctx)
	if !slices.Equal(want, []ratelimit.Policy{c, b}) {
		t.Fatalf("before reopening: %+v", want)
	}
	got, err := openLog(t, "n1", p).LoadPolicies(ctx)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("after reopening: %+v, %v; want %+v", got, err, want)
	}
}

// TestPolicyLogMergeConverges: logs of several nodes, each written
// concurrently, merged in any order and any number of times, end with the
// same policies (Merge is idempotent, commutative and associative).
func TestPolicyLogMergeConverges(t *testing.T) {
	ctx := context.Background()
	rapid.Check(t, func(rt *rapid.T) {
		nodes := rapid.IntRange(2, 4).Draw(rt, "nodes")
		logs := make([]*ratelimit.PolicyLog, nodes)
		for i := range logs {
			logs[i] = openLog(t, fmt.Sprintf("n%d", i), nil)
		}
		names := []string{"a", "b", "c"}
		for i := range rapid.IntRange(1, 20).Draw(rt, "ops") {
			l := logs[rapid.IntRange(0, nodes-1).Draw(rt, fmt.Sprintf("node%d", i))]
			name := rapid.SampledFrom(names).Draw(rt, fmt.Sprintf("name%d", i))
			var err error
			switch rapid.IntRange(0, 3).Draw(rt, fmt.Sprintf("op%d", i)) {
			case 0, 1:
				err = l.PutPolicy(ctx, policystoretest.Policy(name, int64(i+1)))
			case 2:
				_, err = l.DeletePolicy(ctx, name)
			case 3:
				err = l.ReplacePolicies(ctx, []ratelimit.Policy{policystoretest.Policy(name, int64(i+1))})
			}
			if err != nil {
				rt.Fatal(err)
			}
			if rapid.Bool().Draw(rt, fmt.Sprintf("sync%d", i)) { // some writes reach another node before the next op
				o := logs[rapid.IntRange(0, nodes-1).Draw(rt, fmt.Sprintf("to%d", i))]
				if _, err := o.Merge(l.Records()); err != nil {
					rt.Fatal(err)
				}
			}
		}
		// Everyone merges everyone's log, in a random order, twice.
		var all []ratelimit.PolicyRecord
		for _, l := range logs {
			all = append(all, l.Records()...)
		}
		for i, l := range logs {
			recs := slices.Clone(all)
			for j := range recs {
				k := rapid.IntRange(j, len(recs)-1).Draw(rt, fmt.Sprintf("perm%d_%d", i, j))
				recs[j], recs[k] = recs[k], recs[j]
			}
			for _, r := range recs {
				if _, err := l.Merge([]ratelimit.PolicyRecord{r}); err != nil {
					rt.Fatal(err)
				}
			}
			if n, err := l.Merge(recs); err != nil || n != 0 {
				rt.Fatalf("merging again changed %d records (%v)", n, err)
			}
		}
		want, _ := logs[0].LoadPolicies(ctx)
		for i, l := range logs[1:] {
			if got, _ := l.LoadPolicies(ctx); !slices.Equal(got, want) {
				rt.Fatalf("node %d has %+v, node 0 %+v", i+1, got, want)
			}
		}
	})
}

// TestPolicyLogMergeRejectsInvalid: an invalid record fails the merge
// with ErrInvalidPolicy and changes nothing.
func TestPolicyLogMergeRejectsInvalid(t *testing.T) {
	l := openLog(t, "n1", nil)
	good := policystoretest.Policy("good", 1)
	bad := policystoretest.Policy("bad", 1)
	bad.Limit = 0
	other := policystoretest.Policy("other", 1)
	for _, recs := range [][]ratelimit.PolicyRecord{
		{{Name: "good", Policy: &good, Stamp: 1, Node: "n2"}, {Name: "bad", Policy: &bad, Stamp: 1, Node: "n2"}},
		{{Name: "good", Policy: &good, Stamp: 1, Node: "n2"}, {Name: "x y", Stamp: 1, Node: "n2"}},
		{{Name: "good", Policy: &other, Stamp: 1, Node: "n2"}},
	} {
		if _, err := l.Merge(recs); !errors.Is(err, ratelimit.ErrInvalidPolicy) {
			t.Errorf("Merge(%+v) = %v, want ErrInvalidPolicy", recs, err)
		}
	}
	if ps, _ := l.LoadPolicies(context.Background()); len(ps) != 0 || len(l.Records()) != 0 {
		t.Fatalf("a rejected merge changed the log: %+v", l.Records())
	}
}

// TestPolicyLogSeedLosesToWrites: a policies file seeds only names never
// held, and any write (here or merged from a node) wins over it.
func TestPolicyLogSeedLosesToWrites(t *testing.T) {
	ctx := context.Background()
	file := []ratelimit.Policy{policystoretest.Policy("a", 10), policystoretest.Policy("b", 20)}
	n1, n2 := openLog(t, "n1", nil), openLog(t, "n2", nil)
	if err := n1.PutPolicy(ctx, policystoretest.Policy("a", 99)); err != nil {
		t.Fatal(err)
	}
	added, kept, err := n1.Seed(file)
	if err != nil || !slices.Equal(added, []string{"b"}) || !slices.Equal(kept, []string{"a"}) {
		t.Fatalf("Seed = %v, %v, %v; want [b], [a]", added, kept, err)
	}
	// n2 starts from the file alone, then hears from n1.
	if _, _, err := n2.Seed(file); err != nil {
		t.Fatal(err)
	}
	if _, err := n2.Merge(n1.Records()); err != nil {
		t.Fatal(err)
	}
	want := []ratelimit.Policy{policystoretest.Policy("a", 99), policystoretest.Policy("b", 20)}
	for _, l := range []*ratelimit.PolicyLog{n1, n2} {
		if got, _ := l.LoadPolicies(ctx); !slices.Equal(got, want) {
			t.Errorf("policies %+v, want %+v", got, want)
		}
	}
}
