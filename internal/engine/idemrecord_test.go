package engine

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
)

// FuzzDecodeIdemRecord: any stored bytes either decode to a well-formed
// record, which encodes back to the same record, or fail with ErrCorrupt;
// never a panic, never a replay of garbage.
func FuzzDecodeIdemRecord(f *testing.F) {
	ok := IdemRecord{Key: "k", FP: 7, Created: 1, Results: []contract.Result{{ID: "a", Value: 3}}}
	f.Add(ok.Encode())
	f.Add((&IdemRecord{FP: 1, Pending: true}).Encode())
	f.Add([]byte(`{"fp":"x","results":[{}]}`))
	f.Add([]byte(`{"fp":1}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeIdemRecord(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if !r.Pending && len(r.Results) == 0 {
			t.Fatalf("accepted a record without results: %+v", r)
		}
		r2, err := DecodeIdemRecord(r.Encode())
		if err != nil || !reflect.DeepEqual(r, r2) {
			t.Fatalf("round trip: %+v -> %+v (%v)", r, r2, err)
		}
	})
}

func TestIdemRecordReplay(t *testing.T) {
	ops := []contract.Op{{Type: contract.OpAdd, ID: "a", Delta: 1}}
	r := IdemRecord{FP: Fingerprint(ops), Results: []contract.Result{{ID: "a", Value: 1, Changed: true}}}
	got, err := r.Replay("k", Fingerprint(ops))
	if err != nil || len(got) != 1 || !got[0].Replayed || got[0].Value != 1 {
		t.Fatalf("Replay = %+v, %v", got, err)
	}
	if r.Results[0].Replayed {
		t.Fatal("Replay changed the record")
	}
	other := []contract.Op{{Type: contract.OpAdd, ID: "a", Delta: 2}}
	if _, err := r.Replay("k", Fingerprint(other)); !errors.Is(err, contract.ErrIdempotencyReuse) {
		t.Fatalf("Replay with another request = %v, want ErrIdempotencyReuse", err)
	}
}

// genOp draws an op with every field the fingerprint covers.
func genOp(t *rapid.T) contract.Op {
	str := rapid.StringN(0, 4, -1)
	op := contract.Op{
		Type: contract.OpType(rapid.IntRange(1, 8).Draw(t, "type")), ID: str.Draw(t, "id"),
		Kind: contract.Kind(rapid.IntRange(0, 6).Draw(t, "kind")), Delta: rapid.Int64Range(-2, 2).Draw(t, "delta"),
		Value: rapid.Int64Range(-2, 2).Draw(t, "value"), ExpectedVersion: rapid.Uint64Range(0, 2).Draw(t, "ev"),
		CheckVersion: rapid.Bool().Draw(t, "cv"), SetMode: contract.SetMode(rapid.IntRange(0, 2).Draw(t, "mode")),
		KeepTTL: rapid.Bool().Draw(t, "keep"), TTL: time.Duration(rapid.IntRange(-1, 2).Draw(t, "ttl")),
		Shards: rapid.IntRange(0, 2).Draw(t, "shards"), Shard: rapid.IntRange(0, 2).Draw(t, "shard"),
		HLLPrecision: uint8(rapid.IntRange(0, 2).Draw(t, "p")), Estimate: rapid.Bool().Draw(t, "est"),
		Window: counter.WindowSpec{Granularity: time.Duration(rapid.IntRange(0, 2).Draw(t, "g")),
			Span: time.Duration(rapid.IntRange(0, 2).Draw(t, "w")), Fixed: rapid.Bool().Draw(t, "fixed")},
	}
	for _, it := range rapid.SliceOfN(str, 0, 2).Draw(t, "items") {
		op.Items = append(op.Items, []byte(it))
	}
	op.Sources = rapid.SliceOfN(str, 0, 2).Draw(t, "sources")
	for _, n := range rapid.SliceOfN(str, 0, 2).Draw(t, "fields") {
		op.Fields = append(op.Fields, counter.FieldDelta{Name: n, Delta: rapid.Int64Range(-1, 1).Draw(t, "fd")})
	}
	op.Names = rapid.SliceOfN(str, 0, 2).Draw(t, "names")
	op.At = rapid.Int64Range(0, 2).Draw(t, "at")
	return op
}

// TestFingerprintProperty: equal requests fingerprint equal, and requests
// that differ (in any field, including how strings split between fields)
// fingerprint differently.
func TestFingerprintProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := rapid.SliceOfN(rapid.Custom(genOp), 1, 3).Draw(t, "a")
		b := rapid.SliceOfN(rapid.Custom(genOp), 1, 3).Draw(t, "b")
		if Fingerprint(a) != Fingerprint(normalize(a)) {
			t.Fatal("a copy of a request fingerprints differently")
		}
		same := reflect.DeepEqual(normalize(a), normalize(b))
		if (Fingerprint(a) == Fingerprint(b)) != same {
			t.Fatalf("Fingerprint equal = %v, requests equal = %v\na=%+v\nb=%+v", !same, same, a, b)
		}
	})
}

// normalize makes nil and empty slices compare equal (they are the same
// request).
func normalize(ops []contract.Op) []contract.Op {
	out := make([]contract.Op, len(ops))
	for i, op := range ops {
		if len(op.Items) == 0 {
			op.Items = nil
		}
		if len(op.Sources) == 0 {
			op.Sources = nil
		}
		if len(op.Fields) == 0 {
			op.Fields = nil
		}
		if len(op.Names) == 0 {
			op.Names = nil
		}
		out[i] = op
	}
	return out
}

// TestIdemRecordReadsBeforeUnification: a record stored on disk by the
// engine before the one record format (its fingerprint function and JSON,
// captured from that version) still replays the first result, so a retry
// that spans the upgrade is not applied twice.
func TestIdemRecordReadsBeforeUnification(t *testing.T) {
	ops := []contract.Op{
		{Type: contract.OpAdd, ID: "page_views:a", Delta: 5, Kind: contract.KindPN, TTL: time.Hour},
		{Type: contract.OpHAdd, ID: "h", Fields: []counter.FieldDelta{{Name: "f", Delta: -2}}},
		{Type: contract.OpPFAdd, ID: "u", Items: [][]byte{[]byte("x"), []byte("y")}, HLLPrecision: 12},
	}
	const oldFP = 11395214067388251298
	if fp := Fingerprint(ops); fp != oldFP {
		t.Fatalf("Fingerprint = %d, the engine stored %d for the same request", fp, uint64(oldFP))
	}
	stored := `{"fp":11395214067388251298,"created":1700000000000000000,"results":[{"id":"page_views:a","kind":3,"value":5,"version":1,"changed":true}]}`

	e := openMem(t, func(c *Config) {
		c.Clock = func() time.Time { return time.Unix(0, 1700000000000000000).Add(time.Minute) }
	})
	if err := e.db.Set(idemKey("k"), []byte(stored), nil); err != nil {
		t.Fatal(err)
	}
	op := contract.Op{Type: contract.OpAdd, ID: "page_views:a", Delta: 5, Kind: contract.KindPN, TTL: time.Hour}
	res, err := e.Apply(bg, op, contract.WriteOptions{IdempotencyKey: "k"})
	if err == nil || !errors.Is(err, contract.ErrIdempotencyReuse) {
		t.Fatalf("a different request under the stored key = %+v, %v; want ErrIdempotencyReuse", res, err)
	}
	got, err := e.ApplyBatch(bg, ops, contract.WriteOptions{IdempotencyKey: "k"})
	if err != nil || len(got) != 1 || !got[0].Replayed || got[0].Value != 5 {
		t.Fatalf("retry of the stored request = %+v, %v; want the stored result replayed", got, err)
	}
	if v, _ := e.Get("page_views:a"); v.Exists {
		t.Fatalf("the replay applied the request: %+v", v)
	}
}
