package backendtest

import (
	"fmt"
	"slices"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
)

func add(id string, k contract.Kind, d int64) contract.Op {
	return contract.Op{Type: contract.OpAdd, ID: id, Kind: k, Delta: d}
}

func set(id string, v int64) contract.Op { return contract.Op{Type: contract.OpSet, ID: id, Value: v} }

func pfadd(id string, items ...string) contract.Op {
	op := contract.Op{Type: contract.OpPFAdd, ID: id}
	for _, it := range items {
		op.Items = append(op.Items, []byte(it))
	}
	return op
}

func hadd(id string, fs ...counter.FieldDelta) contract.Op {
	return contract.Op{Type: contract.OpHAdd, ID: id, Fields: fs}
}

func fd(name string, d int64) counter.FieldDelta { return counter.FieldDelta{Name: name, Delta: d} }

// wantResult checks the fields of a Result every backend agrees on.
func (e *env) wantResult(what string, r contract.Result, kind contract.Kind, value int64, changed bool) {
	e.t.Helper()
	if r.Kind != kind || r.Value != value || r.Changed != changed {
		e.t.Errorf("%s = %s %d changed %v, want %s %d changed %v", what, r.Kind, r.Value, r.Changed, kind, value, changed)
	}
}

// testWindow is the window of the window-counter cases: 10 one-second
// buckets.
var testWindow = counter.WindowSpec{Granularity: time.Second, Span: 10 * time.Second}

