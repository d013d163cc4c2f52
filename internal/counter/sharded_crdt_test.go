package counter

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// named returns a sharded counter of replica name with n shards and the
// adds (shard i%n gets adds[i]).
func named(t fataler, name string, n int, adds ...int64) *Sharded {
	s := NewSharded(n)
	if err := s.SetReplica(name); err != nil {
		t.Fatal(err)
	}
	for i, d := range adds {
		if err := s.Add(i%n, d); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func mustMerge(t fataler, dst, src *Sharded) bool {
	changed, err := dst.Merge(src)
	if err != nil {
		t.Fatal(err)
	}
	return changed
}

func TestShardedLegacyFormat(t *testing.T) {
	// Bytes written before replication existed: 3 shards, -5, 0, 7.
	old := []byte{formatSharded, 3, 9, 0, 14}
	s := new(Sharded)
	if err := s.UnmarshalBinary(old); err != nil {
		t.Fatal(err)
	}
	if s.Value() != 2 || s.Replica() != "" || !slices.Equal(s.Shards(), []int64{-5, 0, 7}) {
		t.Fatalf("old data: value %d, replica %q, shards %v", s.Value(), s.Replica(), s.Shards())
	}
	if got := mustMarshal(t, s); !slices.Equal(got, old) {
		t.Fatalf("unnamed counter re-encodes as %x, want the old %x", got, old)
	}
	if _, err := s.Merge(named(t, "b", 1, 1)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("merge into unnamed: %v, want ErrInvalid", err)
	}
	// Naming it makes every old shard the local replica's.
	if err := s.SetReplica("a"); err != nil {
		t.Fatal(err)
	}
	if got := s.Slots(); !slices.Equal(got, []ShardedSlot{{"a", 2, 1}}) {
		t.Fatalf("slots %v", got)
	}
	enc := mustMarshal(t, s)
	if enc[0] != formatShardedReplicated {
		t.Fatalf("named counter encodes with format %#x", enc[0])
	}
	c := new(Sharded)
	if err := c.UnmarshalBinary(enc); err != nil || !c.Equal(s) || c.Replica() != "a" || !slices.Equal(c.Shards(), s.Shards()) {
		t.Fatalf("round trip: %v %v %v", err, c.Slots(), c.Shards())
	}
	// All-zero old shards carry no slot.
	z := new(Sharded)
	if err := z.UnmarshalBinary([]byte{formatSharded, 2, 0, 0}); err != nil || len(z.Slots()) != 0 {
		t.Fatalf("zero old data: %v %v", err, z.Slots())
	}
}

func TestShardedMergeReplicas(t *testing.T) {
	a := named(t, "a", 4, 1, 2, 3)
	b := named(t, "b", 2, 10, -4)
	if !mustMerge(t, a, b) || a.Value() != 12 {
		t.Fatalf("a∪b = %d, want 12", a.Value())
	}
	if !slices.Equal(a.Shards(), []int64{1, 2, 3, 0}) {
		t.Fatalf("merge touched the local shards: %v", a.Shards())
	}
	if mustMerge(t, a, b) || mustMerge(t, a, a.Clone()) {
		t.Fatal("re-merge reported a change")
	}
	_ = b.Add(0, 5)
	if !mustMerge(t, a, b) || a.Value() != 17 {
		t.Fatalf("newer b: %d, want 17", a.Value())
	}
	want := []ShardedSlot{{"a", 6, 3}, {"b", 11, 3}}
	if got := a.Slots(); !slices.Equal(got, want) {
		t.Fatalf("slots %v, want %v", got, want)
	}
	// b receives a's view, which includes b's own slot: nothing of b changes.
	if !mustMerge(t, b, a) || b.Value() != 17 || !slices.Equal(b.Shards(), []int64{15, -4}) {
		t.Fatalf("b∪a: %d %v", b.Value(), b.Shards())
	}
	if _, err := a.Merge(NewSharded(1)); err != nil {
		t.Fatalf("merge of an empty unnamed counter: %v", err)
	}
	u := NewSharded(1)
	_ = u.Add(0, 1)
	if _, err := a.Merge(u); !errors.Is(err, ErrInvalid) || a.Value() != 17 {
		t.Fatalf("merge of unnamed data: %v, value %d", err, a.Value())
	}
	if c, err := a.Merge(nil); c || err != nil {
		t.Fatal("Merge(nil)")
	}
}

// TestShardedDepartedReplica: B's slot is merged into A, B departs, and a
// stale copy of B's slot reaches A again through C: nothing double counts.
func TestShardedDepartedReplica(t *testing.T) {
	a, b, c := named(t, "a", 2, 1), named(t, "b", 2, 100), named(t, "c", 2, 1000)
	mustMerge(t, c, b) // C holds B at (100, seq 1)
	_ = b.Add(1, 50)   // B moves on: (150, seq 2)
	mustMerge(t, a, b)
	if a.Value() != 151 {
		t.Fatalf("a = %d, want 151", a.Value())
	}
	// B departs; its slot stays in A.
	for range 3 {
		if mustMerge(t, a, c); a.Value() != 1151 {
			t.Fatalf("after C's stale copy of B: %d, want 1151", a.Value())
		}
	}
	want := []ShardedSlot{{"a", 1, 1}, {"b", 150, 2}, {"c", 1000, 1}}
	if got := a.Slots(); !slices.Equal(got, want) {
		t.Fatalf("slots %v, want %v", got, want)
	}
	// C learns B's latest from A; merging C back changes nothing.
	mustMerge(t, c, a)
	if mustMerge(t, a, c) || c.Value() != a.Value() {
		t.Fatalf("c = %d, a = %d", c.Value(), a.Value())
	}
}

// TestShardedOwnSlotNewer: a replica that lost its latest writes (restart
// from an older copy) takes its own newer slot back from another replica.
func TestShardedOwnSlotNewer(t *testing.T) {
	a := named(t, "a", 3, 5, 6)
	old := a.Clone()
	_ = a.Add(2, 7)
	b := named(t, "b", 1)
	mustMerge(t, b, a)
	if !mustMerge(t, old, b) || old.Value() != 18 || !old.Equal(a) {
		t.Fatalf("own slot not taken back: %v, want %v", old.Slots(), a.Slots())
	}
	if err := old.Add(1, 1); err != nil || old.Value() != 19 || old.Slots()[0].Seq != 4 {
		t.Fatalf("add after taking the slot back: %v %v", err, old.Slots())
	}
}

func TestShardedSetReplica(t *testing.T) {
	a := named(t, "a", 2, 3, 4)
	if err := a.SetReplica(""); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty name: %v", err)
	}
	if err := a.SetReplica("a"); err != nil || a.Value() != 7 {
		t.Fatal("same name changed the counter")
	}
	// Renamed: a's slot is frozen, b starts from zero.
	if err := a.SetReplica("b"); err != nil {
		t.Fatal(err)
	}
	_ = a.Add(1, 10)
	want := []ShardedSlot{{"a", 7, 2}, {"b", 10, 1}}
	if got := a.Slots(); !slices.Equal(got, want) || a.Value() != 17 || !slices.Equal(a.Shards(), []int64{0, 10}) {
		t.Fatalf("after rename: %v %v", a.Slots(), a.Shards())
	}
	// Back to a: its slot becomes the local shards again.
	if err := a.SetReplica("a"); err != nil {
		t.Fatal(err)
	}
	want = []ShardedSlot{{"a", 7, 2}, {"b", 10, 1}}
	if got := a.Slots(); !slices.Equal(got, want) || a.Value() != 17 || !slices.Equal(a.Shards(), []int64{7, 0}) {
		t.Fatalf("after renaming back: %v %v", a.Slots(), a.Shards())
	}
}

func TestShardedMergeSaturates(t *testing.T) {
	a := named(t, "a", 1, math.MaxInt64)
	b := named(t, "b", 1, math.MaxInt64)
	mustMerge(t, a, b)
	if a.Value() != math.MaxInt64 {
		t.Fatalf("value %d, want saturation", a.Value())
	}
	if err := a.Add(0, -1); err != nil {
		t.Fatalf("add towards zero: %v", err)
	}
	c := named(t, "c", 1, 1)
	mustMerge(t, c, named(t, "d", 1, math.MaxInt64))
	if err := c.Add(0, 1); !errors.Is(err, ErrOverflow) || c.Value() != math.MaxInt64 {
		t.Fatalf("add past the range with a remote: %v, %d", err, c.Value())
	}
	d := new(Sharded)
	if err := d.UnmarshalBinary(mustMarshal(t, a)); err != nil || !d.Equal(a) || d.Value() != a.Value() {
		t.Fatalf("round trip: %v", err)
	}
}

func TestShardedReplicatedTruncations(t *testing.T) {
	good := named(t, "a", 2, 3, -1)
	mustMerge(t, good, named(t, "b", 1, 9))
	mustMerge(t, good, named(t, "c", 1, -4))
	checkTruncations(t, mustMarshal(t, good), func() binaryCodec { return new(Sharded) })
}

var shardedReplicas = []string{"a", "b", "c", "d"}

// shardedWorld is the adds of each replica; a consistent state holds, per
// replica, a prefix of its adds.
type shardedWorld [][]int64

func genShardedWorld() *rapid.Generator[shardedWorld] {
	return rapid.Custom(func(t *rapid.T) shardedWorld {
		w := make(shardedWorld, len(shardedReplicas))
		for i := range w {
			w[i] = rapid.SliceOfN(rapid.Int64Range(-1e12, 1e12), 0, 8).Draw(t, "adds")
		}
		return w
	})
}

// genSharded draws a state of w at a random replica that has seen a prefix
// of every replica's adds.
func genSharded(w shardedWorld) *rapid.Generator[*Sharded] {
	return rapid.Custom(func(t *rapid.T) *Sharded {
		me := rapid.IntRange(0, len(w)-1).Draw(t, "replica")
		s := named(t, shardedReplicas[me], rapid.IntRange(1, 4).Draw(t, "shards"))
		for j, adds := range w {
			k := rapid.IntRange(0, len(adds)).Draw(t, "seen")
			if j == me {
				for _, d := range adds[:k] {
					if err := s.Add(rapid.IntRange(0, s.Len()-1).Draw(t, "shard"), d); err != nil {
						t.Fatal(err)
					}
				}
				continue
			}
			mustMerge(t, s, named(t, shardedReplicas[j], 1, adds[:k]...))
		}
		return s
	})
}

func checkSameSharded(t *rapid.T, what string, x, y *Sharded) {
	if !x.Equal(y) || x.Value() != y.Value() {
		t.Fatalf("%s: %v (%d) vs %v (%d)", what, x.Slots(), x.Value(), y.Slots(), y.Value())
	}
}

func TestShardedMergeLaws(t *testing.T) {
	t.Run("commutative", rapid.MakeCheck(func(t *rapid.T) {
		w := genShardedWorld().Draw(t, "world")
		a, b := genSharded(w).Draw(t, "a"), genSharded(w).Draw(t, "b")
		ab, ba := a.Clone(), b.Clone()
		mustMerge(t, ab, b)
		mustMerge(t, ba, a)
		checkSameSharded(t, "a∪b vs b∪a", ab, ba)
	}))
	t.Run("associative", rapid.MakeCheck(func(t *rapid.T) {
		w := genShardedWorld().Draw(t, "world")
		a, b, c := genSharded(w).Draw(t, "a"), genSharded(w).Draw(t, "b"), genSharded(w).Draw(t, "c")
		left := a.Clone()
		mustMerge(t, left, b)
		mustMerge(t, left, c)
		bc := b.Clone()
		mustMerge(t, bc, c)
		right := a.Clone()
		mustMerge(t, right, bc)
		checkSameSharded(t, "(a∪b)∪c vs a∪(b∪c)", left, right)
	}))
	t.Run("idempotent", rapid.MakeCheck(func(t *rapid.T) {
		w := genShardedWorld().Draw(t, "world")
		a, b := genSharded(w).Draw(t, "a"), genSharded(w).Draw(t, "b")
		if mustMerge(t, a, a.Clone()) {
			t.Fatal("a∪a changed a")
		}
		ab := a.Clone()
		mustMerge(t, ab, b)
		abb := ab.Clone()
		if mustMerge(t, abb, b) {
			t.Fatal("(a∪b)∪b changed a∪b")
		}
		checkSameSharded(t, "(a∪b)∪b vs a∪b", abb, ab)
	}))
	t.Run("merge of every replica is the sum of every add", rapid.MakeCheck(func(t *rapid.T) {
		w := genShardedWorld().Draw(t, "world")
		var total int64
		full := make([]*Sharded, len(w))
		for j, adds := range w {
			full[j] = named(t, shardedReplicas[j], 1+j%3)
			for i, d := range adds {
				_ = full[j].Add(i%full[j].Len(), d)
				total += d
			}
		}
		partial := rapid.SliceOfN(genSharded(w), 0, 4).Draw(t, "partial")
		all := slices.Concat(partial, full)
		order := rapid.Permutation(all).Draw(t, "order")
		dst := order[0].Clone()
		for _, s := range order[1:] {
			mustMerge(t, dst, s)
		}
		if dst.Value() != total {
			t.Fatalf("merge of all replicas = %d, sum of all adds = %d", dst.Value(), total)
		}
	}))
}

// TestShardedReplicasConverge: replicas add to their own shards and merge
// each other's states in a random order; each one's value is the sum of the
// adds it has seen, and merging all of them gives the sum of all adds.
func TestShardedReplicasConverge(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nr := rapid.IntRange(1, 4).Draw(t, "replicas")
		states := make([]*Sharded, nr)
		seen := make([][]int, nr) // seen[i][j]: replica j's adds replica i has seen
		adds := make([][]int64, nr)
		for i := range nr {
			states[i] = named(t, fmt.Sprintf("node-%d", i), rapid.IntRange(1, 4).Draw(t, "shards"))
			seen[i] = make([]int, nr)
		}
		var total int64
		for range rapid.IntRange(0, 50).Draw(t, "steps") {
			i := rapid.IntRange(0, nr-1).Draw(t, "at")
			if rapid.Bool().Draw(t, "add") {
				d := rapid.Int64Range(-1e9, 1e9).Draw(t, "delta")
				if err := states[i].Add(rapid.IntRange(0, states[i].Len()-1).Draw(t, "shard"), d); err != nil {
					t.Fatal(err)
				}
				adds[i] = append(adds[i], d)
				seen[i][i]++
				total += d
			} else {
				j := rapid.IntRange(0, nr-1).Draw(t, "from")
				mustMerge(t, states[i], states[j].Clone())
				for k := range nr {
					seen[i][k] = max(seen[i][k], seen[j][k])
				}
			}
			var want int64
			for j := range nr {
				for _, d := range adds[j][:seen[i][j]] {
					want += d
				}
			}
			if got := states[i].Value(); got != want {
				t.Fatalf("replica %d value %d, want %d", i, got, want)
			}
		}
		for i := range nr {
			for j := range nr {
				mustMerge(t, states[i], states[j])
			}
		}
		for i := range nr {
			if states[i].Value() != total || !states[i].Equal(states[0]) {
				t.Fatalf("replica %d after full exchange: %d, want %d", i, states[i].Value(), total)
			}
		}
	})
}

