package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"pgregory.net/rapid"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
)

// TestWindowDeltaPowerLoss: windows flushed as a base and deltas
// (counter.Window.AppendDelta) read back as written whole. Random synced
// writes to a few window counters (event times old and new, TTLs set and
// removed, deletions, a window turned into a plain counter and back, a
// batch that fails and is undone), and after some a power loss: every
// counter reopens exactly as it was exported before (kind, version,
// times, state), and so does it after a clean close; deltas were written
// (a test of whole writes only proves nothing).
func TestWindowDeltaPowerLoss(t *testing.T) {
	deltas := 0
	rapid.Check(t, func(rt *rapid.T) {
		fs, cfg := syncedOnlyConfig(t)
		e := mustOpen(t, cfg)
		defer func() { e.Close() }()
		ids := []string{"w:a", "w:b", "w:c"}
		spec := counter.WindowSpec{Granularity: time.Second, Span: 8 * time.Second}
		sync := contract.WriteOptions{Durability: contract.Sync}
		for range rapid.IntRange(1, 30).Draw(rt, "steps") {
			id := rapid.SampledFrom(ids).Draw(rt, "id")
			now := time.Now()
			var ops []contract.Op
			switch rapid.IntRange(0, 9).Draw(rt, "step") {
			case 0:
				ops = []contract.Op{{Type: contract.OpDelete, ID: id}}
			case 1:
				ops = []contract.Op{{Type: contract.OpDelete, ID: id}, {Type: contract.OpAdd, ID: id, Delta: 3}}
			case 2:
				ttl := rapid.SampledFrom([]time.Duration{0, time.Hour}).Draw(rt, "ttl")
				ops = []contract.Op{{Type: contract.OpExpire, ID: id, TTL: ttl}}
			case 3: // a batch undone: its second op is of the wrong kind
				ops = []contract.Op{
					{Type: contract.OpAdd, ID: id, Kind: contract.KindWindow, Window: spec, Delta: 7},
					{Type: contract.OpPFAdd, ID: id, Items: [][]byte{[]byte("x")}},
				}
			default:
				for range rapid.IntRange(1, 3).Draw(rt, "adds") {
					at := now.Add(-time.Duration(rapid.IntRange(0, 9).Draw(rt, "age")) * time.Second)
					ops = append(ops, contract.Op{Type: contract.OpAdd, ID: id, Kind: contract.KindWindow, Window: spec,
						Delta: rapid.Int64Range(-2, 5).Draw(rt, "delta"), At: at.UnixNano()})
				}
			}
			e.ApplyAtomic(bg, ops, sync) // (errors: a wrong kind, too late, a missing counter)
			if !rapid.Bool().Draw(rt, "crash") {
				continue
			}
			deltas += countWindowDeltas(t, e)
			keptAcross(rt, &e, ids, "a power loss", powerLoss(t, fs, cfg))
		}
		keptAcross(rt, &e, ids, "a clean close", cleanClose(t, rt, cfg))
	})
	if deltas == 0 {
		t.Fatal("no window delta was on disk at a power loss")
	}
}

