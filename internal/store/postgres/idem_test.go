package postgres

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

// TestIdemRecords: a batch's idempotency records commit with its deltas
// (a batch applied twice writes them once, a failed one not at all); a
// key's first unexpired record wins over a later one; an expired record
// is not read, is replaced by a new one, and is purged.
func TestIdemRecords(t *testing.T) {
	s := newStore(t, Options{})
	ctx := ctxT(t, 30*time.Second)
	now := time.Now().UTC().Truncate(time.Microsecond)
	rec := func(key, body string, created time.Time) IdemRecord {
		return IdemRecord{Key: key, Record: []byte(body), Created: created, Expires: created.Add(time.Hour)}
	}
	get := func(key string, at time.Time) string {
		t.Helper()
		b, ok, err := s.IdemRecord(ctx, key, at)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return ""
		}
		return string(b)
	}
	b1 := Batch{ID: "idem-1", Deltas: []Delta{{CounterID: "i:c", Shard: -1, Delta: 5, At: now}},
		Idem: []IdemRecord{rec("k1", "first", now), rec("k2", "two", now), rec("k1", "dup in batch", now)}}
	for range 2 {
		if _, err := s.Apply(ctx, b1); err != nil {
			t.Fatal(err)
		}
	}
	if v := value(t, s, "i:c"); v != 5 {
		t.Fatalf("value = %d, want 5", v)
	}
	if got := get("k1", now); got != "first" {
		t.Fatalf("k1 = %q, want the batch's first record", got)
	}
	if _, err := s.Apply(ctx, Batch{ID: "idem-2", Idem: []IdemRecord{rec("k1", "later", now.Add(time.Minute))}}); err != nil {
		t.Fatal(err)
	}
	if got := get("k1", now); got != "first" {
		t.Fatalf("k1 after a later record = %q, want the first kept", got)
	}
	// A batch that fails writes neither its deltas nor its records.
	bad := Batch{ID: "idem-3", Deltas: []Delta{{CounterID: "", Delta: 1}}, Idem: []IdemRecord{rec("k3", "x", now)}}
	if _, err := s.Apply(ctx, bad); err == nil {
		t.Fatal("a batch with a bad delta applied")
	}
	if got := get("k3", now); got != "" {
		t.Fatalf("a failed batch's record = %q", got)
	}
	// Past its expiry a record is not read; a new record takes the key.
	late := now.Add(2 * time.Hour)
	if got := get("k1", late); got != "" {
		t.Fatalf("expired k1 = %q, want none", got)
	}
	if _, err := s.Apply(ctx, Batch{ID: "idem-4", Idem: []IdemRecord{rec("k1", "new", late)}}); err != nil {
		t.Fatal(err)
	}
	if got := get("k1", late); got != "new" {
		t.Fatalf("k1 after expiry = %q, want the new record", got)
	}
	if last, err := s.LastIdemExpiry(ctx); err != nil || !last.Equal(late.Add(time.Hour)) {
		t.Fatalf("last expiry = %v, %v; want %v", last, err, late.Add(time.Hour))
	}
	n, err := s.PurgeIdem(ctx, now.Add(90*time.Minute))
	if err != nil || n != 1 {
		t.Fatalf("purge = %d, %v; want k2 purged", n, err)
	}
	if c := queryInt(t, s, `SELECT count(*) FROM idempotency_records`); c != 1 {
		t.Fatalf("%d records left, want 1", c)
	}
	if _, err := s.PurgeIdem(ctx, late.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if last, err := s.LastIdemExpiry(ctx); err != nil || !last.IsZero() {
		t.Fatalf("last expiry without records = %v, %v; want zero", last, err)
	}
	for i, want := range []bool{false, true, true} {
		if before, err := s.MarkSlot(ctx, 42); err != nil || before != want {
			t.Fatalf("MarkSlot #%d = %v, %v; want %v", i, before, err, want)
		}
	}
}

// TestAggregatorHoldKeepsRecordWithDeltas: a flush started while a
// holder has handed over a delta but not yet its record waits for the
// holder, so the record commits in the batch of its delta; until then it
// is readable from the aggregator, afterwards from the store.
func TestAggregatorHoldKeepsRecordWithDeltas(t *testing.T) {
	s := newStore(t, Options{})
	a := s.NewAggregator(AggregatorOptions{FlushInterval: -1, MaxHoldWait: time.Minute})
	ctx := ctxT(t, 60*time.Second)
	for i := range 5 {
		key := fmt.Sprintf("k%d", i)
		release := a.Hold()
		a.Add("h:"+key, KindCounter, -1, 1, time.Time{})
		flushed := make(chan error, 1)
		go func() { flushed <- a.Flush(ctx) }()
		time.Sleep(20 * time.Millisecond) // let the flush try to cut (it must wait)
		a.AddIdem(IdemRecord{Key: key, Record: []byte(key), Created: time.Now(), Expires: time.Now().Add(time.Hour)})
		if r, ok := a.Idem(key); !ok || !bytes.Equal(r, []byte(key)) {
			t.Fatalf("record %q not readable from the aggregator: %q %v", key, r, ok)
		}
		release()
		if err := <-flushed; err != nil {
			t.Fatal(err)
		}
		if err := a.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if _, ok := a.Idem(key); ok {
			t.Fatalf("committed record %q still read from the aggregator", key)
		}
		if got, ok, err := s.IdemRecord(ctx, key, time.Now()); err != nil || !ok || string(got) != key {
			t.Fatalf("stored record %q = %q, %v, %v", key, got, ok, err)
		}
	}
	// Every batch holds as many records as deltas (one counter each): no
	// record was cut from its delta.
	if n := queryInt(t, s, `SELECT count(*) FROM counter_sync_batches b
		LEFT JOIN (SELECT batch_id, count(*) AS n FROM idempotency_records GROUP BY batch_id) r USING (batch_id)
		WHERE b.deltas <> coalesce(r.n, 0)`); n != 0 {
		t.Fatalf("%d batches whose records and deltas differ", n)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestAggregatorHoldWaitIsBounded: a holder that does not let go (its
// store hangs) keeps a flush waiting at most MaxHoldWait: the flush cuts
// what it has, the holder's later record goes into the next batch, and
// new holders get in again.
func TestAggregatorHoldWaitIsBounded(t *testing.T) {
	s := newStore(t, Options{})
	a := s.NewAggregator(AggregatorOptions{FlushInterval: -1, MaxHoldWait: 20 * time.Millisecond})
	ctx := ctxT(t, 60*time.Second)
	release := a.Hold()
	a.Add("b:c", KindCounter, -1, 1, time.Time{})
	if err := a.Flush(ctx); err != nil { // returns although the holder holds on
		t.Fatal(err)
	}
	if v := value(t, s, "b:c"); v != 1 {
		t.Fatalf("value after the bounded wait = %d, want 1", v)
	}
	a.AddIdem(IdemRecord{Key: "late", Record: []byte("late"), Created: time.Now(), Expires: time.Now().Add(time.Hour)})
	release()
	release() // a second call does nothing
	other := a.Hold()
	other()
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := s.IdemRecord(ctx, "late", time.Now()); err != nil || !ok || string(got) != "late" {
		t.Fatalf("the late record = %q, %v, %v", got, ok, err)
	}
}
