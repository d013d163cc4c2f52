package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
)

// openNode opens a disk engine named node in dir; reopen with the same
// arguments after Close.
func openNode(t *testing.T, node, dir string, clk *fakeClock, mod ...func(*Config)) *Engine {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Dir, cfg.NodeID, cfg.Clock = dir, node, clk.Now
	cfg.FlushInterval = time.Hour
	for _, m := range mod {
		m(&cfg)
	}
	return mustOpen(t, cfg)
}

func newClock() *fakeClock { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }

func mustExport(t *testing.T, e *Engine, id string) State {
	t.Helper()
	s, ok, err := e.Export(id)
	if err != nil || !ok {
		t.Fatalf("export %q: ok %v, %v", id, ok, err)
	}
	return s
}

func mustMerge(t *testing.T, e *Engine, wo contract.WriteOptions, states ...State) int {
	t.Helper()
	n, err := e.Merge(bg, states, wo)
	if err != nil {
		t.Fatalf("merge into %s: %v", e.NodeID(), err)
	}
	return n
}

// sameView compares what a replica must reproduce of a counter.
func sameView(t *testing.T, what string, got, want contract.View) {
	t.Helper()
	got.Shards, want.Shards = nil, nil // each node has its own shards
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

func TestReplicaRoundTripEveryKind(t *testing.T) {
	clk := newClock()
	dirB := t.TempDir()
	a, b := openNode(t, "a", t.TempDir(), clk), openNode(t, "b", dirB, clk)
	if a.NodeID() != "a" || b.NodeID() != "b" {
		t.Fatal("NodeID")
	}
	ops := []contract.Op{
		{Type: contract.OpSet, ID: "c", Value: 41, TTL: time.Hour},
		{Type: contract.OpAdd, ID: "c", Delta: 1},
		{Type: contract.OpAdd, ID: "s", Kind: contract.KindSharded, Shards: 4, Delta: 5},
		{Type: contract.OpAdd, ID: "s", Kind: contract.KindSharded, Delta: -2},
		{Type: contract.OpAdd, ID: "p", Kind: contract.KindPN, Delta: 7},
		{Type: contract.OpAdd, ID: "p", Kind: contract.KindPN, Delta: -3},
		{Type: contract.OpPFAdd, ID: "u", Items: [][]byte{[]byte("x"), []byte("y"), []byte("z")}},
		{Type: contract.OpAdd, ID: "w", Kind: contract.KindWindow, Delta: 9},
		{Type: contract.OpHAdd, ID: "h", Fields: []counter.FieldDelta{{Name: "f", Delta: 2}, {Name: "g", Delta: -1}}},
	}
	for _, op := range ops {
		mustApply(t, a, op)
	}
	ids := []string{"c", "s", "p", "u", "w", "h"}
	for _, id := range ids {
		if n := mustMerge(t, b, contract.WriteOptions{}, mustExport(t, a, id)); n != 1 {
			t.Fatalf("merge of new %q changed %d", id, n)
		}
		sameView(t, id, mustGet(t, b, id), mustGet(t, a, id))
		if n := mustMerge(t, b, contract.WriteOptions{}, mustExport(t, a, id)); n != 0 {
			t.Fatalf("re-merge of %q changed %d", id, n)
		}
	}
	if _, ok, err := a.Export("missing"); ok || err != nil {
		t.Fatalf("export of a missing counter: %v %v", ok, err)
	}
	// The sharded counter: a's shards are a's slot on b, b's own are empty.
	if v := mustGet(t, b, "s"); v.Value != 3 || len(v.Shards) != 4 || slices.ContainsFunc(v.Shards, func(x int64) bool { return x != 0 }) {
		t.Fatalf("sharded on b: %+v", v)
	}
	// b writes to the CRDTs; a merges back and both agree.
	mustApply(t, b, contract.Op{Type: contract.OpAdd, ID: "s", Kind: contract.KindSharded, Delta: 10})
	mustApply(t, b, contract.Op{Type: contract.OpAdd, ID: "p", Kind: contract.KindPN, Delta: 10})
	mustApply(t, b, contract.Op{Type: contract.OpPFAdd, ID: "u", Items: [][]byte{[]byte("w")}})
	for _, id := range []string{"s", "p", "u"} {
		mustMerge(t, a, contract.WriteOptions{}, mustExport(t, b, id))
		va, vb := mustGet(t, a, id), mustGet(t, b, id)
		if va.Value != vb.Value || !slices.Equal(va.ShardSlots, vb.ShardSlots) || !slices.Equal(va.Replicas, vb.Replicas) {
			t.Fatalf("%q after merging back: a %+v, b %+v", id, va, vb)
		}
	}
	// Merged states are flushed like writes and survive a restart.
	want := map[string]contract.View{}
	for _, id := range ids {
		want[id] = mustGet(t, b, id)
	}
	b.Close()
	b = openNode(t, "b", dirB, clk)
	for _, id := range ids {
		sameView(t, id+" after restart", mustGet(t, b, id), want[id])
	}
	// ExportAll hands over everything.
	c := openNode(t, "c", t.TempDir(), clk)
	var all []State
	if err := b.ExportAll(bg, func(s State) error { all = append(all, s); return nil }); err != nil || len(all) != len(ids) {
		t.Fatalf("ExportAll: %d states, %v", len(all), err)
	}
	if n := mustMerge(t, c, contract.WriteOptions{}, all...); n != len(ids) {
		t.Fatalf("merge of ExportAll changed %d", n)
	}
	for _, id := range ids {
		got, w := mustGet(t, c, id), want[id]
		if got.Value != w.Value || got.Kind != w.Kind {
			t.Fatalf("%q on c: %+v, want %+v", id, got, w)
		}
	}
	stop := errors.New("stop")
	calls := 0
	if err := b.ExportAll(bg, func(State) error { calls++; return stop }); err != stop || calls != 1 {
		t.Fatalf("ExportAll stops at the first error: %v after %d calls", err, calls)
	}
}

// TestReplicaCRDTConverge: pn and sharded writes on three engines, states
// exchanged in a random order, stale and duplicated: all converge to the
// exact sum of the writes.
func TestReplicaCRDTConverge(t *testing.T) {
	clk := newClock()
	nodes := []*Engine{openNode(t, "n0", t.TempDir(), clk), openNode(t, "n1", t.TempDir(), clk), openNode(t, "n2", t.TempDir(), clk)}
	rng := rand.New(rand.NewPCG(1, 2))
	ids := map[string]contract.Kind{"pn": contract.KindPN, "sh": contract.KindSharded}
	total := map[string]int64{}
	var pool []State // every state ever exported, stale ones included
	for round := 0; round < 30; round++ {
		for _, e := range nodes {
			for id, k := range ids {
				d := rng.Int64N(2001) - 1000
				mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: id, Kind: k, Delta: d})
				total[id] += d
				pool = append(pool, mustExport(t, e, id))
			}
		}
		// Some gossip in between: a random subset of the pool to a random node.
		e := nodes[rng.IntN(len(nodes))]
		for i := rng.IntN(len(pool)); i < len(pool); i += 1 + rng.IntN(3) {
			mustMerge(t, e, contract.WriteOptions{}, pool[i])
		}
	}
	for _, e := range nodes {
		for id := range ids {
			pool = append(pool, mustExport(t, e, id))
		}
	}
	for _, e := range nodes {
		batch := append(slices.Clone(pool), pool[:len(pool)/2]...) // duplicated
		rng.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
		mustMerge(t, e, contract.WriteOptions{}, batch...)
	}
	for id := range ids {
		for _, e := range nodes {
			if v := mustGet(t, e, id); v.Value != total[id] {
				t.Fatalf("%s on %s = %d, want the sum of the writes %d", id, e.NodeID(), v.Value, total[id])
			}
		}
	}
}

