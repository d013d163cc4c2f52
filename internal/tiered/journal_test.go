package tiered_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/tiered"
)

// markedRound applies events from..to-1 once each, marked (event k adds
// 1 to v:<k%7> and to field f<k%3> of h:<k%7>), asynchronously, one op
// per counter.
func markedRound(t *testing.T, b *tiered.Backend, from, to int) {
	t.Helper()
	var ops []contract.MarkedOp
	for c := range 7 {
		add := contract.MarkedOp{Op: contract.Op{Type: contract.OpAdd, ID: fmt.Sprintf("v:%d", c), Kind: contract.KindCounter}}
		hadd := contract.MarkedOp{Op: contract.Op{Type: contract.OpHAdd, ID: fmt.Sprintf("h:%d", c)}}
		fields := map[string]int64{}
		for k := from; k < to; k++ {
			if k%7 != c {
				continue
			}
			add.Op.Delta++
			add.Marks = append(add.Marks, fmt.Sprintf("e%d", k))
			hadd.Marks = append(hadd.Marks, fmt.Sprintf("e%d", k))
			fields[fmt.Sprintf("f%d", k%3)]++
		}
		for f, d := range fields {
			hadd.Op.Fields = append(hadd.Op.Fields, counter.FieldDelta{Name: f, Delta: d})
		}
		if len(add.Marks) > 0 {
			ops = append(ops, add, hadd)
		}
	}
	seen, err := b.ApplyCounterMarked(context.Background(), ops, time.Hour, contract.WriteOptions{Durability: contract.Async})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range seen {
		if len(s) > 0 {
			t.Fatalf("op %d: marks %v seen", i, s)
		}
	}
}

// pgMatchesTruth checks every counter of markedRound's events 0..n-1 in
// PostgreSQL (and in Redis through b).
func pgMatchesTruth(t *testing.T, b *tiered.Backend, n int) {
	t.Helper()
	ctx := context.Background()
	for c := range 7 {
		want := int64(0)
		fields := map[string]int64{}
		for k := range n {
			if k%7 == c {
				want++
				fields[fmt.Sprintf("f%d", k%3)]++
			}
		}
		id := fmt.Sprintf("v:%d", c)
		if v := view(t, b, id); v.Value != want {
			t.Errorf("%s = %d in Redis, want %d", id, v.Value, want)
		}
		rec, ok, err := b.Postgres().Load(ctx, id)
		if err != nil || !ok || rec.Value != want {
			t.Errorf("%s = %d in PostgreSQL (%v, %v), want %d", id, rec.Value, ok, err, want)
		}
		hid := fmt.Sprintf("h:%d", c)
		hrec, ok, err := b.Postgres().Load(ctx, hid)
		if err != nil || !ok {
			t.Errorf("%s not in PostgreSQL (%v)", hid, err)
			continue
		}
		for f, w := range fields {
			if hrec.Fields[f] != w {
				t.Errorf("%s %s = %d in PostgreSQL, want %d", hid, f, hrec.Fields[f], w)
			}
		}
	}
}

