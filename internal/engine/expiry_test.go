package engine

import (
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/counterd/counterd/internal/contract"
	"pgregory.net/rapid"
)

// TestActiveExpiry: counters whose TTL passed are deleted by the janitor
// without being read, and the deletion reaches disk.
func TestActiveExpiry(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.Dir = dir
	cfg.Clock = clk.Now
	e, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c"} {
		mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: id, Delta: 1})
	}
	mustApply(t, e, contract.Op{Type: contract.OpExpire, ID: "a", TTL: time.Second})
	mustApply(t, e, contract.Op{Type: contract.OpSet, ID: "b", Value: 5, TTL: time.Minute})
	if st := e.Stats(); st.Keys != 3 || st.Expires != 2 {
		t.Fatalf("stats before expiry: %+v", st)
	}
	clk.Advance(2 * time.Second)
	e.expireDue() // what the janitor runs every second
	if st := e.Stats(); st.Keys != 2 || st.Expires != 1 {
		t.Fatalf("stats after a's TTL: %+v", st)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e, err = Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.Len() != 2 || mustGet(t, e, "a").Exists || !mustGet(t, e, "b").Exists {
		t.Fatalf("after restart: len %d", e.Len())
	}
	clk.Advance(time.Hour) // b expired while the node was down
	if mustGet(t, e, "b").Exists {
		t.Fatal("b outlived its TTL across a restart")
	}
}

// TestIdempotencyPurge: records past the retention leave memory and disk.
func TestIdempotencyPurge(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	e := openMem(t, func(c *Config) { c.Clock = clk.Now; c.IdempotencyRetention = time.Hour })
	e.Add(bg, "k", 1, contract.WriteOptions{IdempotencyKey: "old"})
	clk.Advance(30 * time.Minute)
	e.Add(bg, "k", 1, contract.WriteOptions{IdempotencyKey: "young"})
	if err := e.Flush(bg); err != nil {
		t.Fatal(err)
	}
	clk.Advance(45 * time.Minute) // "old" is 75 minutes old, "young" 45
	if err := e.purgeIdempotency(); err != nil {
		t.Fatal(err)
	}
	if r, err := e.readIdem("old"); err != nil || r != nil {
		t.Fatalf("old record still on disk: %+v %v", r, err)
	}
	if r, err := e.readIdem("young"); err != nil || r == nil {
		t.Fatalf("young record purged: %v", err)
	}
	if n := e.Stats().IdemRecords; n != 1 {
		t.Fatalf("%d records in memory, want 1", n)
	}
}

// expModel is the naive model of TTLs: per id, whether it exists and its
// expiry (unix ns, 0 = none), with expiry applied lazily like the engine.
type expModel struct {
	live map[string]bool
	exp  map[string]int64
}

func (m *expModel) alive(id string, now int64) bool {
	if m.live[id] && m.exp[id] != 0 && m.exp[id] <= now {
		m.live[id], m.exp[id] = false, 0
	}
	return m.live[id]
}

// indexItems returns, per (shard, slab index), the smallest second of the
// expiry index's items.
func indexItems(e *Engine) map[[2]uint32]uint64 {
	min := map[[2]uint32]uint64{}
	for no := range e.shards {
		sh := &e.shards[no]
		sh.exp.mu.Lock()
		for _, v := range sh.exp.h {
			k := [2]uint32{uint32(no), uint32(v)}
			if s, ok := min[k]; !ok || v>>32 < s {
				min[k] = v >> 32
			}
		}
		sh.exp.mu.Unlock()
	}
	return min
}

// indexDue is the due set the index yields at now: the counters of items
// whose second has passed, whose own expiry has too.
func indexDue(e *Engine, now int64) map[[2]uint32]bool {
	due := map[[2]uint32]bool{}
	for k, s := range indexItems(e) {
		if s >= expSecond(now) {
			continue
		}
		en := e.shards[k[0]].entryAt(k[1])
		en.lock()
		if at := ttlOf(en); at != 0 && expSecond(at) < expSecond(now) {
			due[k] = true
		}
		en.unlock()
	}
	return due
}

// slot is where id lives in the index, if it does.
func slot(e *Engine, id string) ([2]uint32, *entry, bool) {
	r, ok, _ := e.lookup(id, hashID(id), false)
	if !ok {
		return [2]uint32{}, nil, false
	}
	return [2]uint32{uint32(r.shardNo), r.idx}, r.e, true
}