func TestReplicaCounterVersions(t *testing.T) {
	clk := newClock()
	a, b := openNode(t, "a", t.TempDir(), clk), openNode(t, "b", t.TempDir(), clk)
	var states []State
	for i := 1; i <= 3; i++ {
		mustApply(t, a, contract.Op{Type: contract.OpAdd, ID: "k", Delta: 10})
		states = append(states, mustExport(t, a, "k"))
	}
	if n := mustMerge(t, b, contract.WriteOptions{}, states[2]); n != 1 || mustGet(t, b, "k").Value != 30 || mustGet(t, b, "k").Version != 3 {
		t.Fatalf("v3: %d %+v", n, mustGet(t, b, "k"))
	}
	if n := mustMerge(t, b, contract.WriteOptions{}, states[1], states[0], states[2]); n != 0 || mustGet(t, b, "k").Value != 30 {
		t.Fatalf("older or equal versions changed %d: %+v", n, mustGet(t, b, "k"))
	}
	// A tombstone below the local version is ignored, at or above deletes.
	res := mustApply(t, a, contract.Op{Type: contract.OpDelete, ID: "k"})
	if res.Version != 4 || res.Kind != contract.KindCounter {
		t.Fatalf("delete result %+v: want the tombstone version 4", res)
	}
	if n := mustMerge(t, b, contract.WriteOptions{}, State{ID: "k", Version: 2, Deleted: true}); n != 0 || !mustGet(t, b, "k").Exists {
		t.Fatal("old tombstone deleted")
	}
	if n := mustMerge(t, b, contract.WriteOptions{}, State{ID: "k", Kind: res.Kind, Version: res.Version, Deleted: true}); n != 1 || mustGet(t, b, "k").Exists {
		t.Fatal("tombstone did not delete")
	}
	if n := mustMerge(t, b, contract.WriteOptions{}, State{ID: "k", Version: 9, Deleted: true}); n != 0 || b.Len() != 0 {
		t.Fatal("tombstone of a missing counter created something")
	}
	// An expired state is a tombstone too.
	exp := states[2]
	exp.ExpiresAt = clk.Now().UnixNano()
	if n := mustMerge(t, b, contract.WriteOptions{}, exp); n != 0 || mustGet(t, b, "k").Exists {
		t.Fatal("expired state created a counter")
	}
	// Kind mismatch: the higher version wins whole.
	mustApply(t, b, contract.Op{Type: contract.OpHAdd, ID: "m", Fields: []counter.FieldDelta{{Name: "f", Delta: 1}}})
	mustApply(t, b, contract.Op{Type: contract.OpHAdd, ID: "m", Fields: []counter.FieldDelta{{Name: "f", Delta: 1}}})
	if n := mustMerge(t, b, contract.WriteOptions{}, State{ID: "m", Kind: contract.KindCounter, Version: 2, Data: []byte{2}}); n != 0 {
		t.Fatal("equal version of another kind replaced the hash")
	}
	if n := mustMerge(t, b, contract.WriteOptions{}, State{ID: "m", Kind: contract.KindCounter, Version: 5, Data: []byte{2}}); n != 1 {
		t.Fatal("higher version of another kind did not replace")
	}
	if v := mustGet(t, b, "m"); v.Kind != contract.KindCounter || v.Value != 1 || v.Version != 5 || len(v.Fields) != 0 {
		t.Fatalf("replaced: %+v", v)
	}
	// Drop only the version that was handed off.
	if ok, err := b.Drop(bg, "m", 4); ok || err != nil || !mustGet(t, b, "m").Exists {
		t.Fatalf("Drop of another version: %v %v", ok, err)
	}
	if ok, err := b.Drop(bg, "m", 5); !ok || err != nil || mustGet(t, b, "m").Exists {
		t.Fatalf("Drop: %v %v", ok, err)
	}
	if ok, err := b.Drop(bg, "m", 5); ok || err != nil {
		t.Fatalf("second Drop: %v %v", ok, err)
	}
}

