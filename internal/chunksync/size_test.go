package chunksync

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/counterd/counterd/internal/engine"
)

// syncCost pulls next into a target that holds prev's blobs and returns
// what moved.
func syncCost(t testing.TB, prev, next *Snapshot) Stats {
	t.Helper()
	target := &memTarget{have: prev}
	st, err := Pull(context.Background(), next, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// memTarget holds a snapshot's blobs plus what it received.
type memTarget struct {
	have *Snapshot
	got  map[Hash][]byte
}

func (m *memTarget) Has(h Hash) bool {
	_, ok := m.got[h]
	return ok || (m.have != nil && m.have.Has(h))
}

func (m *memTarget) put(h Hash, b []byte) {
	if m.got == nil {
		m.got = map[Hash][]byte{}
	}
	m.got[h] = b
}

func (m *memTarget) PutChunk(_ context.Context, h Hash, b []byte, _ []engine.State) error {
	m.put(h, b)
	return nil
}

func (m *memTarget) PutRange(_ context.Context, h Hash, b []byte) error {
	m.put(h, b)
	return nil
}

// TestOnePercentChangedMovesLittle: with 1% of the counters changed in runs
// of neighbouring ids, a sync moves at most 2% of the full state's bytes
// (manifest and ranges included). 1,000,000 counters; 200,000 under -short
// or the race detector, which slows the cut tenfold (the ratio does not
// depend on the count once it exceeds a few ranges). Scattered changes are
// measured too and only logged: they touch most chunks (BENCHMARKS.md).
func TestOnePercentChangedMovesLittle(t *testing.T) {
	n := 1_000_000
	if testing.Short() || raceEnabled {
		n = 200_000
	}
	r := rand.New(rand.NewPCG(1, 2))
	base := syntheticStates(n)
	prev, err := Build(base, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range patterns {
		idx := p.pick(r, n, 0.01)
		next, err := Build(changed(base, idx), Options{})
		if err != nil {
			t.Fatal(err)
		}
		st := syncCost(t, prev, next)
		ratio := float64(st.BytesFetched) / float64(st.FullBytes)
		t.Logf("%s: %d counters, %d changed: fetched %d of %d bytes (%.2f%%), %d of %d chunks, %d of %d ranges",
			p.name, n, len(idx), st.BytesFetched, st.FullBytes, 100*ratio, st.ChunksFetched, next.Chunks, st.RangesFetched, st.Ranges)
		if st.FullBytes != next.ChunkBytes || st.Keys != n {
			t.Fatalf("%s: manifest says %d keys, %d bytes; snapshot has %d, %d", p.name, st.Keys, st.FullBytes, n, next.ChunkBytes)
		}
		if st.ChunksFetched == 0 {
			t.Fatalf("%s: nothing fetched for %d changes", p.name, len(idx))
		}
		if p.keyed && ratio > 0.02 {
			t.Errorf("%s: sync moved %.2f%% of the full state, want <= 2%%", p.name, 100*ratio)
		}
	}
}

// TestBoundariesStable: changing values changes only the chunks holding
// them; inserting ids changes only their chunks' neighbourhood.
func TestBoundariesStable(t *testing.T) {
	base := syntheticStates(20_000)
	prev, err := Build(base, Options{ChunkKeys: 64})
	if err != nil {
		t.Fatal(err)
	}
	next, err := Build(changed(base, []int{10, 9_000, 19_000}), Options{ChunkKeys: 64})
	if err != nil {
		t.Fatal(err)
	}
	if st := syncCost(t, prev, next); st.ChunksFetched != 3 || next.Chunks != prev.Chunks {
		t.Fatalf("3 changed values: fetched %d chunks (want 3), chunks %d -> %d", st.ChunksFetched, prev.Chunks, next.Chunks)
	}
	// Remove every 1000th id: each removal changes its chunk, and at most
	// the next one when it was a boundary.
	var fewer []engine.State
	for i, s := range base {
		if i%1000 != 0 {
			fewer = append(fewer, s)
		}
	}
	next, err = Build(fewer, Options{ChunkKeys: 64})
	if err != nil {
		t.Fatal(err)
	}
	if st := syncCost(t, prev, next); st.ChunksFetched > 2*20 {
		t.Fatalf("20 removed ids changed %d chunks, want <= 40", st.ChunksFetched)
	}
}