func kindCases() []tcase {
	return []tcase{
		{"counter", func(e *env) {
			id := e.id("c")
			e.wantResult("add 5", e.apply(add(id, contract.KindNone, 5)), contract.KindCounter, 5, true)
			e.wantResult("add -2", e.apply(add(id, contract.KindCounter, -2)), contract.KindCounter, 3, true)
			e.wantValue(id, contract.KindCounter, 3)
		}},
		{"plain adds to counters that are not plain", func(e *env) {
			// The embedded engine serves adds to an existing counter
			// without TTL on a fast path; every other counter takes
			// the general one. Both must answer alike on every backend.
			id := e.id("pt")
			e.apply(add(id, contract.KindNone, 1))
			e.apply(contract.Op{Type: contract.OpExpire, ID: id, TTL: time.Hour})
			e.wantResult("add to a counter with a TTL", e.apply(add(id, contract.KindNone, 2)), contract.KindCounter, 3, true)
			e.wantTTL(id, time.Hour) // INCR keeps the TTL, as in Redis
			e.apply(contract.Op{Type: contract.OpExpire, ID: id, TTL: 0})
			e.wantResult("add after persist", e.apply(add(id, contract.KindNone, 4)), contract.KindCounter, 7, true)
			e.wantNoTTL(id)
			u := e.id("pu")
			e.apply(pfadd(u, "a"))
			_, err := e.applyKey(add(u, contract.KindNone, 1), "")
			e.wantErr("add to an hll", err, contract.ErrWrongKind)
			e.wantResult("the hll after the refused add", e.apply(pfadd(u, "a")), contract.KindHLL, 0, false)
		}},
		{"sharded", func(e *env) {
			id := e.id("sh")
			for i := range 10 {
				op := add(id, contract.KindSharded, 1)
				op.Shards, op.Shard = 4, i%4+1
				e.apply(op)
			}
			e.apply(add(id, contract.KindNone, 5)) // adds to the sharded counter
			e.wantValue(id, contract.KindSharded, 15)
		}},
		{"pn", func(e *env) {
			id := e.id("pn")
			e.apply(add(id, contract.KindPN, 7))
			e.apply(add(id, contract.KindPN, -10))
			e.wantValue(id, contract.KindPN, -3)
		}},
		{"hll", func(e *env) {
			id := e.id("u")
			e.wantResult("pfadd a b a", e.apply(pfadd(id, "a", "b", "a")), contract.KindHLL, 0, true)
			e.wantResult("pfadd a again", e.apply(pfadd(id, "a")), contract.KindHLL, 0, false)
			op := pfadd(id, "c")
			op.Estimate = true
			e.wantResult("pfadd c with estimate", e.apply(op), contract.KindHLL, 3, true)
			if n, se, err := e.b.PFCount(e.ctx, id); err != nil || n != 3 || se <= 0 || se > 0.05 {
				e.t.Errorf("PFCount = %d ±%v, %v; want 3", n, se, err)
			}
			v := e.get(id)
			if !v.Exists || v.Kind != contract.KindHLL || v.Value != 3 || v.StdError <= 0 || v.Precision == 0 {
				e.t.Errorf("get = %+v, want hll 3 with its precision and error", v)
			}
			if n, _, err := e.b.PFCount(e.ctx, e.id("missing")); err != nil || n != 0 {
				e.t.Errorf("PFCount of a missing hll = %d, %v; want 0", n, err)
			}
		}},
		{"window", func(e *env) {
			id := e.id("w")
			op := add(id, contract.KindWindow, 3)
			op.Window = testWindow
			e.wantResult("add 3", e.apply(op), contract.KindWindow, 3, true)
			e.s.Clock.Advance(5 * time.Second)
			e.wantResult("add 4 five seconds later", e.apply(add(id, contract.KindNone, 4)), contract.KindWindow, 7, true)
			v := e.get(id)
			var sum int64
			for _, b := range v.Buckets {
				sum += b.Count
			}
			if v.Kind != contract.KindWindow || v.Value != 7 || v.Window != testWindow || sum != 7 {
				e.t.Errorf("get = %s %d, window %+v, buckets %v; want window 7 over %+v", v.Kind, v.Value, v.Window, v.Buckets, testWindow)
			}
			e.s.Clock.Advance(6 * time.Second) // the first add leaves the window
			e.wantValue(id, contract.KindWindow, 4)
		}},
		{"fixed window", func(e *env) {
			id := e.id("fw")
			spec := counter.WindowSpec{Granularity: time.Second, Span: 10 * time.Second, Fixed: true}
			now := e.s.Clock.Now()
			next := now.Truncate(spec.Span).Add(spec.Span) // windows are aligned to the epoch
			e.s.Clock.Advance(next.Sub(now) - 2*time.Second)
			op := add(id, contract.KindWindow, 3)
			op.Window = spec
			e.wantResult("add 3", e.apply(op), contract.KindWindow, 3, true)
			e.s.Clock.Advance(3 * time.Second) // into the next window
			e.wantResult("add 1 in the next window", e.apply(add(id, contract.KindNone, 1)), contract.KindWindow, 1, true)
			if v := e.get(id); v.Window != spec || v.Value != 1 {
				e.t.Errorf("get = %d over %+v, want 1 over %+v", v.Value, v.Window, spec)
			}
		}},
		{"creating writes", func(e *env) {
			e.wantResult("add 0", e.apply(add(e.id("z"), contract.KindNone, 0)), contract.KindCounter, 0, true)
			e.wantValue(e.id("z"), contract.KindCounter, 0)
			if r := e.apply(pfadd(e.id("u"))); r.Kind != contract.KindHLL || !r.Changed {
				e.t.Errorf("pfadd without items = %+v, want a new hll (like Redis)", r)
			}
			e.wantValue(e.id("u"), contract.KindHLL, 0)
		}},
		{"hash", func(e *env) {
			id := e.id("h")
			r := e.apply(hadd(id, fd("views", 9), fd("likes", 2)))
			want := []counter.Field{{Name: "views", Value: 9}, {Name: "likes", Value: 2}}
			if r.Kind != contract.KindHash || !r.Changed || !slices.Equal(r.Fields, want) {
				e.t.Errorf("hadd = %+v, want fields %v", r, want)
			}
			r = e.apply(hadd(id, fd("likes", 3), fd("likes", 1)))
			if !slices.Equal(r.Fields, []counter.Field{{Name: "likes", Value: 6}}) {
				e.t.Errorf("hadd likes twice = %v, want likes 6", r.Fields)
			}
			if v, ok, err := e.b.HGet(e.ctx, id, "views"); err != nil || !ok || v != 9 {
				e.t.Errorf("hget views = %d %v %v", v, ok, err)
			}
			if v, ok, err := e.b.HGet(e.ctx, id, "nope"); err != nil || ok || v != 0 {
				e.t.Errorf("hget of a missing field = %d %v %v", v, ok, err)
			}
			if v, ok, err := e.b.HGet(e.ctx, e.id("missing"), "f"); err != nil || ok || v != 0 {
				e.t.Errorf("hget of a missing hash = %d %v %v", v, ok, err)
			}
			v := e.get(id)
			if !v.Exists || v.Kind != contract.KindHash || v.Value != 0 ||
				!slices.Equal(v.Fields, []counter.Field{{Name: "likes", Value: 6}, {Name: "views", Value: 9}}) {
				e.t.Errorf("get = %+v, want likes 6, views 9 sorted", v)
			}
			r = e.apply(contract.Op{Type: contract.OpHDel, ID: id, Names: []string{"likes", "nope"}})
			e.wantResult("hdel likes nope", r, contract.KindHash, 1, true)
			r = e.apply(contract.Op{Type: contract.OpHDel, ID: id, Names: []string{"nope"}})
			e.wantResult("hdel of a missing field", r, contract.KindHash, 0, false)
			r = e.apply(contract.Op{Type: contract.OpHDel, ID: id, Names: []string{"views"}})
			e.wantResult("hdel of the last field", r, contract.KindHash, 1, true)
			e.wantMissing(id) // like Redis: a hash without fields does not exist
		}},
	}
}