// strictMemDir returns a filesystem that loses what was not synced when
// told to (SetIgnoreSyncs, ResetToSyncedState), with dir durably created.
func strictMemDir(t testing.TB, dir string) *vfs.MemFS {
	t.Helper()
	fs := vfs.NewStrictMem()
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := fs.OpenDir("/")
	if err != nil {
		t.Fatal(err)
	}
	root.Sync()
	root.Close()
	return fs
}

// reopenAfterPowerLoss closes e and reopens cfg's engine with only what
// fs had synced: the power loss that fs.SetIgnoreSyncs(true) began.
func reopenAfterPowerLoss(t testing.TB, e *Engine, fs *vfs.MemFS, cfg Config) *Engine {
	t.Helper()
	e.Close()
	fs.ResetToSyncedState()
	fs.SetIgnoreSyncs(false)
	return mustOpen(t, cfg)
}

// TestReplicaMergeSyncSurvivesCrash: a Sync merge is on disk when Merge
// returns; an Async one after it is lost by the same power loss.
func TestReplicaMergeSyncSurvivesCrash(t *testing.T) {
	src := openMem(t)
	mustApply(t, src, contract.Op{Type: contract.OpAdd, ID: "pn", Kind: contract.KindPN, Delta: 5})
	mustApply(t, src, contract.Op{Type: contract.OpAdd, ID: "sh", Kind: contract.KindSharded, Delta: 6})
	mustApply(t, src, contract.Op{Type: contract.OpSet, ID: "c", Value: 7})
	mustApply(t, src, contract.Op{Type: contract.OpAdd, ID: "late", Delta: 8})

	fs := strictMemDir(t, "/data")
	cfg := DefaultConfig()
	cfg.Dir, cfg.FS, cfg.NodeID = "/data", fs, "dst"
	cfg.FlushInterval = time.Hour // only sync writes reach disk
	e := mustOpen(t, cfg)
	var wg sync.WaitGroup
	for _, id := range []string{"pn", "sh", "c"} {
		s := mustExport(t, src, id)
		wg.Add(1)
		go func() { // concurrent sync merges share group commits
			defer wg.Done()
			if _, err := e.Merge(bg, []State{s}, contract.WriteOptions{Durability: contract.Sync}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	mustMerge(t, e, contract.WriteOptions{Durability: contract.Async}, mustExport(t, src, "late"))
	fs.SetIgnoreSyncs(true) // power loss
	e = reopenAfterPowerLoss(t, e, fs, cfg)
	for id, want := range map[string]int64{"pn": 5, "sh": 6, "c": 7} {
		if v := mustGet(t, e, id); v.Value != want {
			t.Fatalf("after the crash %q = %+v, want %d", id, v, want)
		}
	}
	if mustGet(t, e, "late").Exists {
		t.Fatal("the async merge survived the crash: the test does not simulate one")
	}
}

func TestReplicaMergeInvalid(t *testing.T) {
	e := openMem(t)
	mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: "x", Kind: contract.KindPN, Delta: 1})
	good := mustExport(t, e, "x")
	good.ID = "fresh"
	unnamed := counter.NewSharded(1)
	_ = unnamed.Add(0, 3)
	unnamedData, _ := unnamed.MarshalBinary()
	tests := []struct {
		name string
		bad  State
		want error
	}{
		{"bad id", State{ID: "", Kind: contract.KindCounter, Data: []byte{2}}, contract.ErrInvalidID},
		{"control byte", State{ID: "a\nb", Kind: contract.KindCounter, Data: []byte{2}}, contract.ErrInvalidID},
		{"unknown kind", State{ID: "k", Kind: 42, Data: []byte{2}}, contract.ErrInvalidArgument},
		{"kind none", State{ID: "k", Data: []byte{2}}, contract.ErrInvalidArgument},
		{"undecodable", State{ID: "k", Kind: contract.KindPN, Data: []byte{1, 2, 3}}, contract.ErrInvalidArgument},
		{"counter trailing bytes", State{ID: "k", Kind: contract.KindCounter, Data: []byte{2, 2}}, contract.ErrInvalidArgument},
		{"unnamed sharded", State{ID: "k", Kind: contract.KindSharded, Data: unnamedData}, contract.ErrInvalidArgument},
		{"negative expiry", State{ID: "k", Kind: contract.KindCounter, Data: []byte{2}, ExpiresAt: -1}, contract.ErrInvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, err := e.Merge(bg, []State{good, tc.bad}, contract.WriteOptions{Durability: contract.Sync})
			var se *StateError
			if !errors.Is(err, tc.want) || !errors.As(err, &se) || se.Index != 1 || n != 0 {
				t.Fatalf("Merge: %d, %v; want a StateError at 1 wrapping %v", n, err, tc.want)
			}
			if mustGet(t, e, "fresh").Exists || e.Len() != 1 {
				t.Fatal("an invalid batch merged something")
			}
		})
	}
	e.Close()
	if _, err := e.Merge(bg, []State{good}, contract.WriteOptions{}); !errors.Is(err, contract.ErrClosed) {
		t.Fatalf("merge after Close: %v", err)
	}
}

