package backendtest

import (
	"context"
	"errors"
	"math"
	"strings"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/rollup"
)

// errCase is a call that must fail with want and leave the counters it
// names unchanged. prep writes the state the call fails against.
type errCase struct {
	name string
	want error
	// prep populates the ids of e (may be nil).
	prep func(e *env)
	// ids are the names (e.id) whose state must not change.
	ids  []string
	call func(e *env) error
}

// populate writes one counter of every kind under the names c, sh, pn, u,
// w, h (the targets of the error cases).
func populate(e *env) {
	e.apply(set(e.id("c"), 5))
	op := add(e.id("sh"), contract.KindSharded, 5)
	op.Shards = 4
	e.apply(op)
	e.apply(add(e.id("pn"), contract.KindPN, 5))
	e.apply(pfadd(e.id("u"), "a", "b"))
	w := add(e.id("w"), contract.KindWindow, 5)
	w.Window = testWindow
	e.apply(w)
	e.apply(hadd(e.id("h"), fd("f", 5)))
	e.apply(set(e.id("big"), math.MaxInt64-1))
	e.apply(hadd(e.id("hbig"), fd("f", math.MinInt64+1)))
}

var allNames = []string{"c", "sh", "pn", "u", "w", "h", "big", "hbig"}

// applyErr applies op and returns its error.
func applyErr(op contract.Op) func(e *env) error {
	return func(e *env) error {
		op := op
		op.ID = e.id(op.ID)
		for i, s := range op.Sources {
			op.Sources = append([]string(nil), op.Sources...)
			op.Sources[i] = e.id(s)
		}
		_, err := e.b.Apply(e.ctx, op, contract.WriteOptions{})
		return err
	}
}

// applyRaw applies op with its id as given (invalid ids).
func applyRaw(op contract.Op) func(e *env) error {
	return func(e *env) error {
		_, err := e.b.Apply(e.ctx, op, contract.WriteOptions{})
		return err
	}
}

// errorGroup runs the error cases against one set of counters, written
// once (every case must leave them unchanged) and checked after every case
// and once more at the end of the group.
func errorGroup() group {
	var before map[string]snapshot
	cases := errorCases(func() map[string]snapshot { return before })
	cases = append(cases, tcase{"nothing changed", func(e *env) {
		for _, n := range allNames {
			e.unchanged(e.id(n), before[n])
		}
	}})
	return group{name: "errors", cases: cases, shared: func(e *env) {
		populate(e)
		e.settle() // every node has every state
		before = map[string]snapshot{}
		for _, n := range allNames {
			before[n] = e.snap(e.id(n))
		}
	}}
}

