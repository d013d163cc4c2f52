package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/counterd/counterd/internal/contract"
	"pgregory.net/rapid"
)

// sameShardIDs returns n ids of the given lengths pattern that all hash to
// shard no, so they share slab chunks, side tables and one arena.
func sameShardIDs(no, n int) []string {
	var ids []string
	for i := 0; len(ids) < n; i++ {
		id := fmt.Sprintf("k%d:", i)
		// Lengths from 3 to 255 bytes, the longest an id may be.
		if l := []int{0, 24, 255, 7, 100}[len(ids)%5]; l > len(id) {
			id += strings.Repeat("x", l-len(id))
		}
		if shardOf(hashID(id)) == no {
			ids = append(ids, id)
		}
	}
	return ids
}

// modelCounter is what the index model expects of one id.
type modelCounter struct {
	value   int64
	version uint64
	expires int64 // unix ns, 0 = none
}

// TestIndexModel (property): random adds, versioned sets, expiries,
// deletes, merges with 64-bit versions, epoch raises, flushes (which free
// and reuse slots), arena compactions (including one that makes the
// arena's offsets wrap) and a restart, on ids that share one shard, read
// back exactly as a plain map of the same operations says.
func TestIndexModel(t *testing.T) {
	ids := sameShardIDs(3, 12)
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
		model := map[string]*modelCounter{}
		now := func() int64 { return clk.Now().UnixNano() }
		expire := func() {
			for id, m := range model {
				if m.expires != 0 && m.expires <= now() {
					delete(model, id)
				}
			}
		}
		sh := &e.shards[3]
		steps := rapid.IntRange(1, 60).Draw(rt, "steps")
		for step := 0; step < steps; step++ {
			id := rapid.SampledFrom(ids).Draw(rt, "id")
			expire()
			m := model[id]
			switch op := rapid.IntRange(0, 10).Draw(rt, "op"); op {
			case 0, 1: // add
				d := rapid.Int64Range(-5, 5).Draw(rt, "delta")
				res, err := e.Add(bg, id, d, contract.WriteOptions{})
				if err != nil {
					rt.Fatalf("add: %v", err)
				}
				if m == nil {
					m = &modelCounter{}
					model[id] = m
				}
				m.value += d
				m.version++
				if res.Value != m.value || res.Version != m.version {
					rt.Fatalf("add %q: got %d v%d, want %d v%d", id, res.Value, res.Version, m.value, m.version)
				}
			case 2: // set with an expected version, right or wrong
				want := uint64(0)
				if m != nil {
					want = m.version
				}
				wrong := rapid.Bool().Draw(rt, "wrong")
				if wrong {
					want++
				}
				v := rapid.Int64Range(-1e6, 1e6).Draw(rt, "value")
				_, err := e.Apply(bg, contract.Op{Type: contract.OpSet, ID: id, Value: v, CheckVersion: true, ExpectedVersion: want, KeepTTL: true}, contract.WriteOptions{})
				if wrong {
					if !errors.Is(err, contract.ErrVersionConflict) {
						rt.Fatalf("set with a wrong version: %v", err)
					}
					break
				}
				if err != nil {
					rt.Fatalf("set: %v", err)
				}
				if m == nil {
					m = &modelCounter{}
					model[id] = m
				}
				m.value = v
				m.version++
			case 3: // expire or persist
				ttl := time.Duration(rapid.IntRange(0, 3).Draw(rt, "ttl")) * time.Second
				if _, err := e.Apply(bg, contract.Op{Type: contract.OpExpire, ID: id, TTL: ttl}, contract.WriteOptions{}); err != nil {
					rt.Fatalf("expire: %v", err)
				}
				switch {
				case m == nil:
				case ttl > 0:
					m.expires = now() + int64(ttl)
					m.version++
				case m.expires != 0:
					m.expires = 0
					m.version++
				}
			case 4: // delete
				if _, err := e.Apply(bg, contract.Op{Type: contract.OpDelete, ID: id}, contract.WriteOptions{}); err != nil {
					rt.Fatalf("delete: %v", err)
				}
				delete(model, id)
			case 5: // merge a state whose version may need all 64 bits
				ver := rapid.SampledFrom([]uint64{1, 1<<32 - 1, 1 << 32, 7<<32 | 5, 1<<64 - 2}).Draw(rt, "ver")
				v := rapid.Int64Range(-100, 100).Draw(rt, "value")
				s := State{ID: id, Kind: contract.KindCounter, Version: ver, UpdatedAt: now(), Data: binary.AppendVarint(nil, v)}
				if _, err := e.Merge(bg, []State{s}, contract.WriteOptions{}); err != nil {
					rt.Fatalf("merge: %v", err)
				}
				if m == nil || ver > m.version {
					model[id] = &modelCounter{value: v, version: ver}
				}
			case 6: // an owner's epoch in the high half
				floor := uint64(rapid.IntRange(1, 3).Draw(rt, "epoch")) << 32
				got, ok, err := e.RaiseVersion(id, floor)
				if err != nil || ok != (m != nil) {
					rt.Fatalf("raise: ok %v, %v", ok, err)
				}
				if m != nil {
					if m.version < floor {
						m.version = floor | m.version&(1<<32-1)
					}
					if got != m.version {
						rt.Fatalf("raise %q: version %d, want %d", id, got, m.version)
					}
				}
			case 7: // time passes
				clk.Advance(time.Duration(rapid.IntRange(1, 2).Draw(rt, "secs")) * time.Second)
			case 8: // flush: deleted counters' slots are freed for reuse
				if err := e.Flush(bg); err != nil {
					rt.Fatal(err)
				}
			case 9: // compact the arena into one past it
				sh.mu.Lock()
				if a := sh.ar.Load(); a != nil {
					sh.compactArenaLocked(a.end())
				}
				sh.mu.Unlock()
			case 10: // compact near the top of the offsets, so appends wrap
				k := uint64(rapid.IntRange(2, 6).Draw(rt, "chunks"))
				sh.mu.Lock()
				base := uint64(1<<32 - k*arenaChunk)
				if a := sh.ar.Load(); a != nil && a.end() > base {
					base = a.end() // never back into the current arena
				}
				sh.compactArenaLocked(base)
				sh.mu.Unlock()
			}
			expire()
			checkModel(rt, e, ids, model)
		}
		if err := e.Close(); err != nil {
			rt.Fatal(err)
		}
		if e, err = Open(cfg); err != nil {
			rt.Fatal(err)
		}
		expire()
		checkModel(rt, e, ids, model)
	})
}

