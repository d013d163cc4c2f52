package ring

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"pgregory.net/rapid"
)

const numIDs = 100_000

var testIDs = func() []string {
	ids := make([]string, numIDs)
	for i := range ids {
		ids[i] = fmt.Sprintf("page_views:article_%d", i)
	}
	return ids
}()

func nodeNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("node-%d", i+1)
	}
	return out
}

func ringOf(nodes ...string) *Ring {
	r := New(Config{})
	for _, n := range nodes {
		r.Add(n)
	}
	return r
}

func TestConfig(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("zero config: %v", err)
	}
	d := Config{}.WithDefaults()
	if d.VirtualNodes != 100 || d.ReplicationFactor != 3 {
		t.Fatalf("defaults = %+v", d)
	}
	for _, c := range []Config{{VirtualNodes: -1}, {VirtualNodes: MaxVirtualNodes + 1}, {ReplicationFactor: -2}} {
		if c.Validate() == nil {
			t.Errorf("%+v: want error", c)
		}
	}
	defer func() {
		if recover() == nil {
			t.Fatal("New with invalid config did not panic")
		}
	}()
	New(Config{VirtualNodes: -1})
}

func TestEmptyAndVersion(t *testing.T) {
	r := New(Config{})
	if got := r.Owner("x"); got != "" {
		t.Fatalf("empty ring owner = %q", got)
	}
	if got := r.Replicas("x", 3); len(got) != 0 {
		t.Fatalf("empty ring replicas = %v", got)
	}
	if r.Version() != 0 {
		t.Fatalf("version = %d", r.Version())
	}
	if !r.Add("a") || r.Version() != 1 {
		t.Fatalf("add: version %d", r.Version())
	}
	if r.Add("a") || r.Version() != 1 {
		t.Fatalf("re-add changed version to %d", r.Version())
	}
	if r.Remove("zz") || r.Version() != 1 {
		t.Fatal("removing an absent node changed the ring")
	}
	r.Add("b")
	if !r.Remove("a") || r.Version() != 3 {
		t.Fatalf("remove: version %d", r.Version())
	}
	if !slices.Equal(r.Nodes(), []string{"b"}) || r.Owner("x") != "b" {
		t.Fatalf("nodes %v owner %q", r.Nodes(), r.Owner("x"))
	}
	if r.Set([]string{"b"}) || !r.Set([]string{"c", "", "a", "c"}) || !slices.Equal(r.Nodes(), []string{"a", "c"}) || r.Version() != 4 {
		t.Fatalf("set: nodes %v version %d", r.Nodes(), r.Version())
	}
}

func owners(s *Snapshot) []string {
	out := make([]string, len(testIDs))
	for i, id := range testIDs {
		out[i] = s.Owner(id)
	}
	return out
}

// Going from 3 to 4 nodes moves about a quarter of the ids, all to the new
// node; removing it again moves back exactly the ids it owned.
func TestAddRemoveMovement(t *testing.T) {
	r := ringOf("node-1", "node-2", "node-3")
	s3 := r.Snapshot()
	before := owners(s3)
	r.Add("node-4")
	s4 := r.Snapshot()
	after := owners(s4)
	moved := 0
	for i := range testIDs {
		if before[i] != after[i] {
			moved++
			if after[i] != "node-4" {
				t.Fatalf("%s moved %s -> %s, not to the new node", testIDs[i], before[i], after[i])
			}
		}
	}
	frac := float64(moved) / numIDs
	t.Logf("3 -> 4 nodes: %d of %d ids moved (%.4f)", moved, numIDs, frac)
	if frac < 0.20 || frac > 0.30 {
		t.Fatalf("moved fraction %.4f outside [0.20, 0.30]", frac)
	}
	if d := Diff(s3, s4, testIDs); len(d) != moved {
		t.Fatalf("Diff found %d moves, want %d", len(d), moved)
	}

	r.Remove("node-4")
	back := owners(r.Snapshot())
	movedBack := 0
	for i := range testIDs {
		if after[i] != back[i] {
			movedBack++
			if after[i] != "node-4" {
				t.Fatalf("%s moved off %s, which stayed", testIDs[i], after[i])
			}
		} else if after[i] == "node-4" {
			t.Fatalf("%s still owned by removed node", testIDs[i])
		}
		if back[i] != before[i] {
			t.Fatalf("%s: owner %s after add+remove, %s before", testIDs[i], back[i], before[i])
		}
	}
	if movedBack != moved {
		t.Fatalf("moved back %d, want %d", movedBack, moved)
	}
}

