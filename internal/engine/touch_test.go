package engine

import (
	"strconv"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
)

// TestTouchWindowsSkipsLocked: the flush's touch of a shard's dirty
// windows (touchWindows) locks a group of entries at once, so it must not
// wait for an entry another goroutine holds (that holder may be waiting
// for one of the group's): it returns with that entry still held by its
// holder and every entry it locked unlocked.
func TestTouchWindowsSkipsLocked(t *testing.T) {
	cfg := DefaultConfig()
	cfg.InMemory = true
	cfg.FlushInterval = time.Hour
	e := mustOpen(t, cfg)
	defer e.Close()
	spec := counter.WindowSpec{Granularity: time.Minute, Span: time.Hour}
	byShard := map[int][]ref{}
	for u := 0; u < 8000; u++ {
		id := "recent:u" + strconv.Itoa(u)
		op := contract.Op{Type: contract.OpAdd, ID: id, Kind: contract.KindWindow, Window: spec, Delta: 1, At: time.Now().UnixNano()}
		if err := e.ApplyAtomic(bg, []contract.Op{op}, contract.WriteOptions{Durability: contract.Async}); err != nil {
			t.Fatal(err)
		}
		r, ok, err := e.lookup(id, hashID(id), false)
		if !ok || err != nil {
			t.Fatalf("lookup %s: %v, %v", id, ok, err)
		}
		byShard[r.shardNo] = append(byShard[r.shardNo], r)
	}
	var refs []ref
	for _, rs := range byShard {
		if len(rs) > len(refs) {
			refs = rs
		}
	}
	if len(refs) < 2*touchGroup {
		t.Fatalf("%d windows in the fullest shard, want at least %d", len(refs), 2*touchGroup)
	}
	sh := refs[0].sh
	list := make([]uint32, len(refs))
	for k, r := range refs {
		list[k] = r.idx
	}
	held := refs[touchGroup+1].e // in the second group
	held.lock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.gate.Lock()
		sh.mu.Lock()
		touchWindows(sh, list)
		sh.mu.Unlock()
		e.gate.Unlock()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		held.unlock()
		<-done
		t.Fatal("touchWindows waited for an entry held by another goroutine")
	}
	if held.flags()&lockBit == 0 {
		t.Fatal("the held entry was unlocked")
	}
	held.unlock()
	for _, r := range refs {
		if r.e.flags()&lockBit != 0 {
			t.Fatalf("entry %d left locked", r.idx)
		}
	}
}