func checkModel(rt *rapid.T, e *Engine, ids []string, model map[string]*modelCounter) {
	for _, id := range ids {
		v, err := e.Get(id)
		if err != nil {
			rt.Fatal(err)
		}
		m := model[id]
		if v.Exists != (m != nil) {
			rt.Fatalf("%q exists %v, model %v", id, v.Exists, m != nil)
		}
		if m == nil {
			continue
		}
		if v.Value != m.value || v.Version != m.version {
			rt.Fatalf("%q: %d v%d, want %d v%d", id, v.Value, v.Version, m.value, m.version)
		}
		if got := v.ExpiresAt.UnixNano(); (m.expires == 0) != v.ExpiresAt.IsZero() || (m.expires != 0 && got != m.expires) {
			rt.Fatalf("%q expires %v, want %d", id, v.ExpiresAt, m.expires)
		}
	}
	if e.Len() != len(model) {
		rt.Fatalf("Len %d, model %d", e.Len(), len(model))
	}
	var got []string
	for cursor := uint64(0); ; {
		var page []string
		page, cursor = e.Scan(cursor, "", 100)
		got = append(got, page...)
		if cursor == 0 {
			break
		}
	}
	var want []string
	for id := range model {
		want = append(want, id)
	}
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		rt.Fatalf("scan: %q, want %q", got, want)
	}
}

// TestSideTablesConcurrent: entries of one chunk written concurrently,
// some plain, some with TTLs and epochs in their chunk's side tables, keep
// every add (run with -race: side-table slots of different entries share
// one array).
func TestSideTablesConcurrent(t *testing.T) {
	e := openMem(t)
	ids := sameShardIDs(5, 8)
	const workers, adds = 4, 300
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < adds; i++ {
				for k, id := range ids {
					if _, err := e.Add(bg, id, 1, contract.WriteOptions{}); err != nil {
						t.Error(err)
						return
					}
					switch (i + k) % 4 {
					case 1:
						e.Apply(bg, contract.Op{Type: contract.OpExpire, ID: id, TTL: time.Hour}, contract.WriteOptions{})
					case 2:
						e.Apply(bg, contract.Op{Type: contract.OpExpire, ID: id}, contract.WriteOptions{}) // persist
					case 3:
						e.RaiseVersion(id, uint64(w+1)<<32)
					}
				}
			}
		}()
	}
	wg.Wait()
	for _, id := range ids {
		v := mustGet(t, e, id)
		if v.Value != workers*adds {
			t.Fatalf("%q: %d, want %d", id, v.Value, workers*adds)
		}
		if v.Version < workers*adds || v.Version>>32 == 0 {
			t.Fatalf("%q: version %#x lost adds or the epoch", id, v.Version)
		}
	}
}

