package engine

import (
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/counterd/counterd/internal/contract"
	"pgregory.net/rapid"
)

// limFP is a limiter fingerprint.
type limFP struct {
	h1 uint64
	h2 uint32
}

// sameShardFPs returns n fingerprints whose limiter ids hash to shard no.
func sameShardFPs(no, n int) []limFP {
	var out []limFP
	for i := uint64(1); len(out) < n; i++ {
		fp := limFP{i * 0x9e3779b97f4a7c15, uint32(i)}
		var b [limIDLen]byte
		if shardOf(hashID(limID(&b, fp.h1, fp.h2))) == no {
			out = append(out, fp)
		}
	}
	return out
}

var limFresh = [3]int64{-7, 0, 0}

// auxVals are what the model hangs from limiter entries.
var auxVals [4]int

// modelLim is what the model expects of one limiter entry.
type modelLim struct {
	st      LimState
	aux     unsafe.Pointer
	changed bool
}

// TestLimitersModel (property): limiter entries and counters in one shard
// of one engine, under random limiter writes, evictions, counter writes,
// flushes (which free and reuse slots) and arena compactions: each
// limiter entry reads back what the model says, the counter listings,
// Scan and Len never show a limiter entry, RangeLimiters sees exactly the
// model's entries (and the changed ones), and nothing of them is on disk
// after a restart.
func TestLimitersModel(t *testing.T) {
	ids := sameShardIDs(3, 6)
	fps := sameShardFPs(3, 8)
	rapid.Check(t, func(rt *rapid.T) {
		fs := vfs.NewMem()
		clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
		cfg := DefaultConfig()
		cfg.FS, cfg.Dir, cfg.NodeID, cfg.Clock = fs, "db", "n1", clk.Now
		cfg.FlushInterval = time.Hour
		e, err := Open(cfg)
		if err != nil {
			rt.Fatal(err)
		}
		defer func() { e.Close() }()
		t := e.Limiters()
		lims := map[limFP]*modelLim{}
		ctrs := map[string]int64{}
		sh := &e.shards[3]
		steps := rapid.IntRange(1, 80).Draw(rt, "steps")
		for step := 0; step < steps; step++ {
			fp := rapid.SampledFrom(fps).Draw(rt, "fp")
			switch op := rapid.IntRange(0, 8).Draw(rt, "op"); op {
			case 0, 1: // a check: lock, read, write, unlock
				var le LimEntry
				if err := t.LockLimiter(&le, fp.h1, fp.h2, &limFresh); err != nil {
					rt.Fatal(err)
				}
				m := lims[fp]
				if m == nil {
					m = &modelLim{st: LimState{S: limFresh, Exp: math.MaxInt64}}
					lims[fp] = m
				}
				if got := le.State(); got != m.st {
					rt.Fatalf("state %+v, want %+v", got, m.st)
				}
				if got := le.Aux(); got != m.aux {
					rt.Fatalf("aux %v, want %v", got, m.aux)
				}
				m.st = LimState{S: [3]int64{rapid.Int64().Draw(rt, "s0"), rapid.Int64().Draw(rt, "s1"), rapid.Int64().Draw(rt, "s2")}, Exp: rapid.Int64Range(0, 5).Draw(rt, "exp")}
				le.SetState(&m.st)
				if rapid.Bool().Draw(rt, "setaux") {
					m.aux = unsafe.Pointer(&auxVals[rapid.IntRange(0, 3).Draw(rt, "aux")])
					le.SetAux(m.aux)
				}
				if rapid.Bool().Draw(rt, "mark") {
					le.MarkChanged()
					m.changed = true
				}
				le.Unlock()
			case 2: // the janitor
				now := rapid.Int64Range(0, 6).Draw(rt, "now")
				want := 0
				for k, m := range lims {
					if m.st.Exp <= now {
						delete(lims, k)
						want++
					}
				}
				if got := t.EvictLimiters(now); got != want {
					rt.Fatalf("evicted %d, want %d", got, want)
				}
			case 3, 4: // a counter write in the same shard
				id := rapid.SampledFrom(ids).Draw(rt, "id")
				if _, err := e.Add(bg, id, 1, contract.WriteOptions{}); err != nil {
					rt.Fatal(err)
				}
				ctrs[id]++
			case 5: // a counter delete
				id := rapid.SampledFrom(ids).Draw(rt, "id")
				if _, err := e.Apply(bg, contract.Op{Type: contract.OpDelete, ID: id}, contract.WriteOptions{}); err != nil {
					rt.Fatal(err)
				}
				delete(ctrs, id)
			case 6: // flush: frees deleted counters' slots
				if err := e.Flush(bg); err != nil {
					rt.Fatal(err)
				}
			case 7: // compact the arena
				sh.mu.Lock()
				if a := sh.ar.Load(); a != nil {
					sh.compactArenaLocked(a.end())
				}
				sh.mu.Unlock()
			case 8: // export the changed entries, clearing their marks
				got := 0
				t.RangeLimiters(true, func(le *LimEntry) {
					if !le.Changed() {
						rt.Fatal("RangeLimiters(changed) passed an unchanged entry")
					}
					got++
					le.ClearChanged()
				})
				want := 0
				for _, m := range lims {
					if m.changed {
						want++
						m.changed = false
					}
				}
				if got != want {
					rt.Fatalf("RangeLimiters(changed) saw %d, want %d", got, want)
				}
			}
			checkLimModel(rt, e, t, lims, ctrs)
		}
		if err := e.Close(); err != nil {
			rt.Fatal(err)
		}
		if e, err = Open(cfg); err != nil {
			rt.Fatal(err)
		}
		if n := e.Limiters().LenLimiters(); n != 0 {
			rt.Fatalf("%d limiter entries after a restart: limiter state is never persisted", n)
		}
		checkLimModel(rt, e, e.Limiters(), nil, ctrs)
	})
}

