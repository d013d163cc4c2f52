package engine

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/counter"
)

func TestOpValidate(t *testing.T) {
	long := strings.Repeat("f", MaxFieldLen+1)
	tiered := Limits{HLLPrecision: 14, RedisHashTags: true}
	cases := []struct {
		name string
		op   Op
		lim  Limits
		want error // nil: valid
	}{
		{"add", Op{Type: OpAdd, ID: "a", Delta: 1}, Limits{}, nil},
		{"empty id", Op{Type: OpAdd}, Limits{}, ErrInvalidID},
		{"control byte", Op{Type: OpAdd, ID: "a\n"}, Limits{}, ErrInvalidID},
		{"leading brace embedded", Op{Type: OpAdd, ID: "}x"}, Limits{}, nil},
		{"leading brace hash tags", Op{Type: OpAdd, ID: "}x"}, tiered, ErrInvalidID},
		{"add to hash kind", Op{Type: OpAdd, ID: "a", Kind: KindHash}, Limits{}, ErrWrongKind},
		{"add to unknown kind", Op{Type: OpAdd, ID: "a", Kind: 99}, Limits{}, ErrWrongKind},
		{"too many shards", Op{Type: OpAdd, ID: "a", Shards: 5000}, Limits{}, ErrInvalidArgument},
		{"shard out of range", Op{Type: OpAdd, ID: "a", Shard: 5000}, Limits{}, ErrInvalidArgument},
		{"negative shard", Op{Type: OpAdd, ID: "a", Shard: -1}, Limits{}, ErrInvalidArgument},
		{"bad window", Op{Type: OpAdd, ID: "a", Kind: KindWindow, Window: counter.WindowSpec{Granularity: time.Second, Span: time.Millisecond}}, Limits{}, ErrInvalidArgument},
		{"window 1ms over 100s", Op{Type: OpAdd, ID: "a", Kind: KindWindow, Window: counter.WindowSpec{Granularity: time.Millisecond, Span: 100 * time.Second}}, Limits{}, ErrInvalidArgument},
		{"window at the bucket bound", Op{Type: OpAdd, ID: "a", Kind: KindWindow, Window: counter.WindowSpec{Granularity: time.Second, Span: time.Hour}}, Limits{}, nil},
		{"window above a lowered bound", Op{Type: OpAdd, ID: "a", Kind: KindWindow, Window: counter.WindowSpec{Granularity: time.Second, Span: time.Hour}}, Limits{MaxWindowBuckets: 60}, ErrInvalidArgument},
		{"negative set ttl", Op{Type: OpSet, ID: "a", TTL: -1}, Limits{}, ErrInvalidArgument},
		{"negative expire deletes", Op{Type: OpExpire, ID: "a", TTL: -1}, Limits{}, nil},
		{"ttl too long", Op{Type: OpExpire, ID: "a", TTL: MaxTTL + 1}, Limits{}, ErrInvalidArgument},
		{"hadd no fields", Op{Type: OpHAdd, ID: "a"}, Limits{}, ErrInvalidArgument},
		{"hadd long name", Op{Type: OpHAdd, ID: "a", Fields: []counter.FieldDelta{{Name: long, Delta: 1}}}, Limits{}, ErrInvalidArgument},
		{"hdel long name", Op{Type: OpHDel, ID: "a", Names: []string{long}}, Limits{}, ErrInvalidArgument},
		{"hadd name at limit", Op{Type: OpHAdd, ID: "a", Fields: []counter.FieldDelta{{Name: long[1:], Delta: 1}}}, tiered, nil},
		{"pfadd too many", Op{Type: OpPFAdd, ID: "a", Items: make([][]byte, MaxItems+1)}, Limits{}, ErrInvalidArgument},
		{"bad precision", Op{Type: OpPFAdd, ID: "a", HLLPrecision: 2}, Limits{}, ErrInvalidArgument},
		{"precision 10 embedded", Op{Type: OpPFAdd, ID: "a", HLLPrecision: 10}, Limits{}, nil},
		{"precision 10 fixed 14", Op{Type: OpPFAdd, ID: "a", HLLPrecision: 10}, tiered, ErrInvalidArgument},
		{"pfmerge bad source", Op{Type: OpPFMerge, ID: "a", Sources: []string{""}}, Limits{}, ErrInvalidID},
		{"pfmerge brace source", Op{Type: OpPFMerge, ID: "a", Sources: []string{"}b"}}, tiered, ErrInvalidID},
		{"unknown type", Op{Type: 99, ID: "a"}, Limits{}, ErrInvalidArgument},
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
	ok := Op{Type: OpAdd, ID: "a", Delta: 1}
	if err := ValidateBatch(nil, Limits{}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("empty batch: %v", err)
	}
	if err := ValidateBatch([]Op{ok, ok, ok}, Limits{MaxBatch: 2}); !errors.Is(err, ErrBatchTooLarge) {
		t.Errorf("3 ops over a limit of 2: %v", err)
	}
	var be *BatchError
	if err := ValidateBatch([]Op{ok, {Type: OpAdd}}, Limits{}); !errors.As(err, &be) || be.Index != 1 || !errors.Is(err, ErrInvalidID) {
		t.Errorf("bad second op: %v", err)
	}
	if err := ValidateBatch([]Op{ok}, Limits{}); err != nil {
		t.Errorf("good batch: %v", err)
	}
}

// FuzzOpValidate: Validate never panics, and an op it accepts has a valid
// id and stays within the default limits.
func FuzzOpValidate(f *testing.F) {
	f.Add(uint8(OpAdd), "a", uint8(0), int64(1), int64(0), 0, 0, uint8(0), "f")
	f.Add(uint8(OpHDel), "}", uint8(6), int64(0), int64(-1), 5000, -1, uint8(3), "")
	f.Fuzz(func(t *testing.T, typ uint8, id string, kind uint8, delta, ttl int64, shards, shard int, p uint8, field string) {
		op := Op{Type: OpType(typ), ID: id, Kind: Kind(kind), Delta: delta, TTL: time.Duration(ttl),
			Shards: shards, Shard: shard, HLLPrecision: p,
			Fields: []counter.FieldDelta{{Name: field, Delta: delta}}, Names: []string{field}, Sources: []string{field}}
		if op.Validate(Limits{}) != nil {
			return
		}
		if ValidateID(op.ID) != nil || len(field) > MaxFieldLen || op.TTL > MaxTTL || op.Shards > 1024 {
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
	mustApply(t, e, Op{Type: OpAdd, ID: "ok", Delta: 3})
	old := []byte{entryFormat, byte(KindWindow), 1, 0, 0, 0x41, 0x02} // version 1; window, head set
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
	mustApply(t, e, Op{Type: OpAdd, ID: "huge", Kind: KindWindow, Window: counter.WindowSpec{Granularity: time.Second, Span: time.Minute}, Delta: 1})
	e.Close()
	e = openNode(t, "me", dir, clk)
	if v := mustGet(t, e, "huge"); v.Value != 1 || v.Kind != KindWindow {
		t.Fatalf("replaced window after reopen: %+v", v)
	}
}
