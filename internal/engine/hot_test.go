package engine

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/counterd/counterd/internal/contract"
	"pgregory.net/rapid"
)

// heatForTest makes the plain counter id hot, as a contended add would;
// false if id is not a plain counter.
func (e *Engine) heatForTest(id string) bool {
	r, ok, _ := e.acquire(id, false)
	if !ok {
		return false
	}
	defer r.e.unlock()
	if !r.e.plainCounter() {
		return false
	}
	r.e.heat(r.sh, r.idx, &e.hot)
	return true
}

// isHot reports whether id has a hot state now.
func (e *Engine) isHot(id string) bool {
	h := hashID(id)
	sh := &e.shards[shardOf(h)]
	_, en, _, ok := sh.find(id, h)
	return ok && en.hotOf() != nil
}

// errClass names the sentinel an engine error wraps, so two engines'
// errors compare without their messages.
func errClass(err error) string {
	for _, s := range []error{contract.ErrOverflow, contract.ErrWrongKind, contract.ErrVersionConflict, contract.ErrNotInteger, contract.ErrFloatRange,
		contract.ErrIdempotencyReuse, contract.ErrInvalidArgument, contract.ErrInvalidID, contract.ErrNotFound} {
		if errors.Is(err, s) {
			return s.Error()
		}
	}
	if err != nil {
		return "other: " + err.Error()
	}
	return ""
}

// addRec is one add of a concurrent burst: its delta and its result.
type addRec struct {
	delta int64
	res   contract.Result
}

// checkLinear checks that the results of a burst of adds form one
// sequential history from (v0, ver0): versions ver0+1.. without gaps or
// repeats, each add's value its predecessor's plus its delta.
func checkLinear(fatalf func(string, ...any), v0 int64, ver0 uint64, recs []addRec) {
	slices.SortFunc(recs, func(a, b addRec) int { return cmp.Compare(a.res.Version, b.res.Version) })
	v := v0
	for k, r := range recs {
		v += r.delta
		if r.res.Version != ver0+uint64(k)+1 || r.res.Value != v {
			fatalf("add %d of the burst (from value %d version %d): got value %d version %d, want %d version %d",
				k, v0, ver0, r.res.Value, r.res.Version, v, ver0+uint64(k)+1)
		}
	}
}

// TestHotCounterAddsStayHot: adds to a hot counter take the hot path (the
// counter stays hot), return exact values and versions, Get reads them
// and leaves the counter hot, and a fold (an export here) gives the same
// value and version.
func TestHotCounterAddsStayHot(t *testing.T) {
	e := openMem(t)
	mustAdd := func(d int64) contract.Result {
		t.Helper()
		r, err := e.Add(bg, "k", d, contract.WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	mustAdd(5)
	if !e.heatForTest("k") {
		t.Fatal("a plain counter did not turn hot")
	}
	for i := range 100 {
		r := mustAdd(2)
		if r.Value != 5+2*int64(i+1) || r.Version != uint64(i+2) || r.Kind != contract.KindCounter || !r.Changed {
			t.Fatalf("hot add %d: %+v", i, r)
		}
	}
	if !e.isHot("k") {
		t.Fatal("adds cooled a hot counter")
	}
	v := mustGet(t, e, "k")
	if v.Value != 205 || v.Version != 101 {
		t.Fatalf("read of a hot counter: %+v", v)
	}
	if !e.isHot("k") {
		t.Fatal("Get folded a hot counter")
	}
	// Any other holder of the lock folds it: the same counter.
	if s := mustExport(t, e, "k"); s.Version != 101 || e.isHot("k") {
		t.Fatalf("export of a hot counter: %+v, hot %v", s, e.isHot("k"))
	}
	if w := mustGet(t, e, "k"); fmt.Sprint(w) != fmt.Sprint(v) {
		t.Fatalf("folded: %+v, hot read %+v", w, v)
	}
	// Other kinds and counters with a TTL do not turn hot.
	mustApply(t, e, contract.Op{Type: contract.OpSet, ID: "ttl", Value: 1, TTL: time.Hour})
	mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: "pn", Kind: contract.KindPN, Delta: 1})
	if e.heatForTest("ttl") || e.heatForTest("pn") || e.heatForTest("missing") {
		t.Fatal("a counter that is not plain turned hot")
	}
}