// With 100 virtual nodes the most loaded node holds at most 1.25x the mean.
func TestBalance(t *testing.T) {
	for n := 3; n <= 10; n++ {
		r := ringOf(nodeNames(n)...)
		count := map[string]int{}
		for _, id := range testIDs {
			count[r.Owner(id)]++
		}
		if len(count) != n {
			t.Fatalf("%d nodes: only %d own ids", n, len(count))
		}
		mean := float64(numIDs) / float64(n)
		mx, mn := 0, numIDs
		for _, c := range count {
			mx, mn = max(mx, c), min(mn, c)
		}
		t.Logf("%2d nodes: max/mean %.3f, min/mean %.3f", n, float64(mx)/mean, float64(mn)/mean)
		if float64(mx) > 1.25*mean {
			t.Errorf("%d nodes: most loaded holds %d, %.3fx the mean", n, mx, float64(mx)/mean)
		}
	}
}

func TestReplicas(t *testing.T) {
	r := ringOf(nodeNames(5)...)
	s := r.Snapshot()
	for _, id := range testIDs[:10000] {
		reps := s.Replicas(id, 0)
		if len(reps) != 3 {
			t.Fatalf("%s: %d replicas, want 3 (default R)", id, len(reps))
		}
		if reps[0] != s.Owner(id) {
			t.Fatalf("%s: first replica %s, owner %s", id, reps[0], s.Owner(id))
		}
		seen := map[string]bool{}
		for _, n := range reps {
			if seen[n] {
				t.Fatalf("%s: duplicate replica in %v", id, reps)
			}
			seen[n] = true
		}
		if again := s.Replicas(id, 3); !slices.Equal(again, reps) {
			t.Fatalf("%s: replicas %v then %v", id, reps, again)
		}
		if all := s.Replicas(id, 99); len(all) != 5 || !slices.Equal(all[:3], reps) {
			t.Fatalf("%s: Replicas(99) = %v, want the 5 nodes starting with %v", id, all, reps)
		}
	}
	// R is capped at the number of nodes.
	if got := ringOf("a", "b").Replicas("x", 0); len(got) != 2 {
		t.Fatalf("2 nodes: replicas %v", got)
	}
	// Same node set, other insertion order: same replicas.
	names := nodeNames(5)
	slices.Reverse(names)
	s2 := ringOf(names...).Snapshot()
	for _, id := range testIDs[:10000] {
		if a, b := s.Replicas(id, 3), s2.Replicas(id, 3); !slices.Equal(a, b) {
			t.Fatalf("%s: replicas depend on insertion order: %v vs %v", id, a, b)
		}
	}
	// AppendReplicas reuses the buffer.
	buf := make([]string, 0, 3)
	if n := testing.AllocsPerRun(100, func() { buf = s.AppendReplicas(buf[:0], "x", 3) }); n != 0 {
		t.Fatalf("AppendReplicas allocates %v times", n)
	}
}

// Moved's ranges cover exactly the ids whose owner changed.
func TestMovedRanges(t *testing.T) {
	cases := []struct {
		name     string
		old, new []string
	}{
		{"add", nodeNames(3), nodeNames(4)},
		{"remove", nodeNames(4), nodeNames(3)},
		{"replace", []string{"a", "b", "c"}, []string{"a", "b", "d"}},
		{"from empty", nil, []string{"a", "b"}},
		{"to empty", []string{"a"}, nil},
		{"same", []string{"a", "b"}, []string{"b", "a"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			old, new := ringOf(c.old...).Snapshot(), ringOf(c.new...).Snapshot()
			ranges := Moved(old, new)
			want := map[string]Move{}
			for _, m := range Diff(old, new, testIDs) {
				want[m.ID] = m
			}
			for _, id := range testIDs {
				h := Hash(id)
				var in []Range
				for _, rg := range ranges {
					if rg.Contains(h) {
						in = append(in, rg)
					}
				}
				m, moved := want[id]
				switch {
				case !moved && len(in) != 0:
					t.Fatalf("%s did not move but is in %v", id, in)
				case moved && len(in) != 1:
					t.Fatalf("%s moved %s->%s but is in %d ranges", id, m.From, m.To, len(in))
				case moved && (in[0].From != m.From || in[0].To != m.To):
					t.Fatalf("%s moved %s->%s, range says %v", id, m.From, m.To, in[0])
				}
			}
			t.Logf("%d ranges, %d of %d ids moved", len(ranges), len(want), numIDs)
		})
	}
}