func opCases() []tcase {
	return []tcase{
		{"set", func(e *env) {
			id := e.id("s")
			e.wantResult("set 10", e.apply(set(id, 10)), contract.KindCounter, 10, true)
			e.wantResult("set -4", e.apply(set(id, -4)), contract.KindCounter, -4, true)
			e.wantValue(id, contract.KindCounter, -4)
		}},
		{"set NX", func(e *env) {
			id := e.id("nx")
			op := set(id, 1)
			op.SetMode = contract.SetIfAbsent
			e.wantResult("NX on a missing counter", e.apply(op), contract.KindCounter, 1, true)
			op.Value = 2
			if r := e.apply(op); r.Changed {
				e.t.Errorf("NX on an existing counter = %+v, want not changed", r)
			}
			e.wantValue(id, contract.KindCounter, 1)
		}},
		{"set XX", func(e *env) {
			id := e.id("xx")
			op := set(id, 1)
			op.SetMode = contract.SetIfExists
			if r := e.apply(op); r.Changed {
				e.t.Errorf("XX on a missing counter = %+v, want not changed", r)
			}
			e.wantMissing(id)
			e.apply(set(id, 5))
			op.Value = 7
			e.wantResult("XX on an existing counter", e.apply(op), contract.KindCounter, 7, true)
			e.wantValue(id, contract.KindCounter, 7)
		}},
		{"set with TTL and KeepTTL", func(e *env) {
			id := e.id("k")
			op := set(id, 1)
			op.TTL = time.Hour
			e.apply(op)
			e.wantTTL(id, time.Hour)
			op = set(id, 2)
			op.KeepTTL = true
			e.apply(op)
			e.wantTTL(id, time.Hour)
			e.apply(set(id, 3)) // a plain set clears the TTL
			e.wantNoTTL(id)
			e.wantValue(id, contract.KindCounter, 3)
		}},
		{"delete", func(e *env) {
			id := e.id("d")
			e.apply(add(id, contract.KindNone, 4))
			if r := e.apply(contract.Op{Type: contract.OpDelete, ID: id}); !r.Changed || r.Kind != contract.KindCounter {
				e.t.Errorf("delete = %+v, want changed counter", r)
			}
			e.wantMissing(id)
			if r := e.apply(contract.Op{Type: contract.OpDelete, ID: id}); r.Changed {
				e.t.Errorf("delete of a missing counter = %+v, want not changed", r)
			}
			e.wantResult("add after delete", e.apply(add(id, contract.KindNone, 1)), contract.KindCounter, 1, true)
		}},
		{"delete every kind", func(e *env) {
			for _, op := range everyKind(e) {
				e.apply(op)
				e.settle()
				e.apply(contract.Op{Type: contract.OpDelete, ID: op.ID})
				e.wantMissing(op.ID)
			}
		}},
		{"expire and persist", func(e *env) {
			id := e.id("e")
			e.apply(add(id, contract.KindNone, 1))
			e.wantNoTTL(id)
			if r := e.apply(contract.Op{Type: contract.OpExpire, ID: id, TTL: time.Hour}); !r.Changed {
				e.t.Errorf("expire = %+v, want changed", r)
			}
			e.wantTTL(id, time.Hour)
			if v := e.get(id); v.ExpiresAt.IsZero() {
				e.t.Errorf("get after expire: no ExpiresAt")
			}
			e.apply(contract.Op{Type: contract.OpExpire, ID: id, TTL: 0}) // persist
			e.wantNoTTL(id)
			if r := e.apply(contract.Op{Type: contract.OpExpire, ID: e.id("missing"), TTL: time.Hour}); r.Changed {
				e.t.Errorf("expire of a missing counter = %+v, want not changed", r)
			}
			if _, has, exists, err := e.b.TTL(e.ctx, e.id("missing")); err != nil || has || exists {
				e.t.Errorf("TTL of a missing counter = has %v exists %v, %v", has, exists, err)
			}
		}},
		{"expiry", func(e *env) {
			ttl := time.Minute
			if !e.s.ExpiryFollowsClock {
				ttl = 150 * time.Millisecond
			}
			for _, op := range everyKind(e) {
				e.apply(op)
			}
			e.settle()
			for _, op := range everyKind(e) {
				e.apply(contract.Op{Type: contract.OpExpire, ID: op.ID, TTL: ttl})
			}
			e.settle() // every replica has the TTLs
			keep := e.id("keep")
			e.apply(add(keep, contract.KindNone, 1))
			e.s.Clock.Advance(ttl + time.Second)
			if !e.s.ExpiryFollowsClock {
				time.Sleep(ttl + 50*time.Millisecond) // Redis' own clock
			}
			for _, op := range everyKind(e) {
				id := op.ID
				deadline := time.Now().Add(5 * time.Second)
				for e.get(id).Exists && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				e.wantMissing(id)
			}
			e.wantValue(keep, contract.KindCounter, 1)
			// An expired counter is gone: an add starts a fresh one.
			id := everyKind(e)[0].ID
			e.wantResult("add after expiry", e.apply(add(id, contract.KindNone, 2)), contract.KindCounter, 2, true)
			e.wantNoTTL(id)
		}},
		{"the last ttl set wins, and active expiry keeps to it", func(e *env) {
			// u is the unit of every ttl here: on the suite's clock, or
			// real time where the store expires by its own clock.
			u := time.Minute
			if !e.s.ExpiryFollowsClock {
				u = 300 * time.Millisecond
			}
			longer, persisted, recreated := e.id("longer"), e.id("persisted"), e.id("recreated")
			for _, id := range []string{longer, persisted, recreated} {
				e.apply(set(id, 1))
			}
			e.apply(contract.Op{Type: contract.OpExpire, ID: longer, TTL: 3 * u})
			e.apply(contract.Op{Type: contract.OpExpire, ID: longer, TTL: u})     // shorter
			e.apply(contract.Op{Type: contract.OpExpire, ID: longer, TTL: 2 * u}) // then longer again
			e.apply(contract.Op{Type: contract.OpExpire, ID: persisted, TTL: u})
			e.apply(contract.Op{Type: contract.OpExpire, ID: persisted, TTL: 0}) // persist
			e.apply(contract.Op{Type: contract.OpExpire, ID: recreated, TTL: u})
			e.apply(contract.Op{Type: contract.OpDelete, ID: recreated})
			e.apply(add(recreated, contract.KindNone, 7))
			e.settle()
			// Past the first, shorter ttls: nothing may be gone, even
			// after an active expiry pass (the engine's runs every
			// second) has seen their times come.
			e.s.Clock.Advance(u + u/2)
			if e.s.ExpiryFollowsClock {
				time.Sleep(1200 * time.Millisecond) // one active expiry pass
			} else {
				time.Sleep(u + u/2)
			}
			e.wantValue(longer, contract.KindCounter, 1)
			e.wantTTL(longer, u)
			e.wantValue(persisted, contract.KindCounter, 1)
			e.wantNoTTL(persisted)
			e.wantValue(recreated, contract.KindCounter, 7)
			e.wantNoTTL(recreated)
			// Past the last ttl: gone.
			e.s.Clock.Advance(u)
			if !e.s.ExpiryFollowsClock {
				time.Sleep(u)
			}
			deadline := time.Now().Add(5 * time.Second)
			for e.get(longer).Exists && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			e.wantMissing(longer)
			e.wantValue(persisted, contract.KindCounter, 1)
			e.wantValue(recreated, contract.KindCounter, 7)
		}},
		{"expire with a negative ttl deletes", func(e *env) {
			id := e.id("n")
			e.apply(set(id, 3))
			if r := e.apply(contract.Op{Type: contract.OpExpire, ID: id, TTL: -time.Second}); !r.Changed {
				e.t.Errorf("expire -1s = %+v, want changed", r)
			}
			e.wantMissing(id)
		}},
		{"set with KeepTTL of a missing counter", func(e *env) {
			id := e.id("kt")
			op := set(id, 4)
			op.KeepTTL = true
			e.wantResult("set KeepTTL", e.apply(op), contract.KindCounter, 4, true)
			e.wantNoTTL(id)
			op = set(id, 5)
			op.TTL = time.Hour // a TTL wins over KeepTTL
			op.KeepTTL = true
			e.apply(op)
			e.wantTTL(id, time.Hour)
		}},
		{"sync writes", func(e *env) {
			id := e.id("sync")
			r, err := e.b.Apply(e.ctx, add(id, contract.KindNone, 3), contract.WriteOptions{Durability: contract.Sync})
			if err != nil || r.Value != 3 {
				e.t.Fatalf("sync add = %+v, %v", r, err)
			}
			res, err := e.b.ApplyBatch(e.ctx, []contract.Op{add(id, contract.KindNone, 1), hadd(e.id("sh"), fd("f", 1))}, contract.WriteOptions{Durability: contract.Sync})
			if err != nil || len(res) != 2 || res[0].Value != 4 {
				e.t.Fatalf("sync batch = %+v, %v", res, err)
			}
			e.wantValue(id, contract.KindCounter, 4)
		}},
		{"ready", func(e *env) {
			if err := e.b.Ready(); err != nil {
				e.t.Errorf("ready: %v", err)
			}
		}},
		{"pfmerge", func(e *env) {
			ids := e.coLocated(3)
			e.apply(pfadd(ids[0], "a", "b"))
			e.apply(pfadd(ids[1], "b", "c"))
			r := e.apply(contract.Op{Type: contract.OpPFMerge, ID: ids[2], Sources: ids[:2]})
			e.wantResult("pfmerge", r, contract.KindHLL, 3, true)
			if n, _, err := e.b.PFCount(e.ctx, ids[0], ids[1]); err != nil || n != 3 {
				e.t.Errorf("PFCount of the union = %d, %v; want 3", n, err)
			}
			// The destination is part of the union.
			e.apply(pfadd(ids[0], "d"))
			r = e.apply(contract.Op{Type: contract.OpPFMerge, ID: ids[2], Sources: ids[:1]})
			e.wantResult("pfmerge into an existing hll", r, contract.KindHLL, 4, true)
		}},
		{"ids sharing a hash tag are one owner's in multi-key ops", func(e *env) {
			// Redis Cluster's rule, on every backend: ids with the same
			// {tag} (the first '{' to the next '}', not empty) live
			// together, so PFCOUNT and PFMERGE over them are accepted
			// (a cluster places them by the tag; docs/cluster.md).
			for i := 0; i < 4; i++ {
				tag := fmt.Sprintf("{%stag%d}", e.p, i)
				a, b, dst := tag+":a", tag+":b", "pre"+tag+":dst"
				e.apply(pfadd(a, "x", "y"))
				e.apply(pfadd(b, "y", "z"))
				if n, _, err := e.b.PFCount(e.ctx, a, b); err != nil || n != 3 {
					e.t.Fatalf("PFCount %q %q = %d, %v; want 3", a, b, n, err)
				}
				r := e.apply(contract.Op{Type: contract.OpPFMerge, ID: dst, Sources: []string{a, b}})
				e.wantResult("pfmerge of one tag", r, contract.KindHLL, 3, true)
			}
		}},
		{"cross-owner multi-key", func(e *env) {
			if e.caps.MultiKeyAnyOwner {
				a, b := e.id("a"), e.id("b")
				e.apply(pfadd(a, "x"))
				e.apply(pfadd(b, "y"))
				if n, _, err := e.b.PFCount(e.ctx, a, b); err != nil || n != 2 {
					e.t.Errorf("PFCount = %d, %v; want 2", n, err)
				}
				return
			}
			a, b := e.crossOwner()
			e.apply(pfadd(a, "x"))
			before := e.snap(a)
			_, _, err := e.b.PFCount(e.ctx, a, b)
			e.wantErr("PFCount across owners", err, contract.ErrInvalidArgument)
			_, err = e.b.Apply(e.ctx, contract.Op{Type: contract.OpPFMerge, ID: a, Sources: []string{b}}, contract.WriteOptions{})
			e.wantErr("PFMERGE across owners", err, contract.ErrInvalidArgument)
			e.unchanged(a, before)
		}},
	}
}