// TestHotCounterLimitsExact: on a hot counter an add that would overflow
// int64 fails with ErrOverflow and changes nothing, deltas too large for
// the hot word and a full add count fall back to the locked path with the
// same result, and the version counts every add across all of it.
func TestHotCounterLimitsExact(t *testing.T) {
	e := openMem(t)
	mustApply(t, e, contract.Op{Type: contract.OpSet, ID: "k", Value: math.MaxInt64 - 10})
	ver := mustGet(t, e, "k").Version
	e.heatForTest("k")
	for i := range 10 {
		r, err := e.Add(bg, "k", 1, contract.WriteOptions{})
		if err != nil || r.Value != math.MaxInt64-9+int64(i) || r.Version != ver+uint64(i)+1 {
			t.Fatalf("add %d near the top: %+v %v", i, r, err)
		}
	}
	if _, err := e.Add(bg, "k", 1, contract.WriteOptions{}); !errors.Is(err, contract.ErrOverflow) {
		t.Fatalf("overflowing add on a hot counter: %v", err)
	}
	if v := mustGet(t, e, "k"); v.Value != math.MaxInt64 || v.Version != ver+10 {
		t.Fatalf("after the overflow: %+v (version want %d)", v, ver+10)
	}
	// Large deltas: outside the hot word's sum, taken by the locked path.
	mustApply(t, e, contract.Op{Type: contract.OpSet, ID: "k", Value: 0})
	ver = mustGet(t, e, "k").Version
	e.heatForTest("k")
	want := int64(0)
	for i, d := range []int64{1 << 40, -(1 << 50), hotSumMax, hotSumMax, hotSumMin, 3, math.MinInt64 / 2} {
		want += d
		r, err := e.Add(bg, "k", d, contract.WriteOptions{})
		if err != nil || r.Value != want || r.Version != ver+uint64(i)+1 {
			t.Fatalf("add %d of %d: %+v %v, want %d", i, d, r, err, want)
		}
	}
	// A full add count: the next add falls back and is still exact.
	r0 := mustGet(t, e, "k")
	e.heatForTest("k")
	h := e.hotOfForTest("k")
	h.w.Store(hotCountMask - 1) // as if 2^24-2 adds of 0 had been taken
	r1, err1 := e.Add(bg, "k", 1, contract.WriteOptions{})
	r2, err2 := e.Add(bg, "k", 1, contract.WriteOptions{})
	if err1 != nil || err2 != nil || r1.Version != r0.Version+uint64(hotCountMask) || r2.Version != r1.Version+1 ||
		r1.Value != r0.Value+1 || r2.Value != r0.Value+2 {
		t.Fatalf("at the count limit: %+v %v, %+v %v (from %+v)", r1, err1, r2, err2, r0)
	}
}

// hotOfForTest returns id's hot state, nil if it is not hot.
func (e *Engine) hotOfForTest(id string) *hotCtr {
	h := hashID(id)
	_, en, _, ok := e.shards[shardOf(h)].find(id, h)
	if !ok {
		return nil
	}
	return en.hotOf()
}

