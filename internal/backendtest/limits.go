package backendtest

import (
	"strings"

	"github.com/counterd/counterd/internal/contract"
)

// limitCases check that every backend validates alike: the declared
// Limits are the defaults (a backend may only make HLLPrecision and
// RedisHashTags stricter), and requests at and past each bound get the
// same answer.
func limitCases() []tcase {
	return []tcase{
		{"declared limits", func(e *env) {
			l, d := e.caps.Limits, contract.DefaultLimits()
			l.HLLPrecision, l.RedisHashTags = 0, false
			if l != d {
				e.t.Errorf("limits %+v, want the defaults %+v", e.caps.Limits, d)
			}
		}},
		{"field names", func(e *env) {
			l, h := e.caps.Limits, e.id("h")
			ok := strings.Repeat("f", l.MaxFieldLen)
			r := e.apply(hadd(h, fd(ok, 1)))
			if len(r.Fields) != 1 || r.Fields[0].Name != ok {
				e.t.Errorf("hadd of a %d-byte field = %+v", l.MaxFieldLen, r)
			}
			before := e.snap(h)
			long := ok + "f"
			_, err := e.b.Apply(e.ctx, hadd(h, fd(long, 1)), contract.WriteOptions{})
			e.wantErr("hadd of a longer field", err, contract.ErrInvalidArgument)
			_, err = e.b.Apply(e.ctx, contract.Op{Type: contract.OpHDel, ID: h, Names: []string{ok, long}}, contract.WriteOptions{})
			e.wantErr("hdel of a longer field", err, contract.ErrInvalidArgument)
			e.unchanged(h, before)
			if v, found, err := e.b.HGet(e.ctx, h, ok); err != nil || !found || v != 1 {
				e.t.Errorf("hget of the %d-byte field = %d %v %v", l.MaxFieldLen, v, found, err)
			}
		}},
		{"shards", func(e *env) {
			l := e.caps.Limits
			op := add(e.id("sh"), contract.KindSharded, 1)
			op.Shards, op.Shard = 8, 8
			e.apply(op)
			op.Shard = l.MaxShards + 1
			_, err := e.b.Apply(e.ctx, op, contract.WriteOptions{})
			e.wantErr("shard past MaxShards", err, contract.ErrInvalidArgument)
			op = add(e.id("sh2"), contract.KindSharded, 1)
			op.Shards = l.MaxShards + 1
			_, err = e.b.Apply(e.ctx, op, contract.WriteOptions{})
			e.wantErr("shards past MaxShards", err, contract.ErrInvalidArgument)
			e.wantMissing(e.id("sh2"))
			e.wantValue(e.id("sh"), contract.KindSharded, 1)
		}},
		{"items", func(e *env) {
			l, u := e.caps.Limits, e.id("u")
			items := make([][]byte, l.MaxItems)
			for i := range items {
				items[i] = []byte{byte(i), byte(i >> 8), byte(i >> 16)}
			}
			e.apply(contract.Op{Type: contract.OpPFAdd, ID: u, Items: items})
			before := e.snap(u)
			_, err := e.b.Apply(e.ctx, contract.Op{Type: contract.OpPFAdd, ID: u, Items: append(items, []byte("x"))}, contract.WriteOptions{})
			e.wantErr("pfadd past MaxItems", err, contract.ErrInvalidArgument)
			e.unchanged(u, before)
		}},
		{"ttl", func(e *env) {
			l, c := e.caps.Limits, e.id("c")
			e.apply(contract.Op{Type: contract.OpSet, ID: c, Value: 1, TTL: l.MaxTTL})
			before := e.snap(c)
			_, err := e.b.Apply(e.ctx, contract.Op{Type: contract.OpExpire, ID: c, TTL: l.MaxTTL + 1}, contract.WriteOptions{})
			e.wantErr("ttl past MaxTTL", err, contract.ErrInvalidArgument)
			e.unchanged(c, before)
		}},
		{"batch size", func(e *env) {
			l := e.caps.Limits
			ops := make([]contract.Op, l.MaxBatch)
			for i := range ops {
				ops[i] = add(e.id("a"), contract.KindNone, 1)
			}
			if res, err := e.b.ApplyBatch(e.ctx, ops, contract.WriteOptions{}); err != nil || res[len(res)-1].Value != int64(l.MaxBatch) {
				e.t.Fatalf("batch of MaxBatch ops: %v", err)
			}
			_, err := e.b.ApplyBatch(e.ctx, append(ops, ops[0]), contract.WriteOptions{})
			e.wantErr("batch past MaxBatch", err, contract.ErrBatchTooLarge)
			e.wantValue(e.id("a"), contract.KindCounter, int64(l.MaxBatch))
		}},
		{"hll precision", func(e *env) {
			l := e.caps.Limits
			op := pfadd(e.id("u10"), "a")
			op.HLLPrecision = 10
			_, err := e.b.Apply(e.ctx, op, contract.WriteOptions{})
			if l.HLLPrecision != 0 && l.HLLPrecision != 10 {
				e.wantErr("precision 10 where only one is accepted", err, contract.ErrInvalidArgument)
				e.wantMissing(op.ID)
				op.HLLPrecision = l.HLLPrecision
				_, err = e.b.Apply(e.ctx, op, contract.WriteOptions{})
			}
			if err != nil {
				e.t.Fatalf("pfadd at an accepted precision: %v", err)
			}
			if v := e.get(op.ID); v.Precision != op.HLLPrecision || v.Value != 1 {
				e.t.Errorf("get = %+v, want precision %d", v, op.HLLPrecision)
			}
		}},
		{"hash-tag ids", func(e *env) {
			id := "}" + e.id("c")
			_, err := e.b.Apply(e.ctx, add(id, contract.KindNone, 1), contract.WriteOptions{})
			if e.caps.Limits.RedisHashTags {
				e.wantErr("id starting with '}'", err, contract.ErrInvalidID)
				return
			}
			if err != nil {
				e.t.Fatalf("id starting with '}': %v", err)
			}
			e.wantValue(id, contract.KindCounter, 1)
		}},
	}
}
