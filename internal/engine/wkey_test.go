package engine

import (
	"testing"
	"time"

	"github.com/cockroachdb/pebble"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
)

// wDeletes counts the 'w' key deletions of the last flush's counters.
func wDeletes(e *Engine) int {
	n := 0
	kv := &e.fl.kv
	for _, en := range kv.ents {
		if en.del && kv.buf[en.k] == prefixWindowDelta {
			n++
		}
	}
	return n
}

// TestWindowWholeWKeyDelete: a flush that writes a window whole deletes
// its 'w' key only when it may have one: one its delta moved to, one read
// at load, or one of its id that no loaded counter matched (an orphan);
// windows that never had one (most: a consumer's per-user windows are
// written whole every few flushes) cost no delete. Each kind of 'w' key
// is gone after the whole write and the window reads the same after a
// power loss.
func TestWindowWholeWKeyDelete(t *testing.T) {
	fs, cfg := syncedOnlyConfig(t)
	e := mustOpen(t, cfg)
	defer func() { e.Close() }()
	spec := counter.WindowSpec{Granularity: time.Second, Span: 64 * time.Second}
	now := time.Now()
	add := func(at int, ids ...string) {
		t.Helper()
		var ops []contract.Op
		for _, id := range ids {
			ops = append(ops, contract.Op{Type: contract.OpAdd, ID: id, Kind: contract.KindWindow, Window: spec, Delta: 1, At: now.Add(-time.Duration(at) * time.Second).UnixNano()})
		}
		if err := e.ApplyAtomic(bg, ops, syncW); err != nil {
			t.Fatal(err)
		}
	}
	// whole: enough buckets written for the window to be written whole.
	whole := func(ids ...string) {
		t.Helper()
		for at := range 20 {
			for _, id := range ids {
				if err := e.ApplyAtomic(bg, []contract.Op{{Type: contract.OpAdd, ID: id, Kind: contract.KindWindow, Window: spec, Delta: 1, At: now.Add(-time.Duration(at) * time.Second).UnixNano()}}, asyncW); err != nil {
					t.Fatal(err)
				}
			}
		}
		if _, err := e.ApplyBatch(bg, []contract.Op{{Type: contract.OpAdd, ID: "flush", Delta: 1}}, syncW); err != nil {
			t.Fatal(err)
		}
	}

	// Windows that never had a 'w' key: created, then written whole again.
	var plain []string
	for k := range 50 {
		plain = append(plain, "plain"+string(rune('a'+k%26))+string(rune('a'+k/26)))
	}
	add(0, plain...)
	if n := wDeletes(e); n != 0 {
		t.Errorf("%d new windows written whole deleted %d 'w' keys, want none", len(plain), n)
	}
	whole(plain...)
	if n := wDeletes(e); n != 0 {
		t.Errorf("%d windows written whole again deleted %d 'w' keys, want none", len(plain), n)
	}

	// a: its delta moved to its 'w' key (copied deltaRecAge times).
	ids := sameShardIDs(7, 2)
	a, b := ids[0], ids[1]
	add(0, a, b)
	add(1, a) // a's delta into the record
	for range deltaRecAge + 1 {
		add(0, b) // a copied, then moved to its 'w' key
	}
	if keys, _ := diskDeltas(t, e); !keys[a] {
		t.Fatalf("%s has no 'w' key after %d idle rewrites", a, deltaRecAge+1)
	}
	// c: the same, then written whole in the same run.
	ids = sameShardIDs(8, 2)
	c, d := ids[0], ids[1]
	add(0, c, d)
	add(1, c)
	for range deltaRecAge + 1 {
		add(0, d)
	}
	whole(c)
	if n := wDeletes(e); n != 1 {
		t.Errorf("the whole write of a window whose delta moved to its 'w' key deleted %d 'w' keys, want 1", n)
	}
	if keys, _ := diskDeltas(t, e); keys[c] {
		t.Fatalf("%s: 'w' key left after its whole write", c)
	}

	// o: an orphan 'w' key (of a window whose counter is gone), o2 one
	// of a window loaded with it.
	add(0, "o")
	add(1, "o")
	r, _, _ := e.acquire("o", false)
	stale := windowOf(r.e).AppendDelta(appendHeader(nil, r.e))
	r.e.unlock()
	add(0, "o2")
	add(1, "o2")
	r, _, _ = e.acquire("o2", false)
	old := windowOf(r.e).AppendDelta(appendHeader(nil, r.e))
	r.e.unlock()
	if _, err := e.ApplyBatch(bg, []contract.Op{{Type: contract.OpDelete, ID: "o"}}, syncW); err != nil {
		t.Fatal(err)
	}
	for id, v := range map[string][]byte{"o": stale, "o2": old} {
		if err := e.db.Set([]byte("w"+id), v, pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	e = reopenAfterPowerLoss(t, e, fs, cfg)
	want := map[string]int64{a: mustGet(t, e, a).Value, c: mustGet(t, e, c).Value, "o2": mustGet(t, e, "o2").Value}
	if v := mustGet(t, e, "o").Value; v != 0 {
		t.Fatalf("o = %d, deleted", v)
	}

	whole(a, "o", "o2", plain[0])
	want[a] += 20
	want["o"] = 20
	want["o2"] += 20
	if n := wDeletes(e); n != 3 {
		t.Errorf("the whole writes of 3 windows with 'w' keys and 1 without deleted %d 'w' keys, want 3", n)
	}
	if keys, _ := diskDeltas(t, e); keys[a] || keys["o"] || keys["o2"] {
		t.Fatalf("'w' keys left after the whole writes: %s %v, o %v, o2 %v", a, keys[a], keys["o"], keys["o2"])
	}
	fs.SetIgnoreSyncs(true)
	e = reopenAfterPowerLoss(t, e, fs, cfg)
	for id, v := range want {
		if got := mustGet(t, e, id).Value; got != v {
			t.Errorf("%s = %d after a power loss, want %d", id, got, v)
		}
	}
	// Written whole again: no 'w' key left to delete.
	whole(a, "o", "o2")
	if n := wDeletes(e); n != 0 {
		t.Errorf("windows whose 'w' keys are gone deleted %d again, want none", n)
	}
}