// Owner depends only on the node set, not on insertion order or history.
func TestOwnerDeterministicProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nodes := rapid.SliceOfNDistinct(rapid.StringMatching(`[a-z0-9.:-]{1,20}`), 1, 12, rapid.ID[string]).Draw(t, "nodes")
		perm := rapid.Permutation(nodes).Draw(t, "perm")
		extra := rapid.StringMatching(`x[a-z0-9]{0,8}`).Draw(t, "extra")
		vnodes := rapid.IntRange(1, 200).Draw(t, "vnodes")
		ids := rapid.SliceOfN(rapid.String(), 1, 50).Draw(t, "ids")

		a := New(Config{VirtualNodes: vnodes})
		for _, n := range nodes {
			a.Add(n)
		}
		b := New(Config{VirtualNodes: vnodes})
		b.Add(extra) // history must not matter
		for _, n := range perm {
			b.Add(n)
		}
		if !slices.Contains(nodes, extra) {
			b.Remove(extra)
		}
		for _, id := range ids {
			oa, ob := a.Owner(id), b.Owner(id)
			if oa != ob {
				t.Fatalf("owner of %q: %q vs %q", id, oa, ob)
			}
			if oa != a.Owner(id) {
				t.Fatalf("owner of %q not stable", id)
			}
			if !slices.Contains(nodes, oa) {
				t.Fatalf("owner %q not a node", oa)
			}
			if ra, rb := a.Replicas(id, 0), b.Replicas(id, 0); !slices.Equal(ra, rb) {
				t.Fatalf("replicas of %q: %v vs %v", id, ra, rb)
			}
		}
	})
}

// Lookups run concurrently with membership changes (run with -race).
func TestConcurrent(t *testing.T) {
	r := ringOf(nodeNames(4)...)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				s := r.Snapshot()
				id := testIDs[rng.IntN(numIDs)]
				o := s.Owner(id)
				if reps := s.Replicas(id, 2); len(reps) == 0 || reps[0] != o {
					panic(fmt.Sprintf("owner %s, replicas %v", o, reps))
				}
			}
		}()
	}
	for i := 0; i < 200; i++ {
		n := fmt.Sprintf("extra-%d", i%3)
		if i%2 == 0 {
			r.Add(n)
		} else {
			r.Remove(n)
		}
	}
	close(stop)
	wg.Wait()
}

func TestOwnerAllocs(t *testing.T) {
	s := ringOf(nodeNames(5)...).Snapshot()
	if n := testing.AllocsPerRun(1000, func() { _ = s.Owner("page_views:article_123") }); n != 0 {
		t.Fatalf("Owner allocates %v times", n)
	}
}

func BenchmarkOwner(b *testing.B) {
	for _, n := range []int{3, 10, 100} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			r := ringOf(nodeNames(n)...)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				_ = r.Owner(testIDs[i%numIDs])
				i++
			}
		})
	}
}

func BenchmarkReplicas3(b *testing.B) {
	r := ringOf(nodeNames(10)...)
	s := r.Snapshot()
	buf := make([]string, 0, 3)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		buf = s.AppendReplicas(buf[:0], testIDs[i%numIDs], 3)
		i++
	}
}

func BenchmarkAdd(b *testing.B) {
	names := nodeNames(10)
	b.ReportAllocs()
	for b.Loop() {
		r := New(Config{})
		for _, n := range names {
			r.Add(n)
		}
	}
}

func TestOwnership(t *testing.T) {
	r := New(Config{})
	if got := r.Snapshot().Ownership(); len(got) != 0 {
		t.Fatalf("empty ring ownership = %v", got)
	}
	r.Set([]string{"n1"})
	if got := r.Snapshot().Ownership()["n1"]; got != 1 {
		t.Fatalf("single node owns %v, want 1", got)
	}
	r.Set([]string{"n1", "n2", "n3"})
	own := r.Snapshot().Ownership()
	sum := 0.0
	for _, f := range own {
		sum += f
		if f < 0.2 || f > 0.5 {
			t.Errorf("share %v out of the expected range for 3 nodes", f)
		}
	}
	if sum < 0.999999 || sum > 1.000001 {
		t.Fatalf("shares sum to %v, want 1", sum)
	}
	// Shares predict the owner of random ids.
	counts := map[string]int{}
	const ids = 20000
	for i := 0; i < ids; i++ {
		counts[r.Owner(fmt.Sprintf("id-%d", i))]++
	}
	for n, f := range own {
		if got := float64(counts[n]) / ids; got < f-0.02 || got > f+0.02 {
			t.Errorf("%s: owns %.3f of ids, share %.3f", n, got, f)
		}
	}
}