// TestWindowDeltaFailedFlush: a flush that wrote a window whole and
// was refused (free space below the reserve: nothing reached Pebble)
// leaves the window without a base: once space returns it is written
// whole again, not as a delta over a base that never reached the disk
// (which would lose the buckets written between the last stored base
// and the refused flush). After a power loss the window reads as it was.
func TestWindowDeltaFailedFlush(t *testing.T) {
	d := newTestDisk(t)
	var logs logBuf
	cfg := diskConfig(d, &logs)
	cfg.MinFreeDisk = 1 << 20
	t0 := time.Unix(1_700_000_000, 0)
	cfg.Clock = func() time.Time { return t0 }
	e := mustOpen(t, cfg)
	spec := counter.WindowSpec{Granularity: time.Second, Span: 8 * time.Second}
	add := func(wo contract.WriteOptions, ages ...int) {
		t.Helper()
		var ops []contract.Op
		for _, a := range ages {
			ops = append(ops, contract.Op{Type: contract.OpAdd, ID: "w", Kind: contract.KindWindow, Window: spec, Delta: 1, At: t0.Add(-time.Duration(a) * time.Second).UnixNano()})
		}
		if err := e.ApplyAtomic(bg, ops, wo); err != nil {
			t.Fatal(err)
		}
	}
	add(syncW, 7, 6, 5, 4) // the base
	add(syncW, 3)          // a delta
	if n := countWindowDeltas(t, e); n != 1 {
		t.Fatalf("%d deltas on disk, want 1", n)
	}
	// In memory only; then the flushes of the disk checks (the window
	// whole: 4 of 8 slots written since the base) are refused.
	add(asyncW, 2, 1, 0)
	flushes, failures := e.Stats().Flushes, e.Stats().FlushFailures
	d.avail.Store(100 << 10)
	waitFor(t, "two refused flushes", func() bool { return e.Stats().FlushFailures >= failures+2 })
	if e.Stats().Flushes != flushes {
		t.Fatal("a flush below the reserve was not refused")
	}
	d.avail.Store(1 << 30)
	waitFor(t, "writes to resume", func() bool { return e.Writable() == nil })
	add(syncW, 0)
	want := mustExport(t, e, "w")
	d.mem.SetIgnoreSyncs(true) // power loss
	e = reopenAfterPowerLoss(t, e, d.mem, cfg)
	defer e.Close()
	if got := mustExport(t, e, "w"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after a power loss: %v, want %v", got, want)
	}
	if v := mustGet(t, e, "w").Value; v != 9 {
		t.Fatalf("w = %d, want 9", v)
	}
}

// syncedOnlyConfig is an engine config on a strict in-memory /data (a
// power loss keeps only what was synced) whose only flushes are the
// synced writes' (FlushInterval an hour).
func syncedOnlyConfig(t testing.TB) (*vfs.MemFS, Config) {
	fs := strictMemDir(t, "/data")
	cfg := DefaultConfig()
	cfg.Dir, cfg.FS, cfg.NodeID = "/data", fs, "n1"
	cfg.FlushInterval = time.Hour
	return fs, cfg
}

// fataler is what the reopening helpers need of a test: a *testing.T or
// a *rapid.T.
type fataler interface {
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// exportIDs returns the states of ids that *e holds, read through e at
// call time (the tests reopen it).
func exportIDs(rt fataler, e **Engine, ids []string) map[string]State {
	m := map[string]State{}
	for _, id := range ids {
		if s, ok, err := (*e).Export(id); err != nil {
			rt.Fatal(err)
		} else if ok {
			m[id] = s
		}
	}
	return m
}

// keptAcross reopens *e after reopen (a power loss or a clean close) and
// fails unless it reads the states it read before.
func keptAcross(rt fataler, e **Engine, ids []string, what string, reopen func(*Engine) *Engine) {
	want := exportIDs(rt, e, ids)
	*e = reopen(*e)
	if got := exportIDs(rt, e, ids); fmt.Sprint(got) != fmt.Sprint(want) {
		rt.Fatalf("after %s:\n got %v\nwant %v", what, got, want)
	}
}

// cleanClose closes e and opens its directory again.
func cleanClose(t *testing.T, rt *rapid.T, cfg Config) func(*Engine) *Engine {
	return func(e *Engine) *Engine {
		if err := e.Close(); err != nil {
			rt.Fatal(err)
		}
		return mustOpen(t, cfg)
	}
}

// powerLoss loses what e had not synced and opens its directory again.
func powerLoss(t *testing.T, fs *vfs.MemFS, cfg Config) func(*Engine) *Engine {
	return func(e *Engine) *Engine { return reopenAfterPowerLoss(t, e, fs, cfg) }
}