// TestExpiryIndexMatchesScan: across random sets, expires (later, earlier,
// in the past), persists, deletes, rolled-back batches, replication merges
// carrying a TTL, janitor passes (with heap rebuilds), restarts and clock
// steps, the expiry index (a) holds an item no later than every TTL
// counter's expiry, (b) yields exactly the due set a scan of every counter
// finds, and (c) after a janitor pass no counter past its TTL is left in
// memory, and the heaps stay within twice the TTL counters plus the slack.
func TestExpiryIndexMatchesScan(t *testing.T) {
	defer func(s int) { compactSlack = s }(compactSlack)
	compactSlack = 2
	rapid.Check(t, func(rt *rapid.T) {
		clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
		cfg := DefaultConfig()
		cfg.FS, cfg.Dir, cfg.NodeID, cfg.Clock = vfs.NewMem(), "db", "n1", clk.Now
		e, err := Open(cfg)
		if err != nil {
			rt.Fatal(err)
		}
		defer func() { e.Close() }()
		m := &expModel{live: map[string]bool{}, exp: map[string]int64{}}
		ids := []string{"a", "b", "c", "d", "e", "f"}
		mergeVer := uint64(0)
		genID := rapid.SampledFrom(ids)
		genTTL := rapid.Int64Range(1, 8000) // milliseconds
		apply := func(op contract.Op) {
			if _, err := e.Apply(bg, op, contract.WriteOptions{}); err != nil {
				rt.Fatalf("%+v: %v", op, err)
			}
		}
		for step := 0; step < 60; step++ {
			now := clk.Now().UnixNano()
			switch rapid.IntRange(0, 10).Draw(rt, "op") {
			case 0: // add: creates without a TTL, keeps one
				id := genID.Draw(rt, "id")
				apply(contract.Op{Type: contract.OpAdd, ID: id, Delta: 1})
				if !m.alive(id, now) {
					m.live[id], m.exp[id] = true, 0
				}
			case 1: // set with a TTL, or without (drops it)
				id := genID.Draw(rt, "id")
				ttl := time.Duration(rapid.Int64Range(0, 8000).Draw(rt, "ttl")) * time.Millisecond
				apply(contract.Op{Type: contract.OpSet, ID: id, Value: 3, TTL: ttl})
				m.alive(id, now)
				m.live[id], m.exp[id] = true, 0
				if ttl > 0 {
					m.exp[id] = now + int64(ttl)
				}
			case 2, 3: // expire: later or earlier than the TTL it has
				id := genID.Draw(rt, "id")
				ttl := time.Duration(genTTL.Draw(rt, "ttl")) * time.Millisecond
				apply(contract.Op{Type: contract.OpExpire, ID: id, TTL: ttl})
				if m.alive(id, now) {
					m.exp[id] = now + int64(ttl)
				}
			case 4: // persist
				id := genID.Draw(rt, "id")
				apply(contract.Op{Type: contract.OpExpire, ID: id})
				if m.alive(id, now) {
					m.exp[id] = 0
				}
			case 5: // delete, or expire at a past time (deletes)
				id := genID.Draw(rt, "id")
				if rapid.Bool().Draw(rt, "past") {
					apply(contract.Op{Type: contract.OpExpire, ID: id, ExpireAt: now - 1})
				} else {
					apply(contract.Op{Type: contract.OpDelete, ID: id})
				}
				m.alive(id, now)
				m.live[id], m.exp[id] = false, 0
			case 6: // a batch that sets TTLs and deletes, then fails: no effect
				id1, id2 := genID.Draw(rt, "id1"), genID.Draw(rt, "id2")
				ops := []contract.Op{
					{Type: contract.OpExpire, ID: id1, TTL: time.Duration(genTTL.Draw(rt, "ttl")) * time.Millisecond},
					{Type: contract.OpDelete, ID: id2},
					{Type: contract.OpSet, ID: id1, Value: 1, TTL: time.Second},
					{Type: contract.OpSet, ID: "never", Value: 1, CheckVersion: true, ExpectedVersion: 99},
				}
				if _, err := e.ApplyBatch(bg, ops, contract.WriteOptions{}); err == nil {
					rt.Fatal("batch with a version conflict applied")
				}
				// The undo puts back even a counter past its TTL that the
				// batch found expired: the model is unchanged too.
			case 7: // replication: a merged state carries its TTL (or none)
				from, to := genID.Draw(rt, "from"), genID.Draw(rt, "to")
				if !m.live[from] || (m.exp[from] != 0 && m.exp[from] <= now) {
					continue // (without reading it, which would expire it)
				}
				s, ok, err := e.Export(from)
				if err != nil || !ok {
					rt.Fatalf("export %q: %v %v", from, ok, err)
				}
				mergeVer += 1 << 20 // above any version local writes reached
				s.ID, s.Version, s.ExpiresAt = to, mergeVer, 0
				if rapid.Bool().Draw(rt, "ttl?") {
					s.ExpiresAt = now + genTTL.Draw(rt, "ttl")*int64(time.Millisecond)
				}
				m.alive(to, now)
				if _, err := e.Merge(bg, []State{s}, contract.WriteOptions{}); err != nil {
					rt.Fatal(err)
				}
				m.live[to], m.exp[to] = true, s.ExpiresAt // the higher version wins
			case 8:
				clk.Advance(time.Duration(rapid.Int64Range(0, 3000).Draw(rt, "advance")) * time.Millisecond)
			case 9: // the janitor
				e.expireDue()
				for _, id := range ids {
					k, en, ok := slot(e, id)
					if !ok {
						continue
					}
					en.lock()
					at := ttlOf(en)
					en.unlock()
					if at != 0 && expSecond(at) < expSecond(now) {
						rt.Fatalf("%q (slot %v) expired at %d, still there after the janitor at %d", id, k, at, now)
					}
				}
				if n, ttls := len(indexItemsAll(e)), e.expires.Load(); int64(n) > 2*ttls+int64(compactSlack)+int64(len(ids)) {
					rt.Fatalf("%d heap items for %d counters with a TTL", n, ttls)
				}
			case 10: // restart: the index is rebuilt from disk
				if err := e.Close(); err != nil {
					rt.Fatal(err)
				}
				if e, err = Open(cfg); err != nil {
					rt.Fatal(err)
				}
			}
			now = clk.Now().UnixNano()
			// (a) every counter with a TTL has an item no later than it.
			items := indexItems(e)
			scan := map[[2]uint32]bool{}
			for _, id := range ids {
				k, en, ok := slot(e, id)
				var at int64
				if ok {
					en.lock()
					at = ttlOf(en)
					en.unlock()
				}
				want, passed := int64(0), false
				if m.live[id] {
					want, passed = m.exp[id], m.exp[id] != 0 && m.exp[id] <= now
				}
				if at != want && !(passed && at == 0) { // a passed TTL may be expired already
					rt.Fatalf("%q: engine expiry %d, model %d (live %v)", id, at, want, m.live[id])
				}
				if at == 0 {
					continue
				}
				if s, ok := items[k]; !ok || s > expSecond(at) {
					rt.Fatalf("%q expires in second %d; its earliest item: %d (present %v)", id, expSecond(at), s, ok)
				}
				if expSecond(at) < expSecond(now) {
					scan[k] = true
				}
			}
			// (b) the due set.
			if due := indexDue(e, now); !reflect.DeepEqual(due, scan) {
				rt.Fatalf("index due %v, scan due %v", due, scan)
			}
		}
	})
}

// indexItemsAll lists every heap item.
func indexItemsAll(e *Engine) []uint64 {
	var all []uint64
	for no := range e.shards {
		sh := &e.shards[no]
		sh.exp.mu.Lock()
		all = append(all, sh.exp.h...)
		sh.exp.mu.Unlock()
	}
	return all
}

// TestExpSecond: heap seconds round down and clamp to their uint32 range,
// so an item is never later than its counter's expiry.
func TestExpSecond(t *testing.T) {
	for _, c := range []struct {
		at   int64
		want uint64
	}{
		{0, 0},                            // before the epoch
		{expiryEpoch * 1e9, 0},            // the epoch
		{expiryEpoch*1e9 + 1999999999, 1}, // rounds down
		{math.MaxInt64, math.MaxUint32},   // past 2156
	} {
		if got := expSecond(c.at); got != c.want {
			t.Errorf("expSecond(%d) = %d, want %d", c.at, got, c.want)
		}
	}
	if v := expItem(expiryEpoch*1e9+5e9, 7); v>>32 != 5 || uint32(v) != 7 {
		t.Errorf("expItem: %x", v)
	}
}