// errorCases are the error subtests; initial returns the snapshots taken
// after populate (set before the first case runs).
func errorCases(initial func() map[string]snapshot) []tcase {
	long := strings.Repeat("x", contract.MaxIDLen+1)
	items := make([][]byte, contract.MaxItems+1)
	for i := range items {
		items[i] = []byte{byte(i), byte(i >> 8)}
	}
	cases := []errCase{
		// Invalid ids.
		{name: "empty id", want: contract.ErrInvalidID, call: applyRaw(add("", contract.KindNone, 1))},
		{name: "id too long", want: contract.ErrInvalidID, call: applyRaw(add(long, contract.KindNone, 1))},
		{name: "control byte in id", want: contract.ErrInvalidID, call: applyRaw(add("a\x01b", contract.KindNone, 1))},
		{name: "invalid UTF-8 id", want: contract.ErrInvalidID, call: applyRaw(set("a\xffb", 1))},
		{name: "get of an empty id", want: contract.ErrInvalidID, call: func(e *env) error { _, err := e.b.Get(e.ctx, ""); return err }},
		{name: "hget of an invalid id", want: contract.ErrInvalidID, call: func(e *env) error { _, _, err := e.b.HGet(e.ctx, "a\x00", "f"); return err }},
		{name: "pfcount of an invalid id", want: contract.ErrInvalidID, call: func(e *env) error { _, _, err := e.b.PFCount(e.ctx, long); return err }},
		{name: "pfmerge of an invalid source", want: contract.ErrInvalidID, ids: []string{"u"},
			call: func(e *env) error {
				_, err := e.b.Apply(e.ctx, contract.Op{Type: contract.OpPFMerge, ID: e.id("u"), Sources: []string{""}}, contract.WriteOptions{})
				return err
			}},
		{name: "series of an invalid UTF-8 id", want: contract.ErrInvalidID,
			call: func(e *env) error {
				now := e.b.Now()
				_, err := e.b.Series(e.ctx, "a\xff", rollup.Minute, now.Add(-time.Minute), now)
				return err
			}},
		{name: "uniques of an invalid UTF-8 id", want: contract.ErrInvalidID, call: func(e *env) error { _, err := e.b.Uniques(e.ctx, "a\xff", rollup.Day, 1); return err }},
		{name: "pfcount of an invalid UTF-8 id", want: contract.ErrInvalidID, call: func(e *env) error { _, _, err := e.b.PFCount(e.ctx, "a\xff"); return err }},
		{name: "batch with an invalid UTF-8 id", want: contract.ErrInvalidID, ids: []string{"c"},
			call: func(e *env) error {
				_, err := e.b.ApplyBatch(e.ctx, []contract.Op{add(e.id("c"), contract.KindNone, 1), set("a\xff", 1)}, contract.WriteOptions{})
				return err
			}},
		{name: "aggregate prefix too long", want: contract.ErrInvalidID, call: func(e *env) error { _, err := e.b.Aggregate(e.ctx, long); return err }},

		// Invalid arguments.
		{name: "negative ttl", want: contract.ErrInvalidArgument, ids: []string{"c"}, call: applyErr(contract.Op{Type: contract.OpSet, ID: "c", Value: 1, TTL: -time.Second})},
		{name: "ttl above the maximum", want: contract.ErrInvalidArgument, ids: []string{"c"}, call: applyErr(contract.Op{Type: contract.OpExpire, ID: "c", TTL: contract.MaxTTL + time.Hour})},
		{name: "hadd without fields", want: contract.ErrInvalidArgument, ids: []string{"h"}, call: applyErr(contract.Op{Type: contract.OpHAdd, ID: "h"})},
		{name: "hdel without names", want: contract.ErrInvalidArgument, ids: []string{"h"}, call: applyErr(contract.Op{Type: contract.OpHDel, ID: "h"})},
		{name: "invalid window", want: contract.ErrInvalidArgument, ids: []string{"nw"},
			call: applyErr(contract.Op{Type: contract.OpAdd, ID: "nw", Kind: contract.KindWindow, Delta: 1, Window: counter.WindowSpec{Granularity: time.Second, Span: 1500 * time.Millisecond}})},
		{name: "too many shards", want: contract.ErrInvalidArgument, ids: []string{"nsh"}, call: applyErr(contract.Op{Type: contract.OpAdd, ID: "nsh", Kind: contract.KindSharded, Delta: 1, Shards: 100000})},
		{name: "too many items", want: contract.ErrInvalidArgument, ids: []string{"u"}, call: applyErr(contract.Op{Type: contract.OpPFAdd, ID: "u", Items: items})},
		{name: "hll precision out of range", want: contract.ErrInvalidArgument, ids: []string{"nu"}, call: applyErr(contract.Op{Type: contract.OpPFAdd, ID: "nu", Items: [][]byte{{1}}, HLLPrecision: 3})},
		{name: "unknown op type", want: contract.ErrInvalidArgument, ids: []string{"c"}, call: applyErr(contract.Op{Type: 99, ID: "c"})},
		{name: "pfcount without ids", want: contract.ErrInvalidArgument, call: func(e *env) error { _, _, err := e.b.PFCount(e.ctx); return err }},
		{name: "empty batch", want: contract.ErrInvalidArgument, call: func(e *env) error { _, err := e.b.ApplyBatch(e.ctx, nil, contract.WriteOptions{}); return err }},
		{name: "idempotency key too long", want: contract.ErrInvalidArgument, ids: []string{"c"},
			call: func(e *env) error {
				_, err := e.applyKey(add(e.id("c"), contract.KindNone, 1), strings.Repeat("k", 256))
				return err
			}},
		{name: "idempotency key with a control byte", want: contract.ErrInvalidArgument, ids: []string{"c"},
			call: func(e *env) error { _, err := e.applyKey(add(e.id("c"), contract.KindNone, 1), "k\n"); return err }},
		{name: "uniques of 0 days", want: contract.ErrInvalidArgument, ids: []string{"u"},
			prep: func(e *env) { specFor(e, "u") },
			call: func(e *env) error { _, err := e.b.Uniques(e.ctx, e.id("u"), rollup.Day, 0); return err }},
		{name: "invalid rollup spec", want: contract.ErrInvalidArgument,
			call: func(e *env) error {
				return e.b.SetRollup(e.ctx, e.id("ns"), rollup.Spec{Minute: -time.Hour})
			}},
		{name: "invalid rollup key", want: contract.ErrInvalidID,
			call: func(e *env) error { return e.b.SetRollup(e.ctx, "", rollup.DefaultSpec()) }},

		// Wrong kind: every op against every kind it does not apply to.
		{name: "add to a hash", want: contract.ErrWrongKind, ids: []string{"h"}, call: applyErr(add("h", contract.KindNone, 1))},
		{name: "add to an hll", want: contract.ErrWrongKind, ids: []string{"u"}, call: applyErr(add("u", contract.KindNone, 1))},
		{name: "add of another additive kind", want: contract.ErrWrongKind, ids: []string{"c"}, call: applyErr(add("c", contract.KindPN, 1))},
		{name: "add naming a non-additive kind", want: contract.ErrWrongKind, ids: []string{"nk"}, call: applyErr(add("nk", contract.KindHLL, 1))},
		{name: "set of a pn counter", want: contract.ErrWrongKind, ids: []string{"pn"}, call: applyErr(set("pn", 1))},
		{name: "set of a hash", want: contract.ErrWrongKind, ids: []string{"h"}, call: applyErr(set("h", 1))},
		{name: "pfadd to a counter", want: contract.ErrWrongKind, ids: []string{"c"}, call: applyErr(pfadd("c", "x"))},
		{name: "pfadd to a window", want: contract.ErrWrongKind, ids: []string{"w"}, call: applyErr(pfadd("w", "x"))},
		{name: "hadd to a counter", want: contract.ErrWrongKind, ids: []string{"c"}, call: applyErr(hadd("c", fd("f", 1)))},
		{name: "hadd to a sharded counter", want: contract.ErrWrongKind, ids: []string{"sh"}, call: applyErr(hadd("sh", fd("f", 1)))},
		{name: "hdel of a counter", want: contract.ErrWrongKind, ids: []string{"c"}, call: applyErr(contract.Op{Type: contract.OpHDel, ID: "c", Names: []string{"f"}})},
		{name: "hget of a counter", want: contract.ErrWrongKind, ids: []string{"c"},
			call: func(e *env) error { _, _, err := e.b.HGet(e.ctx, e.id("c"), "f"); return err }},
		{name: "pfcount of a hash", want: contract.ErrWrongKind, ids: []string{"h"},
			call: func(e *env) error { _, _, err := e.b.PFCount(e.ctx, e.id("h")); return err }},
		{name: "series of a hash", want: contract.ErrWrongKind, ids: []string{"h"},
			prep: func(e *env) { specFor(e, "h") },
			call: func(e *env) error {
				now := e.b.Now()
				_, err := e.b.Series(e.ctx, e.id("h"), rollup.Minute, now.Add(-time.Hour), now)
				return err
			}},
		{name: "uniques of a counter", want: contract.ErrWrongKind, ids: []string{"c"},
			prep: func(e *env) { specFor(e, "c") },
			call: func(e *env) error { _, err := e.b.Uniques(e.ctx, e.id("c"), rollup.Day, 1); return err }},

		// Overflow.
		{name: "add past MaxInt64", want: contract.ErrOverflow, ids: []string{"big"}, call: applyErr(add("big", contract.KindNone, 2))},
		{name: "hash field past MinInt64", want: contract.ErrOverflow, ids: []string{"hbig"}, call: applyErr(hadd("hbig", fd("g", 1), fd("f", -2)))},

		// Version conflicts.
		{name: "set with a stale version", want: contract.ErrVersionConflict, ids: []string{"c"},
			call: func(e *env) error {
				v := e.get(e.id("c"))
				_, err := e.b.Apply(e.ctx, contract.Op{Type: contract.OpSet, ID: e.id("c"), Value: 9, CheckVersion: true, ExpectedVersion: v.Version + 1}, contract.WriteOptions{})
				return err
			}},
		{name: "set expecting no counter", want: contract.ErrVersionConflict, ids: []string{"c"},
			call: applyErr(contract.Op{Type: contract.OpSet, ID: "c", Value: 9, CheckVersion: true})},
		{name: "set expecting a version of a missing counter", want: contract.ErrVersionConflict, ids: []string{"nv"},
			call: applyErr(contract.Op{Type: contract.OpSet, ID: "nv", Value: 9, CheckVersion: true, ExpectedVersion: 3})},

		// Not found.
		{name: "uniques without a rollup spec", want: contract.ErrNotFound, ids: []string{"u"},
			call: func(e *env) error { _, err := e.b.Uniques(e.ctx, e.id("u"), rollup.Day, 1); return err }},
	}
	out := make([]tcase, 0, len(cases))
	for _, c := range cases {
		out = append(out, tcase{c.name, func(e *env) {
			if c.prep != nil {
				c.prep(e)
			}
			before := make([]snapshot, len(c.ids))
			for i, n := range c.ids {
				if b, ok := initial()[n]; ok {
					before[i] = b // also catches a change by an earlier case
				} else {
					before[i] = e.snap(e.id(n))
				}
			}
			err := c.call(e)
			e.wantErr(c.name, err, c.want)
			for i, n := range c.ids {
				e.unchanged(e.id(n), before[i])
			}
		}})
	}
	out = append(out, tcase{"pfmerge with a counter", func(e *env) {
		ids := e.coLocated(2)
		c, u := ids[0], ids[1]
		e.apply(set(c, 1))
		e.apply(pfadd(u, "a"))
		bc, bu := e.snap(c), e.snap(u)
		_, err := e.b.Apply(e.ctx, contract.Op{Type: contract.OpPFMerge, ID: c, Sources: []string{u}}, contract.WriteOptions{})
		e.wantErr("pfmerge into a counter", err, contract.ErrWrongKind)
		_, err = e.b.Apply(e.ctx, contract.Op{Type: contract.OpPFMerge, ID: u, Sources: []string{c}}, contract.WriteOptions{})
		e.wantErr("pfmerge of a counter", err, contract.ErrWrongKind)
		_, _, err = e.b.PFCount(e.ctx, u, c)
		e.wantErr("pfcount of a counter", err, contract.ErrWrongKind)
		e.unchanged(c, bc)
		e.unchanged(u, bu)
	}})
	out = append(out, tcase{"ttl of an invalid id", func(e *env) {
		// Reads as a missing counter, without an error (contract.Backend).
		for _, id := range []string{"", "a\xff", "a\x00", strings.Repeat("x", contract.MaxIDLen+1)} {
			if ttl, has, exists, err := e.b.TTL(e.ctx, id); err != nil || has || exists || ttl != 0 {
				e.t.Errorf("TTL(%q) = %v %v %v, %v; want a missing counter", id, ttl, has, exists, err)
			}
		}
	}})
	out = append(out, tcase{"series without a rollup spec", func(e *env) {
		id := e.id("nospec")
		e.apply(add(id, contract.KindNone, 2))
		now := e.b.Now()
		s, err := e.b.Series(e.ctx, id, rollup.Minute, now.Add(-time.Minute), now.Add(time.Minute))
		if e.caps.SeriesWithoutSpec {
			if err != nil || s.Total != 2 {
				e.t.Errorf("series = %+v, %v; want total 2 (SeriesWithoutSpec)", s, err)
			}
			return
		}
		e.wantErr("series without spec", err, contract.ErrNotFound)
	}})
	return out
}

// specFor sets the default rollup spec for e.id(name) and deletes it when
// the test ends.
func specFor(e *env, name string) {
	e.t.Helper()
	key := e.id(name)
	if err := e.b.SetRollup(e.ctx, key, rollup.DefaultSpec()); err != nil {
		e.t.Fatalf("set rollup %q: %v", key, err)
	}
	e.t.Cleanup(func() {
		if _, err := e.b.DeleteRollup(context.Background(), key); err != nil && !errors.Is(err, contract.ErrClosed) {
			e.t.Errorf("delete rollup %q: %v", key, err)
		}
	})
}
