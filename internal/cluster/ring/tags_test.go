package ring

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// HashTag follows Redis Cluster's rule (the examples of the Cluster
// specification, "Hash tags").
func TestHashTag(t *testing.T) {
	for _, c := range []struct {
		id, tag string
		ok      bool
	}{
		{"{user1000}.following", "user1000", true},
		{"{user1000}.followers", "user1000", true},
		{"foo{}{bar}", "", false}, // the first '{' has an empty tag: the whole id
		{"foo{{bar}}zap", "{bar", true},
		{"foo{bar}{zap}", "bar", true},
		{"{user:1}:a", "user:1", true},
		{"user:1", "", false},
		{"}x{", "", false},
		{"x{", "", false},
		{"{", "", false},
		{"{}", "", false},
		{"a{b}", "b", true},
	} {
		tag, ok := HashTag(c.id)
		if tag != c.tag || ok != c.ok {
			t.Errorf("HashTag(%q) = %q, %v; want %q, %v", c.id, tag, ok, c.tag, c.ok)
		}
	}
}

// redisTag is Redis's keyHashSlot scan (cluster.c), returning the bytes it
// hashes.
func redisTag(key string) string {
	s := -1
	for i := 0; i < len(key); i++ {
		if key[i] == '{' {
			s = i
			break
		}
	}
	if s == -1 {
		return key
	}
	e := -1
	for i := s + 1; i < len(key); i++ {
		if key[i] == '}' {
			e = i
			break
		}
	}
	if e == -1 || e == s+1 {
		return key
	}
	return key[s+1 : e]
}

// HashTag hashes the bytes Redis hashes, for any id.
func TestHashTagProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		id := rapid.StringMatching(`[a-c{}:]{0,12}`).Draw(t, "id")
		if rapid.Bool().Draw(t, "any") {
			id = rapid.String().Draw(t, "anyid")
		}
		want := redisTag(id)
		tag, ok := HashTag(id)
		got := id
		if ok {
			got = tag
		}
		if got != want {
			t.Fatalf("HashTag(%q) places by %q, Redis by %q", id, got, want)
		}
		if TagHash(id) != Hash(want) {
			t.Fatalf("TagHash(%q) is not Hash(%q)", id, want)
		}
	})
}

// A ring that does not place by tag places every id as before hash tags
// (owners computed by the code before them), and one that does places ids
// without a tag the same way.
func TestPlacementWithoutTagsUnchanged(t *testing.T) {
	r := ringOf("node-1", "node-2", "node-3")
	rt := ringOf("node-1", "node-2", "node-3")
	rt.SetTags(rt.Nodes(), true)
	for _, c := range []struct{ id, owner string }{
		{"page_views:article_1", "node-3"},
		{"user:1", "node-3"},
		{"{user:1}:a", "node-2"},
		{"{user:1}:b", "node-3"},
		{"a{b}c", "node-1"},
		{"foo{}{bar}", "node-1"},
		{"foo{{bar}}zap", "node-2"},
		{"}x{", "node-3"},
		{"rl:{acct}", "node-1"},
		{"x", "node-2"},
	} {
		if o := r.Owner(c.id); o != c.owner {
			t.Errorf("untagged ring: owner of %q = %s, want %s", c.id, o, c.owner)
		}
		if _, tagged := HashTag(c.id); !tagged {
			if o := rt.Owner(c.id); o != c.owner {
				t.Errorf("tagged ring: owner of %q (no tag) = %s, want %s", c.id, o, c.owner)
			}
		}
	}
	if o := rt.Owner("{user:1}:a"); o != rt.Owner("{user:1}:b") || o != rt.Owner("user:1") {
		t.Errorf("tagged ring: {user:1}:a on %s, {user:1}:b on %s, user:1 on %s", o, rt.Owner("{user:1}:b"), rt.Owner("user:1"))
	}
}

