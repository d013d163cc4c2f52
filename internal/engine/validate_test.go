package engine

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
)

func TestOpValidate(t *testing.T) {
	long := strings.Repeat("f", contract.MaxFieldLen+1)
	tiered := contract.Limits{HLLPrecision: 14, RedisHashTags: true}
	cases := []struct {
		name string
		op   contract.Op
		lim  contract.Limits
		want error // nil: valid
	}{
		{"add", contract.Op{Type: contract.OpAdd, ID: "a", Delta: 1}, contract.Limits{}, nil},
		{"empty id", contract.Op{Type: contract.OpAdd}, contract.Limits{}, contract.ErrInvalidID},
		{"control byte", contract.Op{Type: contract.OpAdd, ID: "a\n"}, contract.Limits{}, contract.ErrInvalidID},
		{"leading brace embedded", contract.Op{Type: contract.OpAdd, ID: "}x"}, contract.Limits{}, nil},
		{"leading brace hash tags", contract.Op{Type: contract.OpAdd, ID: "}x"}, tiered, contract.ErrInvalidID},
		{"add to hash kind", contract.Op{Type: contract.OpAdd, ID: "a", Kind: contract.KindHash}, contract.Limits{}, contract.ErrWrongKind},
		{"add to unknown kind", contract.Op{Type: contract.OpAdd, ID: "a", Kind: 99}, contract.Limits{}, contract.ErrWrongKind},
		{"too many shards", contract.Op{Type: contract.OpAdd, ID: "a", Shards: 5000}, contract.Limits{}, contract.ErrInvalidArgument},
		{"shard out of range", contract.Op{Type: contract.OpAdd, ID: "a", Shard: 5000}, contract.Limits{}, contract.ErrInvalidArgument},
		{"negative shard", contract.Op{Type: contract.OpAdd, ID: "a", Shard: -1}, contract.Limits{}, contract.ErrInvalidArgument},
		{"bad window", contract.Op{Type: contract.OpAdd, ID: "a", Kind: contract.KindWindow, Window: counter.WindowSpec{Granularity: time.Second, Span: time.Millisecond}}, contract.Limits{}, contract.ErrInvalidArgument},
		{"window 1ms over 100s", contract.Op{Type: contract.OpAdd, ID: "a", Kind: contract.KindWindow, Window: counter.WindowSpec{Granularity: time.Millisecond, Span: 100 * time.Second}}, contract.Limits{}, contract.ErrInvalidArgument},
		{"window at the bucket bound", contract.Op{Type: contract.OpAdd, ID: "a", Kind: contract.KindWindow, Window: counter.WindowSpec{Granularity: time.Second, Span: time.Hour}}, contract.Limits{}, nil},
		{"window above a lowered bound", contract.Op{Type: contract.OpAdd, ID: "a", Kind: contract.KindWindow, Window: counter.WindowSpec{Granularity: time.Second, Span: time.Hour}}, contract.Limits{MaxWindowBuckets: 60}, contract.ErrInvalidArgument},
		{"negative set ttl", contract.Op{Type: contract.OpSet, ID: "a", TTL: -1}, contract.Limits{}, contract.ErrInvalidArgument},
		{"negative expire deletes", contract.Op{Type: contract.OpExpire, ID: "a", TTL: -1}, contract.Limits{}, nil},
		{"ttl too long", contract.Op{Type: contract.OpExpire, ID: "a", TTL: contract.MaxTTL + 1}, contract.Limits{}, contract.ErrInvalidArgument},
		{"hadd no fields", contract.Op{Type: contract.OpHAdd, ID: "a"}, contract.Limits{}, contract.ErrInvalidArgument},
		{"hadd long name", contract.Op{Type: contract.OpHAdd, ID: "a", Fields: []counter.FieldDelta{{Name: long, Delta: 1}}}, contract.Limits{}, contract.ErrInvalidArgument},
		{"hdel long name", contract.Op{Type: contract.OpHDel, ID: "a", Names: []string{long}}, contract.Limits{}, contract.ErrInvalidArgument},
		{"hadd name at limit", contract.Op{Type: contract.OpHAdd, ID: "a", Fields: []counter.FieldDelta{{Name: long[1:], Delta: 1}}}, tiered, nil},
		{"pfadd too many", contract.Op{Type: contract.OpPFAdd, ID: "a", Items: make([][]byte, contract.MaxItems+1)}, contract.Limits{}, contract.ErrInvalidArgument},
		{"bad precision", contract.Op{Type: contract.OpPFAdd, ID: "a", HLLPrecision: 2}, contract.Limits{}, contract.ErrInvalidArgument},
		{"precision 10 embedded", contract.Op{Type: contract.OpPFAdd, ID: "a", HLLPrecision: 10}, contract.Limits{}, nil},
		{"precision 10 fixed 14", contract.Op{Type: contract.OpPFAdd, ID: "a", HLLPrecision: 10}, tiered, contract.ErrInvalidArgument},
		{"pfmerge bad source", contract.Op{Type: contract.OpPFMerge, ID: "a", Sources: []string{""}}, contract.Limits{}, contract.ErrInvalidID},
		{"pfmerge brace source", contract.Op{Type: contract.OpPFMerge, ID: "a", Sources: []string{"}b"}}, tiered, contract.ErrInvalidID},
		{"unknown type", contract.Op{Type: 99, ID: "a"}, contract.Limits{}, contract.ErrInvalidArgument},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.op.Validate(c.lim)
			if c.want == nil && err != nil {
				t.Fatalf("Validate = %v, want nil", err)
			}
			if c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("Validate = %v, want %v", err, c.want)
			}
		})
	}
}

