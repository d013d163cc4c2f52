package engine

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
	"pgregory.net/rapid"

	"github.com/counterd/counterd/internal/contract"
)

// The crash batches of atomic_crash_test.go with their marker as a
// dedupe mark (ApplyMarked) instead of a marker counter.
func markedBatch(n int) ([]contract.Op, string) {
	ops := crashBatch(n)
	return ops[:len(ops)-1], ops[len(ops)-1].ID
}

func sendMarkedBatches(t *testing.T, e *Engine, n int, wo contract.WriteOptions, stop func(i int) bool) []int {
	t.Helper()
	var ok []int
	for i := 0; i < n && !stop(i); i++ {
		ops, mark := markedBatch(i)
		err := e.ApplyMarked(bg, ops, []string{mark}, crashDedupeTTL, wo)
		switch {
		case i%7 == 6:
			var be *contract.BatchError
			if !errors.As(err, &be) || be.Index != len(ops) || !errors.Is(err, contract.ErrVersionConflict) {
				t.Fatalf("batch %d with a duplicate mark: %v", i, err)
			}
		case err != nil:
			t.Fatalf("batch %d: %v", i, err)
		default:
			ok = append(ok, i)
		}
	}
	return ok
}

// checkMarkedState opens cfg and checks that the batches whose marks are
// there are a prefix of applied and that the counters hold exactly their
// effects; it returns how many survived.
func checkMarkedState(t *testing.T, cfg Config, applied []int) int {
	t.Helper()
	e, err := Open(cfg)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer e.Close()
	var kept []int
	for _, n := range applied {
		if e.Marked(fmt.Sprint("_events:", n)) {
			kept = append(kept, n)
		}
	}
	for j := range kept {
		if kept[j] != applied[j] {
			t.Fatalf("the marks on disk are not a prefix of the batches applied: batch %d's is there, %d's is not", kept[j], applied[j])
		}
	}
	if m := e.MarkCount(); m != len(kept) {
		t.Fatalf("%d marks on disk, %d of them of applied batches", m, len(kept))
	}
	if len(kept) == 0 {
		if v, err := e.Get("total"); err == nil && v.Value != 0 {
			t.Fatalf("no mark survived, but total is %d", v.Value)
		}
		return 0
	}
	if v := mustGet(t, e, "total").Value; v != int64(len(kept)) {
		t.Fatalf("total %d, %d batches' marks survived", v, len(kept))
	}
	per := [3]int64{}
	for _, n := range kept {
		per[n%3]++
	}
	for k := range per {
		if per[k] == 0 {
			continue
		}
		if v := mustGet(t, e, fmt.Sprint("c", k)).Value; v != per[k] {
			t.Fatalf("c%d = %d, want %d from the surviving batches", k, v, per[k])
		}
	}
	fields := mustGet(t, e, "h").Fields
	if len(fields) != len(kept) {
		t.Fatalf("hash has %d fields, %d batches survived", len(fields), len(kept))
	}
	for _, n := range kept {
		found := false
		for _, f := range fields {
			found = found || (f.Name == fmt.Sprint("b", n) && f.Value == 1)
		}
		if !found {
			t.Fatalf("hash field b%d missing", n)
		}
	}
	if u := mustGet(t, e, "u").Value; math.Abs(float64(u)-float64(len(kept))) > 0.02*float64(len(kept))+1 {
		t.Fatalf("uniques %d, %d batches survived", u, len(kept))
	}
	return len(kept)
}

// TestApplyMarkedPowerLoss: as TestApplyAtomicPowerLoss, with the markers
// as dedupe marks: after a power loss at any point, a batch's effects and
// its mark are on disk both or neither, and a duplicate changes nothing.
func TestApplyMarkedPowerLoss(t *testing.T) {
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
		applied := sendMarkedBatches(t, e, 2000, contract.WriteOptions{}, func(i int) bool {
			if i == cut {
				fs.SetIgnoreSyncs(true)
			}
			if i%50 == 0 {
				time.Sleep(time.Millisecond)
			}
			return i > cut+200
		})
		e.Close()
		fs.ResetToSyncedState()
		fs.SetIgnoreSyncs(false)
		n := checkMarkedState(t, cfg, applied)
		t.Logf("round %d: power lost after batch %d; %d of %d applied batches survived", round, cut, n, len(applied))
	}
}

