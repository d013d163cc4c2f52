package backendtest

import (
	"errors"
	"slices"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
)

// Float counters, HSET and absolute expiries (issue 17): what Redis's
// INCRBYFLOAT, HSET/HSETNX and EXAT/PXAT do, on every backend.

func addf(id, incr string) contract.Op {
	return contract.Op{Type: contract.OpAdd, ID: id, Kind: contract.KindFloat, Float: incr}
}

// writes is the count of writes a version records: the peer cluster keeps
// the id's ownership epoch in a version's high 32 bits (docs/cluster.md),
// so versions there start at epoch<<32 + 1 and still rise by one a write.
func writes(version uint64) uint64 { return version & (1<<32 - 1) }

// wantFloat checks id's kind, text and the writes its version counts.
func (e *env) wantFloat(id, want string, version uint64) {
	e.t.Helper()
	v := e.get(id)
	if !v.Exists || v.Kind != contract.KindFloat || v.Float != want || writes(v.Version) != version {
		e.t.Errorf("get %q = exists %v, %s %q v%d; want float %q v%d", id, v.Exists, v.Kind, v.Float, v.Version, want, version)
	}
}

func floatCases() []tcase {
	return []tcase{
		{"adds like redis", func(e *env) {
			id := e.id("f")
			for i, c := range []struct{ incr, want string }{
				// 0.3 is lost next to 1e30 in a 64-bit mantissa, as in Redis.
				{"0.1", "0.1"}, {"0.2", "0.3"}, {"1e30", "1000000000000000000024696061952"},
				{"-1e30", "0"}, {"0x1p-2", "0.25"}, {"-0.5", "-0.25"},
			} {
				r := e.apply(addf(id, c.incr))
				if r.Kind != contract.KindFloat || r.Float != c.want || !r.Changed || writes(r.Version) != uint64(i+1) {
					e.t.Errorf("add %s = %+v, want %s at version %d", c.incr, r, c.want, i+1)
				}
			}
			e.wantFloat(id, "-0.25", 6)
		}},
		{"refused increments change nothing", func(e *env) {
			id := e.id("f")
			e.apply(addf(id, "2.5"))
			before := e.snap(id)
			for _, c := range []struct {
				incr string
				want error
			}{{"abc", contract.ErrNotFloat}, {"nan", contract.ErrNotFloat}, {" 1", contract.ErrNotFloat}, {"", contract.ErrNotFloat},
				{"inf", contract.ErrFloatRange}, {"1e5000", contract.ErrNotFloat}, {"1e4932", nil}} {
				_, err := e.b.Apply(e.ctx, addf(id, c.incr), contract.WriteOptions{})
				if c.want == nil {
					if err != nil {
						e.t.Fatalf("add %s: %v", c.incr, err)
					}
					continue
				}
				e.wantErr("add "+c.incr, err, c.want)
				e.unchanged(id, before)
			}
			before = e.snap(id)
			_, err := e.b.Apply(e.ctx, addf(id, "1e4932"), contract.WriteOptions{})
			e.wantErr("sum beyond the range", err, contract.ErrFloatRange)
			e.unchanged(id, before)
			_, err = e.b.Apply(e.ctx, add(id, contract.KindNone, 1), contract.WriteOptions{})
			e.wantErr("integer add to a non-integral float", err, contract.ErrNotInteger)
			e.unchanged(id, before)
			// The kind is checked before the increment, as in Redis.
			h := e.id("h")
			e.apply(hadd(h, fd("a", 1)))
			_, err = e.b.Apply(e.ctx, addf(h, "abc"), contract.WriteOptions{})
			e.wantErr("bad float add to a hash", err, contract.ErrWrongKind)
			_, err = e.b.Apply(e.ctx, hadd(id, fd("a", 1)), contract.WriteOptions{})
			e.wantErr("hash add to a float", err, contract.ErrWrongKind)
			e.unchanged(id, before)
		}},
		{"counter and float convert", func(e *env) {
			id := e.id("c")
			e.apply(add(id, contract.KindNone, 10))
			e.apply(contract.Op{Type: contract.OpExpire, ID: id, TTL: time.Hour})
			if r := e.apply(addf(id, "0.5")); r.Kind != contract.KindFloat || r.Float != "10.5" {
				e.t.Errorf("float add to a counter = %+v", r)
			}
			e.wantTTL(id, time.Hour)
			e.apply(addf(id, "0.5"))
			e.wantResult("integer add to an integral float", e.apply(add(id, contract.KindNone, 1)), contract.KindCounter, 12, true)
			e.wantTTL(id, time.Hour)
			e.apply(addf(id, "-0.25"))
			e.wantResult("set over a float", e.apply(set(id, 7)), contract.KindCounter, 7, true)
			e.wantValue(id, contract.KindCounter, 7)
		}},
		{"float ttl and delete", func(e *env) {
			id := e.id("f")
			e.apply(addf(id, "1.5"))
			e.apply(contract.Op{Type: contract.OpExpire, ID: id, TTL: time.Hour})
			e.wantTTL(id, time.Hour)
			if r := e.apply(contract.Op{Type: contract.OpDelete, ID: id}); !r.Changed || r.Kind != contract.KindFloat {
				e.t.Errorf("delete = %+v", r)
			}
			e.wantMissing(id)
		}},
		{"float batch", func(e *env) {
			a, b := e.id("a"), e.id("b")
			res, err := e.b.ApplyBatch(e.ctx, []contract.Op{addf(a, "0.1"), addf(b, "0.2"), addf(a, "0.2")}, contract.WriteOptions{})
			if err != nil || len(res) != 3 || res[2].Float != "0.3" || res[1].Float != "0.2" {
				e.t.Fatalf("batch = %+v, %v", res, err)
			}
			e.wantFloat(a, "0.3", 2)
		}},
		{"float idempotent", func(e *env) {
			id := e.id("f")
			key := e.p + "key"
			r1, err := e.applyKey(addf(id, "0.1"), key)
			if err != nil {
				e.t.Fatal(err)
			}
			r2, err := e.applyKey(addf(id, "0.1"), key)
			if err != nil || r2.Float != r1.Float || r2.Float != "0.1" {
				e.t.Errorf("retry = %+v, %v; first %+v", r2, err, r1)
			}
			_, err = e.applyKey(addf(id, "0.2"), key)
			e.wantErr("another increment under the key", err, contract.ErrIdempotencyReuse)
			e.wantFloat(id, "0.1", 1)
		}},
		{"hset", func(e *env) {
			id := e.id("h")
			hset := func(mode contract.SetMode, fs ...counter.FieldDelta) contract.Result {
				return e.apply(contract.Op{Type: contract.OpHSet, ID: id, Fields: fs, SetMode: mode})
			}
			e.wantResult("hset a b", hset(contract.SetAlways, fd("a", 1), fd("b", 2)), contract.KindHash, 2, true)
			e.wantResult("hset a c", hset(contract.SetAlways, fd("a", 5), fd("c", -3)), contract.KindHash, 1, true)
			e.wantResult("hsetnx a", hset(contract.SetIfAbsent, fd("a", 9)), contract.KindHash, 0, false)
			e.wantResult("hsetnx d", hset(contract.SetIfAbsent, fd("d", 4)), contract.KindHash, 1, true)
			e.wantResult("hset f twice", hset(contract.SetAlways, fd("f", 1), fd("f", 2)), contract.KindHash, 1, true)
			want := []counter.Field{{Name: "a", Value: 5}, {Name: "b", Value: 2}, {Name: "c", Value: -3}, {Name: "d", Value: 4}, {Name: "f", Value: 2}}
			if v := e.get(id); !slices.Equal(v.Fields, want) || writes(v.Version) != 4 {
				e.t.Errorf("get = %+v, want %v at version 4", v, want)
			}
			e.apply(hadd(id, fd("a", 1)))
			if v, ok, err := e.b.HGet(e.ctx, id, "a"); err != nil || !ok || v != 6 {
				e.t.Errorf("hincr after hset = %d %v %v", v, ok, err)
			}
			c := e.id("c")
			e.apply(add(c, contract.KindNone, 1))
			before := e.snap(c)
			_, err := e.b.Apply(e.ctx, contract.Op{Type: contract.OpHSet, ID: c, Fields: []counter.FieldDelta{fd("a", 1)}}, contract.WriteOptions{})
			e.wantErr("hset of a counter", err, contract.ErrWrongKind)
			e.unchanged(c, before)
		}},
		{"float hash fields", func(e *env) {
			id := e.id("h")
			ff := func(name, text string) counter.FieldDelta { return counter.FieldDelta{Name: name, Float: text} }
			if !e.b.Capabilities().FloatHashFields {
				e.apply(hadd(id, fd("a", 1)))
				before := e.snap(id)
				_, err := e.b.Apply(e.ctx, hadd(id, fd("a", 1), ff("b", "0.5")), contract.WriteOptions{})
				e.wantErr("hincrbyfloat without FloatHashFields", err, contract.ErrInvalidArgument)
				_, err = e.b.ApplyBatch(e.ctx, []contract.Op{hadd(id, fd("a", 1)), {Type: contract.OpHSet, ID: id, Fields: []counter.FieldDelta{ff("b", "0.5")}}}, contract.WriteOptions{})
				e.wantErr("hset of a float without FloatHashFields", err, contract.ErrInvalidArgument)
				e.unchanged(id, before)
				return
			}
			for i, c := range []struct{ incr, want string }{{"0.1", "0.1"}, {"0.2", "0.3"}, {"1e30", "1000000000000000000024696061952"}, {"-1e30", "0"}} {
				r := e.apply(hadd(id, ff("f", c.incr)))
				if len(r.Fields) != 1 || r.Fields[0].Text() != c.want || r.Kind != contract.KindHash || writes(r.Version) != uint64(i+1) {
					e.t.Errorf("hincrbyfloat %s = %+v, want %s at version %d", c.incr, r, c.want, i+1)
				}
			}
			// 0 is an integer field again; 1.5 + 0.5 too.
			e.apply(hadd(id, fd("f", 3), ff("g", "1.5"), ff("g", "0.5"), fd("g", 1)))
			e.apply(contract.Op{Type: contract.OpHSet, ID: id, Fields: []counter.FieldDelta{ff("p", "2.5"), fd("q", 7)}})
			e.apply(hadd(id, ff("p", "0.25"), ff("r", "-7.125")))
			want := []counter.Field{{Name: "f", Value: 3}, {Name: "g", Value: 3}, {Name: "p", Float: "2.75"}, {Name: "q", Value: 7}, {Name: "r", Float: "-7.125"}}
			if v := e.get(id); !slices.Equal(v.Fields, want) || writes(v.Version) != 7 {
				e.t.Errorf("get = %+v, want %v at version 7", v.Fields, want)
			}
			if _, ok, err := e.b.HGet(e.ctx, id, "p"); !ok || !errors.Is(err, contract.ErrNotInteger) {
				e.t.Errorf("hget of a float field = %v, %v; want ErrNotInteger", ok, err)
			}
			if v, ok, err := e.b.HGet(e.ctx, id, "g"); v != 3 || !ok || err != nil {
				e.t.Errorf("hget g = %d %v %v", v, ok, err)
			}
			// Refused, nothing changes (the first fields of an op included).
			before := e.snap(id)
			for _, c := range []struct {
				op   contract.Op
				want error
			}{
				{hadd(id, fd("q", 1), fd("p", 1)), contract.ErrNotInteger},
				{hadd(id, ff("q", "1"), ff("p", "abc")), contract.ErrNotFloat},
				{hadd(id, ff("q", "1"), ff("p", "inf")), contract.ErrFloatRange},
				{hadd(id, ff("q", "1"), ff("n", "1e4932"), ff("n", "1e4932")), contract.ErrFloatRange},
				{contract.Op{Type: contract.OpHSet, ID: id, Fields: []counter.FieldDelta{fd("q", 1), ff("p", "1.50")}}, contract.ErrInvalidArgument},
			} {
				_, err := e.b.Apply(e.ctx, c.op, contract.WriteOptions{})
				e.wantErr("refused hash float op", err, c.want)
			}
			e.unchanged(id, before)
			// An idempotent retry answers the first text.
			key := e.keyOf("hf")
			r1, err1 := e.applyKey(hadd(id, ff("p", "0.1")), key)
			r2, err2 := e.applyKey(hadd(id, ff("p", "0.1")), key)
			if err1 != nil || err2 != nil || len(r2.Fields) != 1 || r2.Fields[0].Float != "2.85" || r1.Fields[0].Float != "2.85" {
				e.t.Errorf("retry = %+v %v, first %+v %v", r2, err2, r1, err1)
			}
			c := e.id("c")
			e.apply(add(c, contract.KindNone, 1))
			_, err := e.b.Apply(e.ctx, hadd(c, ff("a", "1")), contract.WriteOptions{})
			e.wantErr("hincrbyfloat of a counter", err, contract.ErrWrongKind)
		}},
		{"set of a float", func(e *env) {
			id := e.id("f")
			op := contract.Op{Type: contract.OpSet, ID: id, Float: "2.5"}
			if !e.b.Capabilities().FloatHashFields { // the tiered mode: refused like float fields
				_, err := e.b.Apply(e.ctx, op, contract.WriteOptions{})
				e.wantErr("set of a float in the tiered mode", err, contract.ErrInvalidArgument)
				e.wantMissing(id)
				return
			}
			if r := e.apply(op); r.Kind != contract.KindFloat || r.Float != "2.5" {
				e.t.Errorf("set float = %+v", r)
			}
			e.apply(addf(id, "0.25"))
			e.wantFloat(id, "2.75", 2)
			_, err := e.b.Apply(e.ctx, contract.Op{Type: contract.OpSet, ID: id, Float: "2.50"}, contract.WriteOptions{})
			e.wantErr("set of a non-canonical float", err, contract.ErrInvalidArgument)
			e.wantFloat(id, "2.75", 2)
		}},
		{"expire at", func(e *env) {
			id := e.id("c")
			e.apply(add(id, contract.KindNone, 1))
			at := e.s.Clock.Now().Add(time.Hour).Truncate(time.Millisecond)
			if r := e.apply(contract.Op{Type: contract.OpExpire, ID: id, ExpireAt: at.UnixNano()}); !r.Changed {
				e.t.Errorf("expire at = %+v", r)
			}
			if v := e.get(id); !v.ExpiresAt.Equal(at) && (!e.s.ExpiryFollowsClock && v.ExpiresAt.Sub(at).Abs() > time.Second) {
				e.t.Errorf("expires at %v, want %v", v.ExpiresAt, at)
			}
			e.apply(contract.Op{Type: contract.OpSet, ID: id, Value: 2, ExpireAt: at.Add(time.Hour).UnixNano()})
			e.wantTTL(id, 2*time.Hour)
			if r := e.apply(contract.Op{Type: contract.OpExpire, ID: id, ExpireAt: e.s.Clock.Now().Add(-time.Second).UnixNano()}); !r.Changed {
				e.t.Errorf("expire at a past time = %+v, want a delete", r)
			}
			e.wantMissing(id)
			_, err := e.b.Apply(e.ctx, contract.Op{Type: contract.OpAdd, ID: id, Delta: 1, ExpireAt: 1}, contract.WriteOptions{})
			e.wantErr("expire-at on an add", err, contract.ErrInvalidArgument)
		}},
	}
}
