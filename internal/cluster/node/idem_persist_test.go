package node

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
)

// TestKeyedRecordSurvivesReplicaRestart: a keyed sync write applied
// through n1 leaves its record, with its state, on n2 and n3. All three
// nodes stop (their memory is gone); n2 restarts alone on its data and the
// client retries there: n2 answers from the record it kept on disk with the
// state (the engine's own table on n2 never saw the key), so the write
// counts once. Before records were stored, the retry applied again.
func TestKeyedRecordSurvivesReplicaRestart(t *testing.T) {
	for _, kind := range []contract.Kind{contract.KindCounter, contract.KindPN, contract.KindSharded} {
		t.Run(kind.String(), func(t *testing.T) {
			c := newTestCluster(t, "n1", "n2", "n3")
			ctx := context.Background()
			id := "persist:" + kind.String()
			op := contract.Op{Type: contract.OpAdd, ID: id, Delta: 5, Kind: kind}
			wo := contract.WriteOptions{Durability: contract.Sync, IdempotencyKey: "persist-" + kind.String()}
			first, err := c.node("n1").n.Apply(ctx, op, wo)
			if err != nil || first.Replayed {
				t.Fatalf("first attempt via n1: %+v, %v", first, err)
			}
			fp := engine.Fingerprint([]contract.Op{op})
			for _, tn := range c.running() {
				eventually(t, 10*time.Second, tn.id+" holds the record and the state", func() bool {
					st, ok, err := tn.n.store.Export(id)
					_, rec := tn.n.idem.record(wo.IdempotencyKey, fp)
					return err == nil && ok && st.ID == id && rec
				})
			}
			dir := c.node("n2").dir
			for _, id := range []string{"n1", "n2", "n3"} {
				c.kill(id)
			}
			n2 := c.start("n2", dir)
			c.waitRing("n2")
			if _, ok := n2.n.idem.record(wo.IdempotencyKey, fp); !ok {
				t.Fatal("n2 did not load the record from its disk")
			}
			res, err := n2.n.Apply(ctx, op, wo)
			if err != nil || !res.Replayed || res.Value != first.Value {
				t.Fatalf("retry via the restarted n2: %+v, %v; want a replay of %+v", res, err, first)
			}
			if v, err := n2.n.Get(ctx, id); err != nil || v.Value != 5 {
				t.Fatalf("n2 reads %+v, %v; want 5", v, err)
			}
		})
	}
}

// TestKeyedRetryFindsRecordOnAnotherReplica: n1 applies a keyed pn/sharded
// add and dies after its push reached n2 only. The client retries through
// n3, which holds neither the state nor the record: it asks the other
// replicas first (lookupRecord), finds n1's record on n2 and replays it, so
// every node reads the add once, at once and after the push settles.
func TestKeyedRetryFindsRecordOnAnotherReplica(t *testing.T) {
	for _, kind := range []contract.Kind{contract.KindPN, contract.KindSharded} {
		t.Run(kind.String(), func(t *testing.T) {
			// No anti-entropy: it would bring n2's record to n3.
			c := newClusterNoAntiEntropy(t, "n1", "n2", "n3")
			ctx := context.Background()
			id := "lookup:" + kind.String()
			base := contract.Op{Type: contract.OpAdd, ID: id, Delta: 1, Kind: kind}
			if _, err := c.node("n3").n.Apply(ctx, base, syncWO); err != nil {
				t.Fatal(err)
			}
			op := base
			op.Delta = 7
			wo := contract.WriteOptions{Durability: contract.Sync, IdempotencyKey: "lookup-" + kind.String()}
			n1 := c.node("n1")
			// n1 applies as applyKeyed would, then pushes to n2 alone.
			res, err := n1.eng.Apply(ctx, op, wo)
			if err != nil {
				t.Fatal(err)
			}
			rec := newIdemRecord("n1", wo.IdempotencyKey, engine.Fingerprint([]contract.Op{op}), []contract.Op{op}, []contract.Result{res})
			n1.n.keepRecords(ctx, []idemRecord{*rec})
			if err := n1.n.pushStates(ctx, "n2", n1.n.exportIDs([]string{id}), true); err != nil {
				t.Fatal(err)
			}
			c.kill("n1")
			c.waitRing("n2", "n3")
			n3 := c.node("n3")
			if _, ok := n3.n.idem.record(wo.IdempotencyKey, rec.FP); ok {
				t.Fatal("n3 already holds the record: the test does not test the lookup")
			}
			got, err := n3.n.Apply(ctx, op, wo)
			if err != nil || !got.Replayed || got.Value != res.Value {
				t.Fatalf("retry via n3: %+v, %v; want a replay of %+v", got, err, res)
			}
			for _, tn := range c.running() {
				eventually(t, 10*time.Second, tn.id+" reads the add once", func() bool {
					v, err := tn.n.Get(ctx, id)
					return err == nil && v.Value == 8
				})
			}
			time.Sleep(500 * time.Millisecond) // a push and an anti-entropy round
			for _, tn := range c.running() {
				if v, err := tn.n.Get(ctx, id); err != nil || v.Value != 8 {
					t.Fatalf("%s later: %+v, %v; want 8", tn.id, v, err)
				}
				if d := value(tn.n.metrics.duplicates); d != 0 {
					t.Fatalf("%s took back %v adds; nothing was applied twice", tn.id, d)
				}
			}
		})
	}
}