// TestReplicaConcurrent: merges and exports race with adds and the flusher
// (run with -race); the values still converge exactly.
func TestReplicaConcurrent(t *testing.T) {
	clk := newClock()
	fast := func(c *Config) { c.FlushInterval = time.Millisecond }
	a, b := openNode(t, "a", t.TempDir(), clk, fast), openNode(t, "b", t.TempDir(), clk, fast)
	ctx, cancel := context.WithCancel(bg)
	gossip := func(from, to *Engine) {
		for ctx.Err() == nil {
			if err := from.ExportAll(ctx, func(s State) error {
				_, err := to.Merge(ctx, []State{s}, contract.WriteOptions{})
				return err
			}); err != nil && ctx.Err() == nil {
				t.Error(err)
				return
			}
		}
	}
	var gw, wg sync.WaitGroup
	gw.Add(2)
	go func() { defer gw.Done(); gossip(a, b) }()
	go func() { defer gw.Done(); gossip(b, a) }()
	for _, e := range []*Engine{a, b} {
		for _, k := range []contract.Kind{contract.KindPN, contract.KindSharded} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 300; i++ {
					if _, err := e.Apply(bg, contract.Op{Type: contract.OpAdd, ID: k.String(), Kind: k, Delta: 1}, contract.WriteOptions{}); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	time.Sleep(10 * time.Millisecond)
	cancel()
	gw.Wait()
	for _, id := range []string{"pn", "sharded"} {
		mustMerge(t, a, contract.WriteOptions{}, mustExport(t, b, id))
		mustMerge(t, b, contract.WriteOptions{}, mustExport(t, a, id))
		if va, vb := mustGet(t, a, id).Value, mustGet(t, b, id).Value; va != 600 || vb != 600 {
			t.Fatalf("%s: a %d, b %d, want 600", id, va, vb)
		}
	}
}

// TestShardedOldDataIsLocal: a sharded counter stored before replication
// (format 0x11) loads as this node's slot.
func TestShardedOldDataIsLocal(t *testing.T) {
	clk := newClock()
	dir := t.TempDir()
	e := openNode(t, "me", dir, clk)
	old := []byte{entryFormat, byte(contract.KindSharded), 3, 0, 0, 0x11, 2, 10, 4} // shards 5, 2 at version 3
	if err := e.db.Set(append([]byte{prefixCounter}, "cold"...), old, nil); err != nil {
		t.Fatal(err)
	}
	e.Close()
	e = openNode(t, "me", dir, clk)
	v := mustGet(t, e, "cold")
	if v.Value != 7 || v.Version != 3 || !slices.Equal(v.Shards, []int64{5, 2}) ||
		!slices.Equal(v.ShardSlots, []counter.ShardedSlot{{Replica: "me", Sum: 7, Seq: 1}}) {
		t.Fatalf("old sharded data: %+v", v)
	}
	mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: "cold", Kind: contract.KindSharded, Shard: 2, Delta: 1})
	s := mustExport(t, e, "cold")
	other := openNode(t, "other", t.TempDir(), clk)
	mustMerge(t, other, contract.WriteOptions{}, s)
	if v := mustGet(t, other, "cold"); v.Value != 8 {
		t.Fatalf("merged elsewhere: %+v", v)
	}
}