// TestApplyMarkedRestart: synced batches and their marks survive a restart;
// a batch naming a mark on disk fails and changes nothing; a failing op
// leaves no mark.
func TestApplyMarkedRestart(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Dir, cfg.FS = "/data", vfs.NewMem()
	e, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	applied := sendMarkedBatches(t, e, 40, contract.WriteOptions{Durability: contract.Sync}, func(int) bool { return false })
	// A wrong kind (PFADD to the counter "total") fails the batch: no mark.
	bad := []contract.Op{{Type: contract.OpAdd, ID: "total", Delta: 1}, {Type: contract.OpPFAdd, ID: "total", Items: [][]byte{[]byte("x")}}}
	var be *contract.BatchError
	if err := e.ApplyMarked(bg, bad, []string{"_events:bad"}, time.Hour, contract.WriteOptions{}); !errors.As(err, &be) || be.Index != 1 {
		t.Fatalf("batch with a wrong kind: %v", err)
	}
	if e.Marked("_events:bad") {
		t.Fatal("a failed batch left its mark")
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if n := checkMarkedState(t, cfg, applied); n != len(applied) {
		t.Fatalf("%d of %d synced batches survived a clean restart", n, len(applied))
	}
	e, err = Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ops, mark := markedBatch(applied[3])
	if err := e.ApplyMarked(bg, ops, []string{"_events:new", mark}, time.Hour, contract.WriteOptions{}); !errors.As(err, &be) || be.Index != len(ops)+1 || !errors.Is(err, contract.ErrVersionConflict) {
		t.Fatalf("batch naming a mark on disk: %v", err)
	}
	if v := mustGet(t, e, "total").Value; v != int64(len(applied)) {
		t.Fatalf("total %d after a refused batch, want %d", v, len(applied))
	}
	if e.Marked("_events:new") {
		t.Fatal("a refused batch left its other mark")
	}
}

// TestMarksExpire: a mark is remembered for its ttl, across a restart; the
// janitor's pass then forgets it and deletes its record, and the id can
// be marked again.
func TestMarksExpire(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC).UnixNano())
	cfg := DefaultConfig()
	cfg.Dir, cfg.FS = "/data", vfs.NewMem()
	cfg.Clock = func() time.Time { return time.Unix(0, now.Load()) }
	e, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	add := []contract.Op{{Type: contract.OpAdd, ID: "n", Delta: 1}}
	sync := contract.WriteOptions{Durability: contract.Sync}
	if err := e.ApplyMarked(bg, add, []string{"a", "b"}, time.Hour, sync); err != nil {
		t.Fatal(err)
	}
	now.Add(int64(30 * time.Minute))
	if err := e.ApplyMarked(bg, add, []string{"c"}, time.Hour, sync); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	records := func(e *Engine) int { return countKeys(t, e, prefixMarks) }
	now.Add(int64(45 * time.Minute)) // a and b expired, c not
	e, err = Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if e.Marked("a") || e.Marked("b") || !e.Marked("c") {
		t.Fatalf("after 75 minutes: a %v b %v c %v, want only c", e.Marked("a"), e.Marked("b"), e.Marked("c"))
	}
	if n := records(e); n != 2 {
		t.Fatalf("%d mark records before the janitor's pass, want 2", n)
	}
	if err := e.expireMarks(); err != nil {
		t.Fatal(err)
	}
	if n := records(e); n != 1 {
		t.Fatalf("%d mark records after it, want 1", n)
	}
	if err := e.ApplyMarked(bg, add, []string{"a"}, time.Hour, sync); err != nil {
		t.Fatalf("an expired mark made again: %v", err)
	}
	if v := mustGet(t, e, "n").Value; v != 3 {
		t.Fatalf("n = %d, want 3", v)
	}
	now.Add(int64(2 * time.Hour))
	if err := e.expireMarks(); err != nil {
		t.Fatal(err)
	}
	if n, m := records(e), e.MarkCount(); n != 0 || m != 0 {
		t.Fatalf("%d records and %d marks after every mark expired", n, m)
	}
	e.Close()
}