// On a ring placing by tag, ids sharing a tag have one owner and the same
// replicas (the tag's alone's), and ids without one are placed as on a ring
// that does not; on one that does not, placement is Hash's.
func TestTagPlacementProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nodes := rapid.SliceOfNDistinct(rapid.StringMatching(`n[a-z0-9]{1,8}`), 1, 8, rapid.ID[string]).Draw(t, "nodes")
		vnodes := rapid.IntRange(1, 150).Draw(t, "vnodes")
		tag := rapid.StringMatching(`[a-z0-9:{]{1,10}`).Draw(t, "tag")
		affixes := rapid.SliceOfN(rapid.StringMatching(`[a-z0-9:{}]{0,8}`), 1, 10).Draw(t, "affixes")
		plain := rapid.SliceOfN(rapid.StringMatching(`[a-z0-9:}]{0,16}`), 1, 10).Draw(t, "plain") // no '{': no tag

		on, off := New(Config{VirtualNodes: vnodes}), New(Config{VirtualNodes: vnodes})
		on.SetTags(nodes, true)
		off.Set(nodes)
		s, so := on.Snapshot(), off.Snapshot()
		if !s.Tags() || so.Tags() {
			t.Fatalf("Tags(): %v, %v", s.Tags(), so.Tags())
		}
		wantOwner, wantReps := s.OwnerOfHash(Hash(tag)), s.Replicas(tag, 0)
		if _, ok := HashTag(tag); ok {
			t.Skip("tag holds a tag of its own")
		}
		for i, a := range affixes {
			prefix := ""
			if _, ok := HashTag(a); !ok && !slices.Contains([]byte(a), '{') {
				prefix = a // a prefix without '{' keeps the tag first
			}
			id := fmt.Sprintf("%s{%s}%s", prefix, tag, affixes[(i+1)%len(affixes)])
			if o := s.Owner(id); o != wantOwner {
				t.Fatalf("owner of %q = %s, of its tag %q %s", id, o, tag, wantOwner)
			}
			if r := s.Replicas(id, 0); !slices.Equal(r, wantReps) {
				t.Fatalf("replicas of %q = %v, of its tag %v", id, r, wantReps)
			}
			if o := so.Owner(id); o != so.OwnerOfHash(Hash(id)) {
				t.Fatalf("untagged ring: owner of %q = %s, not Hash's %s", id, o, so.OwnerOfHash(Hash(id)))
			}
		}
		for _, id := range plain {
			if s.Owner(id) != so.Owner(id) || !slices.Equal(s.Replicas(id, 0), so.Replicas(id, 0)) {
				t.Fatalf("%q (no tag) placed differently by tag", id)
			}
		}
	})
}

// Setting the placement is a change of the ring; Set keeps it.
func TestSetTagsVersion(t *testing.T) {
	r := ringOf("a", "b")
	v := r.Version()
	if r.SetTags([]string{"a", "b"}, false) || r.Version() != v {
		t.Fatalf("SetTags with nothing changed changed the ring (v%d -> v%d)", v, r.Version())
	}
	if !r.SetTags([]string{"a", "b"}, true) || r.Version() != v+1 || !r.Snapshot().Tags() {
		t.Fatalf("SetTags(true): version %d tags %v", r.Version(), r.Snapshot().Tags())
	}
	if !r.Set([]string{"a", "b", "c"}) || !r.Snapshot().Tags() {
		t.Fatal("Set dropped the placement by tag")
	}
	if !r.Add("d") || !r.Snapshot().Tags() || !r.Remove("d") || !r.Snapshot().Tags() {
		t.Fatal("Add/Remove dropped the placement by tag")
	}
	// Diff between the two placements finds the tagged ids that move.
	old := ringOf("a", "b", "c").Snapshot()
	ids := []string{"{t}:1", "{t}:2", "{t}:3", "{t}:4", "{t}:5", "{t}:6", "plain"}
	moves := Diff(old, r.Snapshot(), ids)
	for _, m := range moves {
		if m.ID == "plain" {
			t.Fatalf("an id without a tag moved: %+v", m)
		}
		if m.To != r.Owner("t") {
			t.Fatalf("%s moved to %s, its tag is on %s", m.ID, m.To, r.Owner("t"))
		}
	}
	if len(moves) == 0 {
		t.Fatal("no tagged id moved (six ids of one tag on three nodes)")
	}
}

// BenchmarkOwnerTags is BenchmarkOwner on a ring placing by hash tag, half
// of the ids holding one.
func BenchmarkOwnerTags(b *testing.B) {
	r := ringOf(nodeNames(10)...)
	r.SetTags(r.Nodes(), true)
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = testIDs[i]
		if i%2 == 0 {
			ids[i] = fmt.Sprintf("{user:%d}:page_views", i)
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		_ = r.Owner(ids[i%len(ids)])
		i++
	}
}