// TestHotCounterConcurrentAdds (run it under -race): goroutines adding to
// one counter, hot for most of the run (re-heated, read, flushed and
// cooled meanwhile), are all counted, their results form one sequential
// history, and reads in between see the value and version only grow.
func TestHotCounterConcurrentAdds(t *testing.T) {
	e := openMem(t)
	const workers, per = 4, 3000
	var wg sync.WaitGroup
	stop := make(chan struct{})
	recs := make([][]addRec, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := int64(w + 1)
			for range per {
				r, err := e.Add(bg, "hot", d, contract.WriteOptions{})
				if err != nil {
					t.Error(err)
					return
				}
				recs[w] = append(recs[w], addRec{d, r})
			}
		}()
	}
	var side sync.WaitGroup
	side.Add(1)
	go func() { // reads must be monotonic; heat and flush meanwhile
		defer side.Done()
		var last contract.View
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			switch i % 3 {
			case 0:
				e.heatForTest("hot")
			case 1:
				v := mustGetE(t, e, "hot")
				if v.Value < last.Value || v.Version < last.Version {
					t.Errorf("read went back: %+v after %+v", v, last)
					return
				}
				last = v
			case 2:
				if i%30 == 2 {
					if err := e.Flush(bg); err != nil {
						t.Error(err)
					}
				}
			}
			runtime.Gosched()
		}
	}()
	wg.Wait()
	close(stop)
	side.Wait()
	var all []addRec
	var sum int64
	for w := range workers {
		all = append(all, recs[w]...)
		sum += int64(w+1) * per
	}
	checkLinear(t.Fatalf, 0, 0, all)
	if v := mustGet(t, e, "hot"); v.Value != sum || v.Version != workers*per {
		t.Fatalf("after the run: %+v, want value %d version %d", v, sum, workers*per)
	}
	if n := e.Stats().Ops; n != workers*per {
		t.Fatalf("Stats.Ops %d, want %d", n, workers*per)
	}
}

func mustGetE(t *testing.T, e *Engine, id string) contract.View {
	v, err := e.Get(id)
	if err != nil {
		t.Error(err)
	}
	return v
}