// everyKind returns one creating op per kind, on ids of e.
func everyKind(e *env) []contract.Op {
	w := add(e.id("kw"), contract.KindWindow, 1)
	w.Window = testWindow
	return []contract.Op{
		add(e.id("kc"), contract.KindCounter, 1),
		add(e.id("ks"), contract.KindSharded, 1),
		add(e.id("kp"), contract.KindPN, 1),
		w,
		pfadd(e.id("ku"), "a"),
		hadd(e.id("kh"), fd("f", 1)),
	}
}

// settle waits, on a backend with LaggingCRDTAdds, until pn and sharded
// adds have reached every node, so that a following write on another node
// (expire, delete) finds them. A documented time bound: three intervals.
func (e *env) settle() {
	if e.caps.LaggingCRDTAdds {
		time.Sleep(3 * time.Duration(e.caps.CRDTPropagationMS) * time.Millisecond)
	}
}

// wantTTL checks that id has a TTL in (max-1m, max].
func (e *env) wantTTL(id string, maxTTL time.Duration) {
	e.t.Helper()
	ttl, has, exists, err := e.b.TTL(e.ctx, id)
	if err != nil || !has || !exists || ttl <= maxTTL-time.Minute || ttl > maxTTL {
		e.t.Errorf("TTL %q = %v has %v exists %v, %v; want about %v", id, ttl, has, exists, err, maxTTL)
	}
}