// TestVersionCarriesIntoHighHalf: a version whose low 32 bits wrap moves
// its high half up, and it survives a restart.
func TestVersionCarriesIntoHighHalf(t *testing.T) {
	fs := vfs.NewMem()
	cfg := DefaultConfig()
	cfg.FS, cfg.Dir, cfg.NodeID = fs, "db", "n1"
	e, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := State{ID: "c", Kind: contract.KindCounter, Version: 2<<32 | (1<<32 - 1), Data: binary.AppendVarint(nil, 9)}
	if _, err := e.Merge(bg, []State{s}, contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	res := mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: "c", Delta: 1})
	if res.Value != 10 || res.Version != 3<<32 {
		t.Fatalf("add across the carry: %+v", res)
	}
	mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: "plain", Delta: 1}) // no high half
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = mustOpen(t, cfg)
	if v := mustGet(t, e, "c"); v.Value != 10 || v.Version != 3<<32 {
		t.Fatalf("after reopen: %+v", v)
	}
	if v := mustGet(t, e, "plain"); v.Version != 1 {
		t.Fatalf("plain counter after reopen: %+v", v)
	}
}

// TestArenaOffsetsWrap: when a shard's logical arena offsets reach the top
// of their 32 bits, the live ids move to an arena at the bottom and every
// counter still reads back.
func TestArenaOffsetsWrap(t *testing.T) {
	e := openMem(t, func(c *Config) { c.FlushInterval = time.Hour })
	ids := sameShardIDs(9, 10)
	for i, id := range ids {
		mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: id, Delta: int64(i + 1)})
	}
	sh := &e.shards[9]
	sh.mu.Lock()
	sh.compactArenaLocked(1<<32 - 2*arenaChunk)
	top := sh.ar.Load().base
	sh.mu.Unlock()
	if top != 1<<32-2*arenaChunk {
		t.Fatalf("compaction went to %d, not near the top", top)
	}
	// Deleted and created again, an id is appended anew: 40 rounds of the
	// longest ids write more than the two chunks left.
	long := ids[2]
	for round := 0; round < 40; round++ {
		mustApply(t, e, contract.Op{Type: contract.OpDelete, ID: long})
		flushAndReap(t, e)
		mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: long, Delta: 3})
	}
	sh.mu.Lock()
	base := sh.ar.Load().base
	sh.mu.Unlock()
	if base >= top {
		t.Fatalf("arena base %d: the offsets did not wrap", base)
	}
	for i, id := range ids {
		want := int64(i + 1)
		if id == long {
			want = 3
		}
		if v := mustGet(t, e, id); v.Value != want {
			t.Fatalf("%q after the wrap: %+v, want %d", id, v, want)
		}
	}
}

// TestArenaCompactsAfterDeletes: freeing most ids of a shard compacts its
// arena, and the ids left read back.
func TestArenaCompactsAfterDeletes(t *testing.T) {
	e := openMem(t, func(c *Config) { c.FlushInterval = time.Hour })
	ids := sameShardIDs(11, 1500)
	for _, id := range ids {
		mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: id, Delta: int64(len(id))})
	}
	sh := &e.shards[11]
	sh.mu.Lock()
	before := sh.ar.Load()
	sh.mu.Unlock()
	for _, id := range ids[10:] {
		mustApply(t, e, contract.Op{Type: contract.OpDelete, ID: id})
	}
	flushAndReap(t, e)
	sh.mu.Lock()
	after := sh.ar.Load()
	sh.mu.Unlock()
	if after.base < uint32(before.end()) || len(after.chunks) >= len(before.chunks) {
		t.Fatalf("arena not compacted: %d chunks at %d, was %d at %d", len(after.chunks), after.base, len(before.chunks), before.base)
	}
	for _, id := range ids[:10] {
		if v := mustGet(t, e, id); v.Value != int64(len(id)) {
			t.Fatalf("%q after compaction: %+v", id, v)
		}
	}
	for _, id := range ids[10:20] {
		if v := mustGet(t, e, id); v.Exists {
			t.Fatalf("deleted %q exists", id)
		}
	}
}

// flushAndReap flushes and waits until the slots of the counters deleted
// before the call are freed: the flusher frees them after it reports a
// flush durable, and the second flush starts only when the first is done.
func flushAndReap(t *testing.T, e *Engine) {
	t.Helper()
	for range 2 {
		if err := e.Flush(bg); err != nil {
			t.Fatal(err)
		}
	}
}