// TestHotCountersMatchUnstriped runs random sequences of adds (single,
// and concurrent bursts), reads, sets, sets with a version, TTLs, clock
// steps, deletes, float and idempotent and sync writes, exports, flushes
// and restarts against two engines, one with hot counters (made hot at
// random, and by contention in the bursts) and one without: every result,
// error, view and exported state must be the same, and every burst's
// results one sequential history.
func TestHotCountersMatchUnstriped(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		clk := newClock()
		open := func(fs vfs.FS, noHot bool) *Engine {
			cfg := DefaultConfig()
			cfg.FS, cfg.Dir, cfg.NodeID, cfg.Clock = fs, "db", "n1", clk.Now
			cfg.FlushInterval = time.Hour
			e, err := Open(cfg)
			if err != nil {
				rt.Fatal(err)
			}
			e.noHot = noHot
			return e
		}
		fsH, fsR := vfs.NewMem(), vfs.NewMem()
		hot, ref := open(fsH, false), open(fsR, true)
		defer func() { hot.Close(); ref.Close() }()
		ids := []string{"a", "b", "c"}
		genID := rapid.SampledFrom(ids)
		genDelta := rapid.OneOf(
			rapid.Int64Range(-5, 5),
			rapid.SampledFrom([]int64{1 << 40, -(1 << 40), hotSumMax, hotSumMin, math.MaxInt64, math.MinInt64, math.MaxInt64 / 2}),
		)
		genValue := rapid.OneOf(
			rapid.Int64Range(-100, 100),
			rapid.SampledFrom([]int64{math.MaxInt64, math.MaxInt64 - 3, math.MinInt64, math.MinInt64 + 3, hotSumMax}),
		)
		same := func(what string, a, b any) {
			if fa, fb := fmt.Sprintf("%+v", a), fmt.Sprintf("%+v", b); fa != fb {
				rt.Fatalf("%s:\n hot %s\n ref %s", what, fa, fb)
			}
		}
		apply := func(op contract.Op, wo contract.WriteOptions) {
			if rapid.Bool().Draw(rt, "heat first") {
				hot.heatForTest(op.ID)
			}
			rh, eh := hot.Apply(bg, op, wo)
			rr, er := ref.Apply(bg, op, wo)
			same(fmt.Sprintf("%+v", op), []any{rh, errClass(eh)}, []any{rr, errClass(er)})
		}
		for step := 0; step < 40; step++ {
			switch rapid.IntRange(0, 13).Draw(rt, "op") {
			case 0, 1: // add, through Add (the plain path)
				id, d := genID.Draw(rt, "id"), genDelta.Draw(rt, "delta")
				if rapid.Bool().Draw(rt, "heat first") {
					hot.heatForTest(id)
				}
				rh, eh := hot.Add(bg, id, d, contract.WriteOptions{})
				rr, er := ref.Add(bg, id, d, contract.WriteOptions{})
				same(fmt.Sprintf("add %q %d", id, d), []any{rh, errClass(eh)}, []any{rr, errClass(er)})
			case 2: // a concurrent burst on a counter far from the limits
				id := genID.Draw(rt, "id")
				v := mustGetR(rt, ref, id)
				if (v.Exists && v.Kind != contract.KindCounter) || v.Value > 1<<50 || v.Value < -(1<<50) {
					continue
				}
				workers, per := rapid.IntRange(2, 4).Draw(rt, "workers"), rapid.IntRange(1, 200).Draw(rt, "per")
				hot.heatForTest(id)
				recs := make([][]addRec, workers)
				var wg sync.WaitGroup
				for w := range workers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						d := int64(w) - 1
						for range per {
							r, err := hot.Add(bg, id, d, contract.WriteOptions{})
							if err != nil {
								panic(err)
							}
							recs[w] = append(recs[w], addRec{d, r})
						}
					}()
				}
				wg.Wait()
				var all []addRec
				for w := range workers {
					all = append(all, recs[w]...)
					for range per {
						if _, err := ref.Add(bg, id, int64(w)-1, contract.WriteOptions{}); err != nil {
							rt.Fatal(err)
						}
					}
				}
				checkLinear(rt.Fatalf, v.Value, v.Version, all)
			case 3: // read
				id := genID.Draw(rt, "id")
				same("get "+id, mustGetR(rt, hot, id), mustGetR(rt, ref, id))
			case 4: // set, with a TTL or without
				ttl := time.Duration(rapid.Int64Range(0, 3).Draw(rt, "ttl s")) * time.Second
				apply(contract.Op{Type: contract.OpSet, ID: genID.Draw(rt, "id"), Value: genValue.Draw(rt, "value"), TTL: ttl}, contract.WriteOptions{})
			case 5: // set with a version: the current one, or a near miss
				id := genID.Draw(rt, "id")
				ver := mustGetR(rt, ref, id).Version + uint64(rapid.IntRange(0, 2).Draw(rt, "off"))
				apply(contract.Op{Type: contract.OpSet, ID: id, Value: genValue.Draw(rt, "value"), CheckVersion: true, ExpectedVersion: ver}, contract.WriteOptions{})
			case 6: // expire, or persist
				ttl := time.Duration(rapid.Int64Range(0, 3).Draw(rt, "ttl s")) * time.Second
				apply(contract.Op{Type: contract.OpExpire, ID: genID.Draw(rt, "id"), TTL: ttl}, contract.WriteOptions{})
			case 7:
				clk.Advance(time.Duration(rapid.Int64Range(1, 2500).Draw(rt, "ms")) * time.Millisecond)
			case 8:
				apply(contract.Op{Type: contract.OpDelete, ID: genID.Draw(rt, "id")}, contract.WriteOptions{})
			case 9: // float, idempotent and sync adds: the general path
				id := genID.Draw(rt, "id")
				switch rapid.IntRange(0, 2).Draw(rt, "which") {
				case 0:
					apply(contract.Op{Type: contract.OpAdd, ID: id, Kind: contract.KindFloat, Float: "0.5"}, contract.WriteOptions{})
				case 1:
					key := rapid.SampledFrom([]string{"k1", "k2"}).Draw(rt, "key")
					apply(contract.Op{Type: contract.OpAdd, ID: id, Delta: 1}, contract.WriteOptions{IdempotencyKey: key})
				case 2:
					apply(contract.Op{Type: contract.OpAdd, ID: id, Delta: genDelta.Draw(rt, "delta")}, contract.WriteOptions{Durability: contract.Sync})
				}
			case 10: // export (replication)
				id := genID.Draw(rt, "id")
				sh, okh, eh := hot.Export(id)
				sr, okr, er := ref.Export(id)
				same("export "+id, []any{sh, okh, errClass(eh)}, []any{sr, okr, errClass(er)})
			case 11:
				for _, e := range []*Engine{hot, ref} {
					if err := e.Flush(bg); err != nil {
						rt.Fatal(err)
					}
				}
			case 12, 13: // restart: what was acknowledged (and flushed on close) is back
				for _, id := range ids {
					hot.heatForTest(id)
				}
				if err := hot.Close(); err != nil {
					rt.Fatal(err)
				}
				if err := ref.Close(); err != nil {
					rt.Fatal(err)
				}
				hot, ref = open(fsH, false), open(fsR, true)
			}
		}
		for _, id := range ids {
			same("final get "+id, mustGetR(rt, hot, id), mustGetR(rt, ref, id))
		}
	})
}