func (e *env) wantNoTTL(id string) {
	e.t.Helper()
	ttl, has, exists, err := e.b.TTL(e.ctx, id)
	if err != nil || has || !exists {
		e.t.Errorf("TTL %q = %v has %v exists %v, %v; want an existing counter without TTL", id, ttl, has, exists, err)
	}
}

// coLocated returns n ids of e that every backend accepts together in one
// multi-key op: on a backend without MultiKeyAnyOwner, ids found to share
// the first one's owner (PFCOUNT of missing ids refuses ids of other
// owners).
func (e *env) coLocated(n int) []string {
	e.t.Helper()
	ids := []string{e.id("m0")}
	for i := 1; len(ids) < n && i < 1000; i++ {
		id := e.id(fmt.Sprintf("m%d", i))
		if e.caps.MultiKeyAnyOwner {
			ids = append(ids, id)
			continue
		}
		_, _, err := e.b.PFCount(e.ctx, ids[0], id)
		if err == nil {
			ids = append(ids, id)
		}
	}
	if len(ids) < n {
		e.t.Fatalf("no %d ids with one owner among 1000", n)
	}
	return ids
}

// crossOwner returns two ids of e that have different owners.
func (e *env) crossOwner() (string, string) {
	e.t.Helper()
	a := e.id("x0")
	for i := 1; i < 1000; i++ {
		b := e.id(fmt.Sprintf("x%d", i))
		if _, _, err := e.b.PFCount(e.ctx, a, b); err != nil {
			return a, b
		}
	}
	e.t.Fatal("all of 1000 ids have one owner: is the cluster one node?")
	return "", ""
}