func checkLimModel(rt *rapid.T, e *Engine, t *Limiters, lims map[limFP]*modelLim, ctrs map[string]int64) {
	if got := t.LenLimiters(); got != len(lims) {
		rt.Fatalf("LenLimiters %d, want %d", got, len(lims))
	}
	n := 0
	t.RangeLimiters(false, func(*LimEntry) { n++ })
	if n != len(lims) {
		rt.Fatalf("RangeLimiters saw %d, want %d", n, len(lims))
	}
	if e.Len() != len(ctrs) {
		rt.Fatalf("Len %d, want %d counters", e.Len(), len(ctrs))
	}
	var want []string
	for id := range ctrs {
		want = append(want, id)
	}
	var got []string
	for cur := uint64(0); ; {
		var page []string
		page, cur = e.Scan(cur, "", 100)
		got = append(got, page...)
		if cur == 0 {
			break
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		rt.Fatalf("Scan %q, want %q", got, want)
	}
	for id, v := range ctrs {
		if got, err := e.Get(id); err != nil || got.Value != v {
			rt.Fatalf("Get(%q) %d, %v, want %d", id, got.Value, err, v)
		}
	}
}

// TestLimitersConcurrent (race): goroutines charge pairs of limiter
// entries under both locks, taken in LimEntry.Order, while a janitor
// evicts nothing live and counters are written in the same shards: no
// charge is lost and nothing deadlocks.
func TestLimitersConcurrent(t *testing.T) {
	e := openMem(t)
	tab := e.Limiters()
	fps := sameShardFPs(5, 4)
	const workers, rounds = 4, 2000
	var wg sync.WaitGroup
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				tab.EvictLimiters(0) // Exp is never <= 0 below
			}
		}
	}()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				a, b := fps[(w+i)%len(fps)], fps[(w+i+1)%len(fps)]
				for {
					var x, y LimEntry
					if err := tab.ResolveLimiter(&x, a.h1, a.h2, &[3]int64{}); err != nil {
						t.Error(err)
						return
					}
					if err := tab.ResolveLimiter(&y, b.h1, b.h2, &[3]int64{}); err != nil {
						t.Error(err)
						return
					}
					if x.Order() > y.Order() {
						x, y = y, x
					}
					if !x.Lock() {
						continue
					}
					if !y.Lock() {
						x.Unlock()
						continue
					}
					for _, le := range []*LimEntry{&x, &y} {
						st := le.State()
						st.S[0]++
						st.Exp = 1 << 62
						le.SetState(&st)
					}
					y.Unlock()
					x.Unlock()
					break
				}
				if _, err := e.Add(bg, "c", 1, contract.WriteOptions{}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	var sum int64
	tab.RangeLimiters(false, func(le *LimEntry) { sum += le.State().S[0] })
	if sum != 2*workers*rounds {
		t.Fatalf("charged %d, want %d", sum, 2*workers*rounds)
	}
	if e.Len() != 1 {
		t.Fatalf("Len %d, want the one counter", e.Len())
	}
}

// TestLimiterNamespace: no counter path can name a limiter entry: its id
// (0x00 and the fingerprint) is refused as a counter id by writes, reads
// and merges, and the entry is left as it was.
func TestLimiterNamespace(t *testing.T) {
	e := openMem(t)
	tab := e.Limiters()
	var le LimEntry
	if err := tab.LockLimiter(&le, 0x0123456789abcdef, 42, &[3]int64{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	want := LimState{S: [3]int64{7, 8, 9}, Exp: 1 << 60}
	le.SetState(&want)
	le.Unlock()
	var b [limIDLen]byte
	id := string([]byte(limID(&b, 0x0123456789abcdef, 42)))
	if _, err := e.Add(bg, id, 1, contract.WriteOptions{}); !errors.Is(err, contract.ErrInvalidID) {
		t.Errorf("add to a limiter id: %v, want ErrInvalidID", err)
	}
	if _, err := e.Get(id); !errors.Is(err, contract.ErrInvalidID) {
		t.Errorf("get of a limiter id: %v, want ErrInvalidID", err)
	}
	s := State{ID: id, Kind: contract.KindCounter, Version: 9, Data: binary.AppendVarint(nil, 5)}
	if _, err := e.Merge(bg, []State{s}, contract.WriteOptions{}); !errors.Is(err, contract.ErrInvalidID) {
		t.Errorf("merge into a limiter id: %v, want ErrInvalidID", err)
	}
	if err := tab.LockLimiter(&le, 0x0123456789abcdef, 42, &[3]int64{}); err != nil {
		t.Fatal(err)
	}
	if got := le.State(); got != want {
		t.Errorf("limiter state %+v after refused counter ops, want %+v", got, want)
	}
	le.Unlock()
	if e.Len() != 0 || tab.LenLimiters() != 1 {
		t.Errorf("Len %d, LenLimiters %d; want 0 and 1", e.Len(), tab.LenLimiters())
	}
}
