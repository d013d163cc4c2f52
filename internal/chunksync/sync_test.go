package chunksync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/engine"
)

var bg = context.Background()

// openEngine opens an in-memory engine named node, closed with the test.
func openEngine(t testing.TB, node string) *engine.Engine {
	t.Helper()
	cfg := engine.DefaultConfig()
	cfg.InMemory = true
	cfg.NodeID = node
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := engine.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// kindOps are the mutations the property test draws, one per kind; each id
// keeps its kind (the first letter of the id names it).
var kindOps = map[byte]func(id string, n int64) contract.Op{
	'c': func(id string, n int64) contract.Op {
		return contract.Op{Type: contract.OpAdd, ID: id, Kind: contract.KindCounter, Delta: n}
	},
	'p': func(id string, n int64) contract.Op {
		return contract.Op{Type: contract.OpAdd, ID: id, Kind: contract.KindPN, Delta: n}
	},
	's': func(id string, n int64) contract.Op {
		return contract.Op{Type: contract.OpAdd, ID: id, Kind: contract.KindSharded, Delta: n}
	},
	'h': func(id string, n int64) contract.Op {
		return contract.Op{Type: contract.OpPFAdd, ID: id, Items: [][]byte{fmt.Appendf(nil, "item-%d", n)}}
	},
	'f': func(id string, n int64) contract.Op {
		return contract.Op{Type: contract.OpHAdd, ID: id, Fields: []counter.FieldDelta{{Name: fmt.Sprint("f", n%3), Delta: n}}}
	},
}

// writeSome applies drawn mutations to e, only of the kinds in kinds.
func writeSome(t *rapid.T, e *engine.Engine, label, kinds string) {
	n := rapid.IntRange(0, 60).Draw(t, label+"-n")
	for i := 0; i < n; i++ {
		k := kinds[rapid.IntRange(0, len(kinds)-1).Draw(t, label+"-kind")]
		id := fmt.Sprintf("%c:%03d", k, rapid.IntRange(0, 40).Draw(t, label+"-id"))
		op := kindOps[k](id, rapid.Int64Range(-5, 5).Draw(t, label+"-delta"))
		if _, err := e.Apply(bg, op, contract.WriteOptions{}); err != nil {
			t.Fatalf("apply %+v: %v", op, err)
		}
	}
}

// assertSameValues checks that every counter reads the same on a and b.
func assertSameValues(t testing.TB, a, b *engine.Engine) {
	t.Helper()
	ids := map[string]bool{}
	for _, e := range []*engine.Engine{a, b} {
		states, err := ExportSorted(bg, e)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range states {
			ids[s.ID] = true
		}
	}
	for id := range ids {
		va, err := a.Get(id)
		if err != nil {
			t.Fatal(err)
		}
		vb, err := b.Get(id)
		if err != nil {
			t.Fatal(err)
		}
		if va.Exists != vb.Exists || va.Kind != vb.Kind || va.Value != vb.Value || !slices.Equal(va.Fields, vb.Fields) {
			t.Fatalf("%s differs: %v %s %d %v vs %v %s %d %v", id, va.Exists, va.Kind, va.Value, va.Fields, vb.Exists, vb.Kind, vb.Value, vb.Fields)
		}
	}
}

// TestPullMakesStatesEqual (property): whatever a and b wrote, pulling a
// into an empty b, then a's later changes with a's previous snapshot as
// what b has, then b's own CRDT writes back into a, leaves both reading
// the same values; and the second pull fetches only chunks that changed.
func TestPullMakesStatesEqual(t *testing.T) {
	// Two engines emptied per case: opening Pebble per case is most of
	// the run time under the race detector.
	a, b := openEngine(t, "a"), openEngine(t, "b")
	rapid.Check(t, func(rt *rapid.T) {
		opts := Options{ChunkKeys: 1 << rapid.IntRange(0, 4).Draw(rt, "chunk-bits"), RangeChunks: 1 << rapid.IntRange(0, 3).Draw(rt, "range-bits")}
		for _, e := range []*engine.Engine{a, b} {
			if err := e.FlushAll(bg, contract.WriteOptions{}); err != nil || e.Len() != 0 {
				rt.Fatalf("flushall: %v, %d left", err, e.Len())
			}
		}
		writeSome(rt, a, "a1", "cpshf")
		first, err := FromEngine(bg, a, opts)
		if err != nil {
			rt.Fatal(err)
		}
		if _, err := Pull(bg, first, &EngineTarget{Engine: b}, nil); err != nil {
			rt.Fatal(err)
		}
		assertSameValues(t, a, b)

		writeSome(rt, a, "a2", "cpshf")
		second, err := FromEngine(bg, a, opts)
		if err != nil {
			rt.Fatal(err)
		}
		st, err := Pull(bg, second, &EngineTarget{Engine: b, Have: first}, nil)
		if err != nil {
			rt.Fatal(err)
		}
		if full := syncCost(t, first, second); st.ChunksFetched != full.ChunksFetched {
			rt.Fatalf("pull into the engine fetched %d chunks, a blob diff %d", st.ChunksFetched, full.ChunksFetched)
		}
		for _, r := range second.Ranges {
			if first.Has(r.Hash) {
				continue
			}
			rb, _ := second.Blob(r.Hash)
			refs, _ := DecodeRange(rb)
			for _, c := range refs {
				if first.Has(c.Hash) && !second.Has(c.Hash) {
					rt.Fatalf("chunk %s listed but not held", c.Hash)
				}
			}
		}
		assertSameValues(t, a, b)

		// b's own writes to the CRDT kinds come back by a full pull.
		writeSome(rt, b, "b", "psh")
		back, err := FromEngine(bg, b, opts)
		if err != nil {
			rt.Fatal(err)
		}
		if _, err := Pull(bg, back, &EngineTarget{Engine: a}, nil); err != nil {
			rt.Fatal(err)
		}
		assertSameValues(t, a, b)
	})
}

// TestRestoreIntoEmptyDir: a snapshot written to a directory and restored
// into an engine over an empty data directory reads the same everywhere;
// a second snapshot stores only the changed chunks.
func TestRestoreIntoEmptyDir(t *testing.T) {
	src := openEngine(t, "src")
	for i := 0; i < 3000; i++ {
		k := "cpshf"[i%5]
		op := kindOps[k](fmt.Sprintf("%c:restore:%05d", k, i), int64(i%7+1))
		if _, err := src.Apply(bg, op, contract.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dir := &Dir{Path: t.TempDir()}
	snap, err := FromEngine(bg, src, Options{ChunkKeys: 32})
	if err != nil {
		t.Fatal(err)
	}
	st, err := Pull(bg, snap, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dir.Commit(snap.ManifestBlob(), time.Now()); err != nil {
		t.Fatal(err)
	}
	if st.ChunksFetched != snap.Chunks {
		t.Fatalf("first snapshot wrote %d of %d chunks", st.ChunksFetched, snap.Chunks)
	}

	// One counter changes: the second snapshot writes one chunk and its
	// range.
	if _, err := src.Add(bg, "c:restore:00000", 100, contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	snap2, err := FromEngine(bg, src, Options{ChunkKeys: 32})
	if err != nil {
		t.Fatal(err)
	}
	dir2 := &Dir{Path: dir.Path}
	st2, err := Pull(bg, snap2, dir2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dir2.Commit(snap2.ManifestBlob(), time.Now()); err != nil {
		t.Fatal(err)
	}
	if st2.ChunksFetched != 1 || st2.RangesFetched != 1 {
		t.Fatalf("second snapshot after one change fetched %d chunks, %d ranges; want 1, 1", st2.ChunksFetched, st2.RangesFetched)
	}

	cfg := engine.DefaultConfig()
	cfg.Dir = t.TempDir()
	cfg.NodeID = "restored"
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	dst, err := engine.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Pull(bg, &Dir{Path: dir.Path}, &EngineTarget{Engine: dst, WO: contract.WriteOptions{Durability: contract.Sync}}, nil); err != nil {
		t.Fatal(err)
	}
	assertSameValues(t, src, dst)
	// And after a restart from that data directory.
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	dst = mustReopen(t, cfg)
	assertSameValues(t, src, dst)
	if dst.Len() != src.Len() {
		t.Fatalf("restored %d counters, source has %d", dst.Len(), src.Len())
	}
}

func mustReopen(t *testing.T, cfg engine.Config) *engine.Engine {
	t.Helper()
	e, err := engine.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// TestPullRejectsTamperedBlobs: a blob that does not hash to its address
// fails the pull with ErrCorrupt before anything of it is merged.
func TestPullRejectsTamperedBlobs(t *testing.T) {
	a := openEngine(t, "a")
	if _, err := a.Add(bg, "c:x", 5, contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	snap, err := FromEngine(bg, a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := openEngine(t, "b")
	_, err = Pull(bg, tampered{snap}, &EngineTarget{Engine: b}, nil)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("pull of tampered blobs: %v, want ErrCorrupt", err)
	}
	if b.Len() != 0 {
		t.Fatalf("tampered pull stored %d counters", b.Len())
	}
}

// tampered serves a snapshot whose chunks have one byte flipped.
type tampered struct{ *Snapshot }

func (s tampered) Fetch(ctx context.Context, h Hash) ([]byte, error) {
	b, err := s.Snapshot.Fetch(ctx, h)
	if err != nil || string(b[:4]) != magicChunk {
		return b, err
	}
	b = slices.Clone(b)
	b[len(b)-1] ^= 1
	return b, nil
}