// TestStoredIdemRecordRoundTrip: every record survives its stored form,
// and stored bytes that are not one record (or another record's key) are
// refused as corrupt, never replayed.
func TestStoredIdemRecordRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := idemRecord{
			IdemRecord: engine.IdemRecord{
				Key:     rapid.StringMatching(`[ -~]{1,40}`).Draw(t, "key"),
				FP:      rapid.Uint64().Draw(t, "fp"),
				Created: rapid.Int64().Draw(t, "created"),
				IDs:     rapid.SliceOfN(rapid.StringMatching(`[a-z:0-9]{1,10}`), 1, 3).Draw(t, "ids"),
				Results: []contract.Result{{Kind: contract.KindPN, Value: rapid.Int64().Draw(t, "value"), Version: rapid.Uint64().Draw(t, "version"), Changed: true}},
			},
			Origin: rapid.SampledFrom([]string{"", "n1", "n2"}).Draw(t, "origin"),
		}
		if rapid.Bool().Draw(t, "undo") {
			r.Undo = []contract.Op{{Type: contract.OpAdd, ID: r.IDs[0], Kind: contract.KindPN, Delta: -rapid.Int64Range(1, 1e9).Draw(t, "delta")}}
		}
		if rapid.Bool().Draw(t, "wrote") {
			r.Wrote = map[string][]uint64{r.IDs[0]: {rapid.Uint64().Draw(t, "w")}}
		}
		s := storedOf(r)
		got, err := decodeStored(s)
		if err != nil {
			t.Fatalf("decode %s: %v", s.Data, err)
		}
		if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", r) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, r)
		}
		other := s
		other.Key = idemID{r.Key + "x", r.FP}.storedKey()
		if _, err := decodeStored(other); err == nil {
			t.Fatal("a record under another key decoded")
		}
	})
}

// FuzzDecodeStoredIdem: arbitrary stored bytes decode to a record with
// results under its own key, or to an engine.ErrCorrupt error; never a
// panic.
func FuzzDecodeStoredIdem(f *testing.F) {
	r := idemRecord{IdemRecord: engine.IdemRecord{Key: "k", FP: 3, Created: 1, Results: []contract.Result{{Value: 1}}}, Origin: "n1"}
	s := storedOf(r)
	f.Add(s.Key, s.Data)
	f.Add(s.Key, []byte(`{"key":"k","fp":3}`))
	f.Add("idem/x", []byte(`null`))
	f.Fuzz(func(t *testing.T, key string, data []byte) {
		got, err := decodeStored(engine.StoredRecord{Key: key, Data: data})
		if err != nil {
			if !errors.Is(err, engine.ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if len(got.Results) == 0 || (idemID{got.Key, got.FP}).storedKey() != key {
			t.Fatalf("decoded %+v under key %q", got, key)
		}
	})
}

// BenchmarkKeyedPNAdd measures what a keyed pn add costs over an unkeyed
// one on a node of 3 (async): the keyed add asks the other two replicas
// for an earlier application before applying (lookupRecord) and stores its
// record.
func BenchmarkKeyedPNAdd(b *testing.B) {
	c := newTestCluster(b, "n1", "n2", "n3")
	ctx := context.Background()
	n1 := c.node("n1").n
	for _, keyed := range []bool{false, true} {
		name := map[bool]string{false: "unkeyed", true: "keyed"}[keyed]
		b.Run(name, func(b *testing.B) {
			op := contract.Op{Type: contract.OpAdd, ID: "bench:keyed:" + name, Delta: 1, Kind: contract.KindPN}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				wo := contract.WriteOptions{Durability: contract.Async}
				if keyed {
					wo.IdempotencyKey = fmt.Sprintf("bench-%d", i)
				}
				i++
				if _, err := n1.Apply(ctx, op, wo); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestStoredIdemRecordReadsJSON: a record a node stored before the binary
// record format (JSON, captured from that version) still loads with every
// cluster field, so a restart across the upgrade keeps its records; and
// what a node stores now is the binary form, read back the same.
func TestStoredIdemRecordReadsJSON(t *testing.T) {
	const stored = `{"key":"retry-7","fp":42,"created":1700000000000000000,"ids":["p"],"results":[{"id":"p","kind":3,"value":5,"version":3,"changed":true}],"origin":"n1","undo":[{"Type":1,"ID":"p","Kind":3,"Delta":-5,"Float":"","Value":0,"ExpectedVersion":0,"CheckVersion":false,"SetMode":0,"KeepTTL":false,"TTL":0,"ExpireAt":0,"Items":null,"Sources":null,"Fields":null,"Names":null,"Window":{"Granularity":0,"Span":0,"Fixed":false},"Shards":0,"Shard":0,"HLLPrecision":0,"Estimate":false}],"wrote":{"q":[1099511627776]}}`
	want := idemRecord{
		IdemRecord: engine.IdemRecord{Key: "retry-7", FP: 42, Created: 1700000000000000000, IDs: []string{"p"},
			Results: []contract.Result{{ID: "p", Kind: contract.KindPN, Value: 5, Version: 3, Changed: true}}},
		Origin: "n1", Undo: []contract.Op{{Type: contract.OpAdd, ID: "p", Kind: contract.KindPN, Delta: -5}},
		Wrote: map[string][]uint64{"q": {1 << 40}},
	}
	got, err := decodeStored(engine.StoredRecord{Key: "idem/000000000000002a/retry-7", Data: []byte(stored)})
	if err != nil || fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Fatalf("JSON record = %+v, %v\nwant %+v", got, err, want)
	}
	s := storedOf(want)
	if s.Key != "idem/000000000000002a/retry-7" || len(s.Data) == 0 || s.Data[0] == '{' || len(s.Data) >= len(stored)/3 {
		t.Fatalf("stored now as %q (%d bytes), want the binary form", s.Data, len(s.Data))
	}
	if again, err := decodeStored(s); err != nil || fmt.Sprintf("%+v", again) != fmt.Sprintf("%+v", want) {
		t.Fatalf("binary record = %+v, %v", again, err)
	}
}
