package postgres

import (
	"testing"
	"time"
)

// TestApplyLives: deletes and deltas of a counter's lives apply by life,
// whatever the order their batches commit in (lives.go).
func TestApplyLives(t *testing.T) {
	s := newStore(t, Options{})
	ctx := ctxT(t, time.Minute)
	seq := 0
	apply := func(b Batch) {
		t.Helper()
		seq++
		b.ID = "lives-" + string(rune('a'+seq))
		if _, err := s.Apply(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	add := func(id string, d int64, life uint64) Delta {
		return Delta{CounterID: id, Kind: KindCounter, Shard: -1, Delta: d, Life: life}
	}
	del := func(id string, life uint64) Batch {
		return Batch{Deletes: []string{id}, DeadLives: map[string]uint64{id: life}}
	}
	state := func(id string) (int64, bool, uint64) {
		t.Helper()
		rec, ok, err := s.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return rec.Value, ok, rec.Life
	}

	// A delta of life 1 committed after the delete of life 1: dropped.
	apply(Batch{Deltas: []Delta{add("a", 5, 1)}})
	apply(del("a", 1))
	apply(Batch{Deltas: []Delta{add("a", 2, 1)}})
	if v, ok, _ := state("a"); ok {
		t.Fatalf("a = %d after its delete and a late delta of the deleted life, want missing", v)
	}
	if l, _, err := s.Lives(ctx, "a"); err != nil || l != 1 {
		t.Fatalf("Lives(a) = %d, %v; want a dead life of 1", l, err)
	}
	// The next life applies from scratch.
	apply(Batch{Deltas: []Delta{add("a", 3, 2)}})
	if v, ok, l := state("a"); !ok || v != 3 || l != 2 {
		t.Fatalf("a = %d, %v, life %d; want 3 of life 2", v, ok, l)
	}

	// The next life's delta before the delete of the old one: it replaces
	// the old life's row, and the late delete leaves it.
	apply(Batch{Deltas: []Delta{add("b", 10, 1)}})
	apply(Batch{Deltas: []Delta{add("b", 1, 2)}})
	apply(del("b", 1))
	apply(Batch{Deltas: []Delta{add("b", 4, 1)}}) // a late delta of life 1
	if v, ok, l := state("b"); !ok || v != 1 || l != 2 {
		t.Fatalf("b = %d, %v, life %d; want 1 of life 2", v, ok, l)
	}

	// One batch holding a delete and deltas of both lives.
	apply(Batch{Deltas: []Delta{add("c", 7, 1)}})
	apply(Batch{Deltas: []Delta{add("c", 1, 1), add("c", 2, 2)}, Deletes: []string{"c"}, DeadLives: map[string]uint64{"c": 1}})
	if v, ok, l := state("c"); !ok || v != 2 || l != 2 {
		t.Fatalf("c = %d, %v, life %d; want 2 of life 2", v, ok, l)
	}

	// Changes of no known life (life 0) apply as before.
	apply(Batch{Deltas: []Delta{add("d", 1, 0)}})
	apply(Batch{Deletes: []string{"d"}})
	apply(Batch{Deltas: []Delta{add("d", 6, 0)}})
	if v, ok, _ := state("d"); !ok || v != 6 {
		t.Fatalf("d = %d, %v; want 6", v, ok)
	}

	// Deaths are purged after DeathRetention.
	if n, err := s.PurgeDeaths(ctx, time.Now().Add(DeathRetention+time.Minute)); err != nil || n < 3 {
		t.Fatalf("PurgeDeaths = %d, %v; want at least 3", n, err)
	}
	if l, _, err := s.Lives(ctx, "a"); err != nil || l != 0 {
		t.Fatalf("Lives(a) after the purge = %d, %v; want a dead life of 0", l, err)
	}
}