func journalLen(t *testing.T, b *tiered.Backend) int {
	t.Helper()
	j, err := tiered.Journal(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range j {
		n += len(m)
	}
	return n
}

// testJournalReplaysAfterCrash: a node whose marked writes ran in Redis
// dies before they commit in PostgreSQL (its commits fail from then on,
// and it never trims), another node replays its journal once its lease
// is gone: PostgreSQL holds exactly what Redis does. Writes whose batch
// had committed but whose journal entries were left (a crash between
// the commit and the trim) are not applied again, nor is anything when
// the whole journal is replayed a second time.
func testJournalReplaysAfterCrash(t *testing.T, s setup) {
	ctx := context.Background()
	var fail atomic.Bool
	tweak := crashableOptions(&fail)
	e := s.env(t, tweak)
	b := e.b
	markedRound(t, b, 0, 100)
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := journalLen(t, b); n != 0 {
		t.Fatalf("%d journal entries left after a commit", n)
	}
	// Committed, entries left.
	tiered.NoTrim(b, true)
	markedRound(t, b, 100, 250)
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Applied in Redis, never committed.
	fail.Store(true)
	markedRound(t, b, 250, 400)
	if err := b.Flush(ctx); err == nil {
		t.Fatal("flush committed")
	}
	markedRound(t, b, 400, 500) // not even tried
	saved, err := tiered.Journal(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if n := journalLen(t, b); n == 0 {
		t.Fatal("no journal entries")
	}
	replayOnAnotherNode(t, e, b, tweak, &fail, saved, "entries", func(b2 *tiered.Backend) { pgMatchesTruth(t, b2, 500) })
}

// plainRound applies events from..to-1, each with plain (unmarked) async
// writes: an add of k to pa:<k%5>, an add of 1 to the sharded ps:<k%3>,
// a hash add of k to field f<k%3> of ph:<k%4>, a set of pset:<k%2> to
// 10k+1, and an add of 2 to pk:<k%3> under the idempotency key key-<k>,
// sent twice.
func plainRound(t *testing.T, b *tiered.Backend, from, to int) {
	t.Helper()
	ctx := context.Background()
	async := contract.WriteOptions{Durability: contract.Async}
	for k := from; k < to; k++ {
		ops := []contract.Op{
			{Type: contract.OpAdd, ID: fmt.Sprintf("pa:%d", k%5), Delta: int64(k)},
			{Type: contract.OpAdd, ID: fmt.Sprintf("ps:%d", k%3), Kind: contract.KindSharded, Shards: 4, Delta: 1},
			{Type: contract.OpHAdd, ID: fmt.Sprintf("ph:%d", k%4), Fields: []counter.FieldDelta{{Name: fmt.Sprintf("f%d", k%3), Delta: int64(k)}}},
			{Type: contract.OpSet, ID: fmt.Sprintf("pset:%d", k%2), Value: int64(10*k + 1)},
		}
		for _, op := range ops {
			if _, err := b.Apply(ctx, op, async); err != nil {
				t.Fatalf("event %d: %s: %v", k, op.ID, err)
			}
		}
		keyed := contract.WriteOptions{Durability: contract.Async, IdempotencyKey: fmt.Sprintf("key-%d", k)}
		for range 2 {
			if _, err := b.Apply(ctx, contract.Op{Type: contract.OpAdd, ID: fmt.Sprintf("pk:%d", k%3), Delta: 2}, keyed); err != nil {
				t.Fatalf("event %d: keyed: %v", k, err)
			}
		}
	}
}

// plainMatchesTruth checks every counter of plainRound's events 0..n-1
// in PostgreSQL (and in Redis through b).
func plainMatchesTruth(t *testing.T, b *tiered.Backend, n int) {
	t.Helper()
	ctx := context.Background()
	want := map[string]int64{}
	fields := map[string]map[string]int64{}
	for k := range n {
		want[fmt.Sprintf("pa:%d", k%5)] += int64(k)
		want[fmt.Sprintf("ps:%d", k%3)]++
		want[fmt.Sprintf("pset:%d", k%2)] = int64(10*k + 1)
		want[fmt.Sprintf("pk:%d", k%3)] += 2
		h := fmt.Sprintf("ph:%d", k%4)
		if fields[h] == nil {
			fields[h] = map[string]int64{}
		}
		fields[h][fmt.Sprintf("f%d", k%3)] += int64(k)
	}
	for id, w := range want {
		if v := view(t, b, id); v.Value != w {
			t.Errorf("%s = %d in Redis, want %d", id, v.Value, w)
		}
		rec, ok, err := b.Postgres().Load(ctx, id)
		if err != nil || !ok || rec.Value != w {
			t.Errorf("%s = %d in PostgreSQL (%v, %v), want %d", id, rec.Value, ok, err, w)
		}
	}
	for id, fs := range fields {
		rec, ok, err := b.Postgres().Load(ctx, id)
		if err != nil || !ok {
			t.Errorf("%s not in PostgreSQL (%v)", id, err)
			continue
		}
		for f, w := range fs {
			if rec.Fields[f] != w {
				t.Errorf("%s %s = %d in PostgreSQL, want %d", id, f, rec.Fields[f], w)
			}
		}
	}
}

// testJournalPlainReplaysAfterCrash is testJournalReplaysAfterCrash for
// the coalesced journal of plain writes (adds, sharded adds, hash adds,
// sets, keyed adds): a node dies with writes applied in Redis whose
// batches never committed; another replays them once; the generations
// that committed but were left in the journal, and the whole journal
// replayed again, apply nothing.
func testJournalPlainReplaysAfterCrash(t *testing.T, s setup) {
	ctx := context.Background()
	var fail atomic.Bool
	tweak := crashableOptions(&fail)
	e := s.env(t, tweak)
	b := e.b
	plainRound(t, b, 0, 40)
	if n := journalLen(t, b); n == 0 {
		t.Fatal("plain writes left no journal fields before their commit")
	}
	// A counter added to and deleted in one cycle: its field is trimmed
	// too (its delta is not applied).
	for _, op := range []contract.Op{{Type: contract.OpAdd, ID: "pdel", Delta: 5}, {Type: contract.OpDelete, ID: "pdel"}} {
		if _, err := b.Apply(ctx, op, contract.WriteOptions{Durability: contract.Async}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := journalLen(t, b); n != 0 {
		t.Fatalf("%d journal fields left after a commit", n)
	}
	// Committed, fields left.
	tiered.NoTrim(b, true)
	plainRound(t, b, 40, 90)
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Applied in Redis, never committed.
	fail.Store(true)
	plainRound(t, b, 90, 150)
	if err := b.Flush(ctx); err == nil {
		t.Fatal("flush committed")
	}
	plainRound(t, b, 150, 200) // not even tried
	saved, err := tiered.Journal(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	replayOnAnotherNode(t, e, b, tweak, &fail, saved, "generations", func(b2 *tiered.Backend) { plainMatchesTruth(t, b2, 200) })
}

// crashableOptions are the options of the journal's crash tests: commits
// only when the test flushes, refused while fail is set (the node is
// "killed" between Redis and PostgreSQL), short leases, no recovery
// rounds but the test's.
func crashableOptions(fail *atomic.Bool) func(*tiered.Options) {
	return func(o *tiered.Options) {
		o.FlushInterval = time.Hour
		o.JournalLease = 300 * time.Millisecond
		o.JournalRecoverInterval = time.Hour
		o.Postgres.BeforeCommit = func(string) error {
			if fail.Load() {
				return fmt.Errorf("killed before the commit")
			}
			return nil
		}
	}
}

// recoverJournal runs b's recovery rounds (no sweep) until the journal is
// empty: a dead node's lease runs out within JournalLease, and a round
// then finds it among the registered instances. what names the journal's
// fields in the failure.
func recoverJournal(t *testing.T, b *tiered.Backend, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for journalLen(t, b) > 0 && time.Now().Before(deadline) {
		if err := tiered.RecoverDead(context.Background(), b, false); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := journalLen(t, b); n != 0 {
		t.Fatalf("%d journal %s left after recovery", n, what)
	}
}

// replayOnAnotherNode closes b (its last flush fails too: the process is
// gone), lets another node replay its journal once its lease ran out and
// checks PostgreSQL with match; then replays the whole journal saved
// before the crash again, which must apply nothing (each of what, entries
// or generations, recognised as applied), and checks again.
func replayOnAnotherNode(t *testing.T, e *env, b *tiered.Backend, tweak func(*tiered.Options), fail *atomic.Bool, saved map[string]map[string]string, what string, match func(*tiered.Backend)) {
	t.Helper()
	ctx := context.Background()
	_ = b.Close()
	fail.Store(false)
	b2 := e.open(t, func(o *tiered.Options) { tweak(o); o.NodeID = "t2" })
	recoverJournal(t, b2, what)
	match(b2)
	dup0 := b2.Postgres().Stats().JournalDuplicates
	if dup0 == 0 {
		t.Errorf("the committed %s were not recognised as applied", what)
	}
	if err := tiered.RestoreJournal(ctx, b2, saved); err != nil {
		t.Fatal(err)
	}
	n, err := b2.RecoverJournals(ctx)
	if err != nil || n == 0 {
		t.Fatalf("replayed %d (%v)", n, err)
	}
	if got := b2.Postgres().Stats().JournalDuplicates - dup0; got != uint64(n) {
		t.Errorf("%d of %d replayed %s recognised as applied", got, n, what)
	}
	match(b2)
}