// TestMarkRecordRoundTrip: a record decodes to the marks written, and any
// bytes decode without a panic.
func TestMarkRecordRoundTrip(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ids := rapid.SliceOfN(rapid.StringN(1, 40, -1), 1, 30).Draw(rt, "ids")
		base := rapid.Int64Range(0, math.MaxInt64/2).Draw(rt, "base")
		var p []markEntry
		for _, id := range ids {
			p = append(p, markEntry{id, base + rapid.Int64Range(-1e15, 1e15).Draw(rt, "d"), hashMark(id)})
		}
		db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem()})
		if err != nil {
			rt.Fatal(err)
		}
		defer db.Close()
		b := db.NewIndexedBatch()
		defer b.Close()
		var s markSet
		r, err := s.write(b, p)
		if err != nil {
			rt.Fatal(err)
		}
		v, closer, err := b.Get(markKey(r.seq))
		if err != nil {
			rt.Fatal(err)
		}
		var got []markEntry
		if err := decodeMarks(v, func(id string, exp int64) { got = append(got, markEntry{id, exp, hashMark(id)}) }); err != nil {
			rt.Fatal(err)
		}
		closer.Close()
		if len(got) != len(p) {
			rt.Fatalf("%d marks decoded, %d written", len(got), len(p))
		}
		for i := range p {
			if got[i] != p[i] || r.ids[i] != hashMark(p[i].id) || r.maxExp < p[i].exp {
				rt.Fatalf("mark %d: %+v, wrote %+v (record max expiry %d)", i, got[i], p[i], r.maxExp)
			}
		}
		junk := rapid.SliceOf(rapid.Byte()).Draw(rt, "junk")
		_ = decodeMarks(junk, func(string, int64) {})
	})
}

func FuzzDecodeMarks(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 'a'})
	f.Fuzz(func(t *testing.T, v []byte) {
		n := 0
		err := decodeMarks(v, func(id string, _ int64) { n += len(id) })
		if err == nil && n > len(v) {
			t.Fatalf("%d bytes of ids from a %d-byte record", n, len(v))
		}
	})
}

// TestMarkTableModel: the open-addressing mark table agrees with a map
// after any sequence of puts, gets and deletes, with hashes drawn from a
// small range so that probe runs collide, wrap and shift back.
func TestMarkTableModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var tab markTable
		model := map[markHash]int64{}
		key := func() markHash {
			return markHash{rapid.Uint64Range(0, 300).Draw(rt, "a"), rapid.Uint64Range(0, 3).Draw(rt, "b") | 1}
		}
		steps := rapid.IntRange(1, 2000).Draw(rt, "steps")
		for range steps {
			h := key()
			switch rapid.IntRange(0, 2).Draw(rt, "op") {
			case 0:
				exp := rapid.Int64().Draw(rt, "exp")
				tab.put(h, exp)
				model[h] = exp
			case 1:
				tab.del(h)
				delete(model, h)
			}
			exp, ok := tab.get(h)
			if want, wok := model[h]; ok != wok || exp != want {
				rt.Fatalf("get %v = %d, %v; want %d, %v", h, exp, ok, want, wok)
			}
			if tab.n != len(model) {
				rt.Fatalf("%d marks, want %d", tab.n, len(model))
			}
		}
		for h, want := range model {
			if exp, ok := tab.get(h); !ok || exp != want {
				rt.Fatalf("get %v = %d, %v; want %d", h, exp, ok, want)
			}
		}
		for h := range model {
			tab.del(h)
			if _, ok := tab.get(h); ok {
				rt.Fatalf("%v still there after del", h)
			}
		}
		if tab.n != 0 {
			rt.Fatalf("%d marks after deleting all", tab.n)
		}
	})
}

// TestMarkedAllIsMarked: MarkedAll answers, for every mark of a list
// longer than its blocks, what Marked answers: marks applied, marks
// expired since, marks never applied.
func TestMarkedAllIsMarked(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	cfg := DefaultConfig()
	cfg.Dir, cfg.FS = "/data", vfs.NewMem()
	cfg.Clock = func() time.Time { return time.Unix(0, now.Load()) }
	e, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(0, 300).Draw(rt, "n")
		var marks, short, long []string
		for i := range n {
			m := fmt.Sprintf("m%d-%d", now.Load(), i)
			marks = append(marks, m)
			switch rapid.IntRange(0, 2).Draw(rt, "state") {
			case 0:
				short = append(short, m)
			case 1:
				long = append(long, m)
			}
		}
		add := []contract.Op{{Type: contract.OpAdd, ID: "n", Delta: 1}}
		if len(short) > 0 {
			if err := e.ApplyMarked(bg, add, short, time.Minute, contract.WriteOptions{}); err != nil {
				rt.Fatal(err)
			}
		}
		if len(long) > 0 {
			if err := e.ApplyMarked(bg, add, long, time.Hour, contract.WriteOptions{}); err != nil {
				rt.Fatal(err)
			}
		}
		now.Add(int64(2 * time.Minute)) // the short ones expired
		found := make([]bool, len(marks))
		Local(e).(MarkApplier).MarkedAll(marks, found)
		for i, m := range marks {
			if want := e.Marked(m); found[i] != want || want != slices.Contains(long, m) {
				rt.Fatalf("mark %d %q: MarkedAll %v, Marked %v, applied with an hour's ttl %v", i, m, found[i], want, slices.Contains(long, m))
			}
		}
	})
}