func FuzzShardedReplicatedUnmarshal(f *testing.F) {
	a := named(f, "a", 3, 5, -2, 1<<40)
	mustMerge(f, a, named(f, "bee", 1, math.MaxInt64))
	mustMerge(f, a, named(f, "c", 2, -7))
	for _, s := range []*Sharded{named(f, "x", 1), named(f, "local", 4, 1, 2), a} {
		f.Add(mustMarshal(f, s))
	}
	f.Add([]byte{formatShardedReplicated, 1, 'a', 1, 1, 2, 1, 1, 'a', 1, 2})
	f.Add([]byte{formatShardedReplicated, 1, 'a', 0, 1, 2, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		s, ok := checkDecode(t, data, func() *Sharded { return new(Sharded) },
			func() *Sharded { return named(t, "z", 2, 42, -1) }, true)
		if !ok {
			return
		}
		var sum i128
		for _, x := range s.Slots() {
			sum = sum.addInt64(x.Sum)
		}
		if sum.clamp() != s.Value() {
			t.Fatalf("Value() = %d, slots %v", s.Value(), s.Slots())
		}
		if s.Replica() == "" {
			return
		}
		// Merge laws hold for decoded states too.
		if changed, err := s.Merge(s.Clone()); changed || err != nil {
			t.Fatalf("decoded counter: self-merge changed %v, %v", changed, err)
		}
		other := named(t, "zz-other", 1, 3)
		before := other.Clone()
		mustMerge(t, other, s)
		if mustMerge(t, other, s) {
			t.Fatal("merge is not idempotent")
		}
		ab := s.Clone()
		mustMerge(t, ab, before)
		if !ab.Equal(other) || ab.Value() != other.Value() {
			t.Fatalf("merge is not commutative: %v vs %v", ab.Slots(), other.Slots())
		}
	})
}