func mustGetR(rt *rapid.T, e *Engine, id string) contract.View {
	v, err := e.Get(id)
	if err != nil {
		rt.Fatal(err)
	}
	return v
}

// TestHotCounterOpsCounted: Stats.Ops counts a hot counter's adds, open
// and folded.
func TestHotCounterOpsCounted(t *testing.T) {
	e := openMem(t)
	if _, err := e.Add(bg, "k", 1, contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.heatForTest("k")
	for range 10 {
		if _, err := e.Add(bg, "k", 1, contract.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if !e.isHot("k") || e.Stats().Ops != 11 {
		t.Fatalf("open hot state: hot %v, ops %d, want 11", e.isHot("k"), e.Stats().Ops)
	}
	if err := e.Flush(bg); err != nil { // folds
		t.Fatal(err)
	}
	if e.isHot("k") || e.Stats().Ops != 11 {
		t.Fatalf("folded: hot %v, ops %d, want 11", e.isHot("k"), e.Stats().Ops)
	}
}

// TestAddValidatesPastTheHint: ids the per-P hint cannot match are still
// refused with ErrInvalidID after an add set the hint, on a hot counter
// too.
func TestAddValidatesPastTheHint(t *testing.T) {
	e := openMem(t)
	for _, hot := range []bool{false, true} {
		if _, err := e.Add(bg, "page", 1, contract.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		if hot {
			e.heatForTest("page")
		}
		for _, id := range []string{"", "page\x00", "pa\nge", "page\x7f", strings.Repeat("p", contract.MaxIDLen+1), "pag\xff"} {
			if _, err := e.Add(bg, id, 1, contract.WriteOptions{}); !errors.Is(err, contract.ErrInvalidID) {
				t.Fatalf("hot %v: add to %q: %v, want ErrInvalidID", hot, id, err)
			}
		}
	}
	if v := mustGet(t, e, "page"); v.Value != 2 || v.Version != 2 {
		t.Fatalf("after the refused adds: %+v", v)
	}
}

// TestHotCounterSyncAddsSurviveCrash: sync adds to a hot counter are on
// disk when acknowledged. Writers send sync +1s to one counter (kept hot
// meanwhile, and hot by contention); the disk "loses power" at an
// arbitrary point; after reopening the counter holds at least every add
// acknowledged before that point, at most every add sent, and its version
// still counts its adds.
func TestHotCounterSyncAddsSurviveCrash(t *testing.T) {
	for round := range 3 {
		fs, cfg := syncedOnlyConfig(t)
		e, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Add(bg, "hot", 1, contract.WriteOptions{Durability: contract.Sync}); err != nil {
			t.Fatal(err)
		}
		var sent, acked atomic.Int64
		sent.Store(1)
		acked.Store(1)
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					e.heatForTest("hot")
					sent.Add(1)
					if _, err := e.Add(bg, "hot", 1, contract.WriteOptions{Durability: contract.Sync}); err != nil {
						t.Error(err)
						return
					}
					acked.Add(1)
				}
			}()
		}
		for acked.Load() < int64(200*(round+1)) {
			time.Sleep(time.Millisecond)
		}
		durable := acked.Load() // acknowledged before the power loss
		fs.SetIgnoreSyncs(true)
		close(stop)
		wg.Wait()
		e = reopenAfterPowerLoss(t, e, fs, cfg)
		v := mustGet(t, e, "hot")
		e.Close()
		if v.Value < durable || v.Value > sent.Load() || v.Version != uint64(v.Value) {
			t.Fatalf("round %d: after the crash value %d version %d; acknowledged before it %d, sent %d",
				round, v.Value, v.Version, durable, sent.Load())
		}
	}
}
