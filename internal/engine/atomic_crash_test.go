package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
)

// The ApplyAtomic crash tests send batches shaped like the event
// pipeline's (internal/pipeline/consumer): increments, a hash field, an
// HLL element and the batch's marker counter (created with ExpectedVersion
// 0 and a TTL), one writer, so batch n is durable only if every batch
// before it is. Every seventh batch repeats the previous batch's marker and
// must fail, changing nothing. After a crash the markers on disk name the
// batches that survived; every other counter must hold exactly their
// effects: all of a batch or none of it, in order.

const crashDedupeTTL = 24 * time.Hour

func crashBatch(n int) []contract.Op {
	mk := n
	if n%7 == 6 {
		mk = n - 1 // a duplicate: the batch fails on it
	}
	return []contract.Op{
		{Type: contract.OpAdd, ID: "total", Delta: 1},
		{Type: contract.OpAdd, ID: fmt.Sprintf("c%d", n%3), Delta: 1},
		{Type: contract.OpHAdd, ID: "h", Fields: []counter.FieldDelta{{Name: fmt.Sprint("b", n), Delta: 1}}},
		{Type: contract.OpPFAdd, ID: "u", Items: [][]byte{fmt.Append(nil, "user", n)}},
		{Type: contract.OpSet, ID: fmt.Sprint("_events:", mk), Value: 1, CheckVersion: true, ExpectedVersion: 0, TTL: crashDedupeTTL},
	}
}

// sendCrashBatches applies batches 0..n-1 (stopping early when stop says
// so) and returns the numbers of those that applied.
func sendCrashBatches(t *testing.T, e *Engine, n int, wo contract.WriteOptions, stop func(i int) bool) []int {
	t.Helper()
	var ok []int
	for i := 0; i < n && !stop(i); i++ {
		err := e.ApplyAtomic(bg, crashBatch(i), wo)
		switch {
		case i%7 == 6:
			var be *contract.BatchError
			if !errors.As(err, &be) || be.Index != 4 || !errors.Is(err, contract.ErrVersionConflict) {
				t.Fatalf("batch %d with a duplicate marker: %v", i, err)
			}
		case err != nil:
			t.Fatalf("batch %d: %v", i, err)
		default:
			ok = append(ok, i)
		}
	}
	return ok
}