func TestValidateBatch(t *testing.T) {
	ok := contract.Op{Type: contract.OpAdd, ID: "a", Delta: 1}
	if err := contract.ValidateBatch(nil, contract.Limits{}); !errors.Is(err, contract.ErrInvalidArgument) {
		t.Errorf("empty batch: %v", err)
	}
	if err := contract.ValidateBatch([]contract.Op{ok, ok, ok}, contract.Limits{MaxBatch: 2}); !errors.Is(err, contract.ErrBatchTooLarge) {
		t.Errorf("3 ops over a limit of 2: %v", err)
	}
	var be *contract.BatchError
	if err := contract.ValidateBatch([]contract.Op{ok, {Type: contract.OpAdd}}, contract.Limits{}); !errors.As(err, &be) || be.Index != 1 || !errors.Is(err, contract.ErrInvalidID) {
		t.Errorf("bad second op: %v", err)
	}
	if err := contract.ValidateBatch([]contract.Op{ok}, contract.Limits{}); err != nil {
		t.Errorf("good batch: %v", err)
	}
}

// FuzzOpValidate: Validate never panics, and an op it accepts has a valid
// id and stays within the default limits.
func FuzzOpValidate(f *testing.F) {
	f.Add(uint8(contract.OpAdd), "a", uint8(0), int64(1), int64(0), 0, 0, uint8(0), "f")
	f.Add(uint8(contract.OpHDel), "}", uint8(6), int64(0), int64(-1), 5000, -1, uint8(3), "")
	f.Fuzz(func(t *testing.T, typ uint8, id string, kind uint8, delta, ttl int64, shards, shard int, p uint8, field string) {
		op := contract.Op{Type: contract.OpType(typ), ID: id, Kind: contract.Kind(kind), Delta: delta, TTL: time.Duration(ttl),
			Shards: shards, Shard: shard, HLLPrecision: p,
			Fields: []counter.FieldDelta{{Name: field, Delta: delta}}, Names: []string{field}, Sources: []string{field}}
		if op.Validate(contract.Limits{}) != nil {
			return
		}
		if contract.ValidateID(op.ID) != nil || len(field) > contract.MaxFieldLen || op.TTL > contract.MaxTTL || op.Shards > 1024 {
			t.Fatalf("accepted %+v", op)
		}
	})
}

// TestLoadLeavesOversizedWindow: a window stored above the bucket bound
// (1ms over 100s, 1.6 MB of ring, written before the bound existed) is
// not loaded, so not allocated; the engine opens, logs it, serves the
// other counters, and a write to the id replaces it.
func TestLoadLeavesOversizedWindow(t *testing.T) {
	clk := newClock()
	dir := t.TempDir()
	e := openNode(t, "me", dir, clk)
	mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: "ok", Delta: 3})
	old := []byte{entryFormat, byte(contract.KindWindow), 1, 0, 0, 0x41, 0x02} // version 1; window, head set
	old = binary.AppendUvarint(old, uint64(time.Millisecond))
	old = binary.AppendUvarint(old, uint64(100*time.Second))
	old = binary.AppendVarint(old, 1_700_000_000_000) // head bucket
	old = append(old, 1, 0, 10)                       // one bucket: distance 0, count 5
	if err := e.db.Set(append([]byte{prefixCounter}, "huge"...), old, nil); err != nil {
		t.Fatal(err)
	}
	e.Close()
	e = openNode(t, "me", dir, clk)
	if v := mustGet(t, e, "ok"); v.Value != 3 {
		t.Fatalf("other counter: %+v", v)
	}
	if v := mustGet(t, e, "huge"); v.Version != 0 {
		t.Fatalf("oversized window loaded: %+v", v)
	}
	mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: "huge", Kind: contract.KindWindow, Window: counter.WindowSpec{Granularity: time.Second, Span: time.Minute}, Delta: 1})
	e.Close()
	e = openNode(t, "me", dir, clk)
	if v := mustGet(t, e, "huge"); v.Value != 1 || v.Kind != contract.KindWindow {
		t.Fatalf("replaced window after reopen: %+v", v)
	}
}
