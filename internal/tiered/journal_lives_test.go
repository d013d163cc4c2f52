package tiered_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/tiered"
)

// testJournalReplayKeepsLives: within one write-behind cycle a counter
// (and a hash) is added to, deleted and created again, then the node is
// killed before that cycle commits. Its journal holds each life's delta
// apart, with the life, so the replay by another node leaves PostgreSQL
// where Redis is: the new life's delta only (the delete itself is not
// journaled; the higher life replaces the row).
func testJournalReplayKeepsLives(t *testing.T, s setup) {
	ctx := context.Background()
	var fail atomic.Bool
	tweak := crashableOptions(&fail)
	e := s.env(t, tweak)
	b := e.b
	async := contract.WriteOptions{Durability: contract.Async}
	do := func(ops ...contract.Op) {
		t.Helper()
		for _, op := range ops {
			if _, err := b.Apply(ctx, op, async); err != nil {
				t.Fatal(err)
			}
		}
	}
	hadd := func(id string, d int64) contract.Op {
		return contract.Op{Type: contract.OpHAdd, ID: id, Fields: []counter.FieldDelta{{Name: "f", Delta: d}}}
	}
	del := func(id string) contract.Op { return contract.Op{Type: contract.OpDelete, ID: id} }
	do(add("lz", contract.KindNone, 10), hadd("lh", 10), add("lk", contract.KindNone, 1))
	tiered.NoTrim(b, true)               // committed, fields left: the replay recognises them
	if err := b.Flush(ctx); err != nil { // PostgreSQL: lz = 10, lh.f = 10 (life 1)
		t.Fatal(err)
	}
	tiered.NoTrim(b, false)
	// One cycle: life 1 added to, deleted, life 2 created (and lk only
	// added to: its life 1 goes on).
	do(add("lz", contract.KindNone, 1), del("lz"), add("lz", contract.KindNone, 2),
		hadd("lh", 1), del("lh"), hadd("lh", 2), add("lk", contract.KindNone, 4))
	fail.Store(true) // killed before that cycle commits
	if err := b.Flush(ctx); err == nil {
		t.Fatal("flush committed")
	}
	saved, err := tiered.Journal(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	replayOnAnotherNode(t, e, b, tweak, &fail, saved, "generations", func(b2 *tiered.Backend) {
		t.Helper()
		for _, c := range []struct {
			id    string
			value int64
		}{{"lz", 2}, {"lk", 5}} {
			if rec, found, err := b2.Postgres().Load(ctx, c.id); err != nil || !found || rec.Value != c.value {
				t.Errorf("PostgreSQL after the replay: %s = %+v, %v, %v; want %d (as Redis)", c.id, rec, found, err, c.value)
			}
		}
		if rec, found, err := b2.Postgres().Load(ctx, "lh"); err != nil || !found || len(rec.Fields) != 1 || rec.Fields["f"] != 2 {
			t.Errorf("PostgreSQL after the replay: lh = %+v, %v, %v; want f=2 (as Redis)", rec, found, err)
		}
	})
	e.flushRedis(t)
	b3 := e.open(t, func(o *tiered.Options) { tweak(o); o.NodeID = "t3" })
	if v := view(t, b3, "lz"); !v.Exists || v.Value != 2 {
		t.Errorf("lz read through after the replay = %+v, want 2", v)
	}
	// The life goes on: an add after the reload is kept.
	apply(t, b3, add("lz", contract.KindNone, 1))
	if err := b3.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if rec, _, err := b3.Postgres().Load(ctx, "lz"); err != nil || rec.Value != 3 {
		t.Errorf("PostgreSQL after a later add: lz = %+v, %v; want 3", rec, err)
	}
}

// testJournalReplayAfterFlushAll: a node killed before its writes
// committed leaves them in the journal; another node FLUSHALLs before the
// replay. The replayed writes were made before the FLUSHALL and must not
// come back: their lives are below the flush epoch's floor.
func testJournalReplayAfterFlushAll(t *testing.T, s setup) {
	ctx := context.Background()
	var fail atomic.Bool
	tweak := crashableOptions(&fail)
	e := s.env(t, tweak)
	b := e.b
	fail.Store(true)
	plainRound(t, b, 0, 40)
	markedRound(t, b, 0, 40)
	if n := journalLen(t, b); n == 0 {
		t.Fatal("no journal before the crash")
	}
	_ = b.Close() // killed: its last flush fails too
	fail.Store(false)
	b2 := e.open(t, func(o *tiered.Options) { tweak(o); o.NodeID = "t2" })
	if err := b2.FlushAll(ctx, contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	recoverJournal(t, b2, "fields")
	if tiered.JournalReplays(b2) == 0 {
		t.Fatal("nothing replayed")
	}
	if n, err := b2.Len(ctx); err != nil || n != 0 {
		ids, _, _ := b2.Scan(ctx, 0, "", 10)
		t.Errorf("len after the FLUSHALL and the replay of writes made before it = %d (%q), %v; want 0", n, ids, err)
	}
	e.flushRedis(t)
	for _, id := range []string{"pa:1", "ph:1", "ps:1", "pset:1", "v:1", "h:1"} {
		if v := view(t, b2, id); v.Exists {
			t.Errorf("cold read of %s after the FLUSHALL and the replay = %+v, want missing", id, v)
		}
	}
}