// checkCrashState opens cfg and checks that the batches whose markers are
// there are a prefix of applied, and that every other counter holds
// exactly their effects. It returns how many survived.
func checkCrashState(t *testing.T, cfg Config, applied []int) int {
	t.Helper()
	e, err := Open(cfg)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer e.Close()
	var kept []int
	for _, n := range applied {
		ttl, hasTTL, exists := e.TTL(fmt.Sprint("_events:", n))
		if !exists {
			continue
		}
		if !hasTTL || ttl <= 0 || ttl > crashDedupeTTL {
			t.Fatalf("marker of batch %d lost its TTL: %v %v", n, ttl, hasTTL)
		}
		kept = append(kept, n)
	}
	for j := range kept {
		if kept[j] != applied[j] {
			t.Fatalf("the markers on disk are not a prefix of the batches applied: batch %d's is there, %d's is not", kept[j], applied[j])
		}
	}
	// No marker of a batch that failed or was never sent.
	ids := map[string]bool{}
	if err := e.ExportAll(bg, func(s State) error {
		ids[s.ID] = true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	markers := 0
	for id := range ids {
		if strings.HasPrefix(id, "_events:") {
			markers++
		}
	}
	if markers != len(kept) {
		t.Fatalf("%d markers on disk, %d of them of applied batches", markers, len(kept))
	}
	if v := mustGet(t, e, "total").Value; v != int64(len(kept)) {
		t.Fatalf("total %d, %d batches' markers survived", v, len(kept))
	}
	per := [3]int64{}
	want := map[string]int64{}
	for _, n := range kept {
		per[n%3]++
		want[fmt.Sprint("b", n)] = 1
	}
	for k := range per {
		if v := mustGet(t, e, fmt.Sprint("c", k)).Value; v != per[k] {
			t.Fatalf("c%d = %d, want %d from the surviving batches", k, v, per[k])
		}
	}
	got := map[string]int64{}
	for _, f := range mustGet(t, e, "h").Fields {
		got[f.Name] = f.Value
	}
	if len(got) != len(want) {
		t.Fatalf("hash has %d fields, %d batches survived", len(got), len(want))
	}
	for name, v := range want {
		if got[name] != v {
			t.Fatalf("hash field %s = %d, want %d", name, got[name], v)
		}
	}
	if u := mustGet(t, e, "u").Value; math.Abs(float64(u)-float64(len(kept))) > 0.02*float64(len(kept))+1 {
		t.Fatalf("uniques %d, %d batches survived", u, len(kept))
	}
	return len(kept)
}

// TestApplyAtomicPowerLoss: the disk loses power (nothing written from then
// on is durable) at a different point of a stream of batches in each
// round, with the flusher writing every millisecond; after reopening, all
// of each batch's effects are there, its marker included, or none.
func TestApplyAtomicPowerLoss(t *testing.T) {
	for round := 0; round < 6; round++ {
		fs := strictMemDir(t, "/data")
		cfg := DefaultConfig()
		cfg.Dir, cfg.FS = "/data", fs
		cfg.FlushInterval = time.Millisecond
		e, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cut := 50 + round*97
		applied := sendCrashBatches(t, e, 2000, contract.WriteOptions{}, func(i int) bool {
			if i == cut {
				fs.SetIgnoreSyncs(true) // power loss: nothing from here on is durable
			}
			if i%50 == 0 {
				time.Sleep(time.Millisecond) // let flushes interleave
			}
			return i > cut+200
		})
		e.Close()
		fs.ResetToSyncedState()
		fs.SetIgnoreSyncs(false)
		n := checkCrashState(t, cfg, applied)
		if n > len(applied) {
			t.Fatalf("round %d: %d batches survived of %d", round, n, len(applied))
		}
		t.Logf("round %d: power lost after batch %d; %d of %d applied batches survived", round, cut, n, len(applied))
	}
}

// TestApplyAtomicTornWAL: batches made durable one by one (Sync) leave a
// WAL; reopening from copies of it cut at many byte offsets (a write torn
// anywhere) finds every batch whole or absent, as a prefix.
func TestApplyAtomicTornWAL(t *testing.T) {
	fs := vfs.NewMem()
	cfg := DefaultConfig()
	cfg.Dir, cfg.FS = "/data", fs
	e, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	applied := sendCrashBatches(t, e, 120, contract.WriteOptions{Durability: contract.Sync}, func(int) bool { return false })
	// Closed, the store's files are still: the batches are in the WAL
	// alone (a cut at 0 keeps none of them, checked below).
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	files, err := fs.List("/data")
	if err != nil {
		t.Fatal(err)
	}
	contents := map[string][]byte{}
	var wal string
	for _, name := range files {
		f, err := fs.Open(fs.PathJoin("/data", name))
		if err != nil {
			continue // a directory
		}
		b, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			continue
		}
		contents[name] = b
		if strings.HasSuffix(name, ".log") && (wal == "" || name > wal) {
			wal = name
		}
	}
	if wal == "" || len(contents[wal]) == 0 {
		t.Fatalf("no WAL among %v", files)
	}
	size := len(contents[wal])
	cuts := []int{0, size}
	for c := 1; c < 40; c++ {
		cuts = append(cuts, size*c/40+c%7) // spread, not aligned to records
	}
	sort.Ints(cuts)
	prev := -1
	for _, cut := range cuts {
		cut = min(cut, size)
		cfs := vfs.NewMem()
		if err := cfs.MkdirAll("/data", 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range contents {
			if name == wal {
				b = b[:cut]
			}
			f, err := cfs.Create(cfs.PathJoin("/data", name))
			if err != nil {
				t.Fatal(err)
			}
			// A copy: Pebble's MemFS scribbles over what it was given in
			// race builds (its invariants mode).
			if _, err := f.Write(bytes.Clone(b)); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
		ccfg := cfg
		ccfg.FS = cfs
		n := checkCrashState(t, ccfg, applied)
		if n < prev {
			t.Fatalf("WAL cut at %d of %d bytes keeps %d batches, a shorter cut kept %d", cut, size, n, prev)
		}
		prev = n
		if cut == size && n != len(applied) {
			t.Fatalf("the whole WAL keeps %d of %d synced batches", n, len(applied))
		}
		if cut == 0 && n != 0 {
			t.Fatalf("an empty WAL keeps %d batches: they are not in the WAL alone", n)
		}
	}
	t.Logf("WAL of %d bytes cut at %d points: 0..%d batches each, whole or absent", size, len(cuts), prev)
}