// TestRaiseVersion: a raised version keeps the value and its low bits,
// survives a restart, beats any state of the old epoch on a replica, and
// is never lowered.
func TestRaiseVersion(t *testing.T) {
	clk := newClock()
	dir := t.TempDir()
	a := openNode(t, "a", dir, clk)
	b := openNode(t, "b", t.TempDir(), clk)
	if _, ok, err := a.RaiseVersion("missing", 1<<32); ok || err != nil {
		t.Fatalf("raise of a missing id: ok %v, %v", ok, err)
	}
	mustApply(t, a, contract.Op{Type: contract.OpAdd, ID: "k", Delta: 5})
	mustApply(t, a, contract.Op{Type: contract.OpAdd, ID: "k", Delta: 2})
	old := mustExport(t, a, "k") // version 2, epoch 0
	v, ok, err := a.RaiseVersion("k", 3<<32)
	if err != nil || !ok || v != 3<<32|2 {
		t.Fatalf("raise: %d %v %v, want %d", v, ok, err, uint64(3<<32|2))
	}
	if v, _, _ := a.RaiseVersion("k", 2<<32); v != 3<<32|2 {
		t.Fatalf("a lower floor changed the version to %d", v)
	}
	res := mustApply(t, a, contract.Op{Type: contract.OpAdd, ID: "k", Delta: 1})
	if res.Value != 8 || res.Version != 3<<32|3 {
		t.Fatalf("add after the raise: %+v", res)
	}
	// The old epoch's state with many more writes loses on a replica.
	mustMerge(t, b, contract.WriteOptions{}, mustExport(t, a, "k"))
	old.Version, old.Data = 1000, []byte{0x80, 0x7d} // value 8000 at version 1000, epoch 0
	if n := mustMerge(t, b, contract.WriteOptions{}, old); n != 0 || mustGet(t, b, "k").Value != 8 {
		t.Fatalf("an old-epoch state replaced the raised one: %+v", mustGet(t, b, "k"))
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	a = openNode(t, "a", dir, clk)
	if got := mustGet(t, a, "k"); got.Value != 8 || got.Version != 3<<32|3 {
		t.Fatalf("after reopen: %+v", got)
	}
}

// TestIdemRecords: the records on disk come back after a restart with the
// ids they wrote, filtered by creation time.
func TestIdemRecords(t *testing.T) {
	clk := newClock()
	dir := t.TempDir()
	e := openNode(t, "a", dir, clk)
	if _, err := e.Apply(bg, contract.Op{Type: contract.OpAdd, ID: "old", Delta: 1}, contract.WriteOptions{IdempotencyKey: "k-old", Durability: contract.Sync}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	since := clk.Now().UnixNano()
	if _, err := e.ApplyBatch(bg, []contract.Op{{Type: contract.OpAdd, ID: "p", Delta: 2, Kind: contract.KindPN}, {Type: contract.OpAdd, ID: "q", Delta: 1}, {Type: contract.OpAdd, ID: "p", Delta: 1}},
		contract.WriteOptions{IdempotencyKey: "k-new", Durability: contract.Sync}); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openNode(t, "a", dir, clk)
	var got []IdemRecord
	if err := e.IdemRecords(since, func(r IdemRecord) { got = append(got, r) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Key != "k-new" || !slices.Equal(got[0].IDs, []string{"p", "q"}) || len(got[0].Results) != 3 || got[0].Results[0].Kind != contract.KindPN {
		t.Fatalf("records since %d: %+v", since, got)
	}
}

// VersionOf reports what Export does (version and kind) for every kind,
// nothing for a missing or expired counter.
func TestVersionOfMatchesExport(t *testing.T) {
	clk := newClock()
	e := openNode(t, "a", t.TempDir(), clk)
	ops := []contract.Op{
		{Type: contract.OpSet, ID: "c", Value: 41, TTL: time.Hour},
		{Type: contract.OpAdd, ID: "c", Delta: 1},
		{Type: contract.OpAdd, ID: "p", Kind: contract.KindPN, Delta: 7},
		{Type: contract.OpPFAdd, ID: "u", Items: [][]byte{[]byte("x"), []byte("y")}},
		{Type: contract.OpAdd, ID: "w", Kind: contract.KindWindow, Delta: 9},
		{Type: contract.OpHAdd, ID: "h", Fields: []counter.FieldDelta{{Name: "f", Delta: 2}}},
	}
	for _, op := range ops {
		mustApply(t, e, op)
	}
	for _, id := range []string{"c", "p", "u", "w", "h"} {
		s := mustExport(t, e, id)
		v, kind, ok, err := e.VersionOf(id)
		if err != nil || !ok || v != s.Version || kind != s.Kind || v == 0 {
			t.Fatalf("VersionOf(%q) = %d %v %v %v, Export: version %d kind %v", id, v, kind, ok, err, s.Version, s.Kind)
		}
	}
	if _, _, ok, err := e.VersionOf("missing"); ok || err != nil {
		t.Fatalf("VersionOf of a missing counter: %v %v", ok, err)
	}
	clk.Advance(2 * time.Hour) // c's TTL passed
	if _, _, ok, err := e.VersionOf("c"); ok || err != nil {
		t.Fatalf("VersionOf of an expired counter: %v %v", ok, err)
	}
}
