package backendtest

import (
	"errors"
	"slices"

	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/engine"
)

func idemCases() []tcase {
	return []tcase{
		{"replay returns the first result", func(e *env) {
			id, key := e.id("c"), e.keyOf("a")
			r, err := e.applyKey(add(id, engine.KindNone, 5), key)
			if err != nil || r.Replayed || r.Value != 5 {
				e.t.Fatalf("first apply = %+v, %v; want 5, not replayed", r, err)
			}
			e.apply(add(id, engine.KindNone, 100)) // the replay must not show it
			r2, err := e.applyKey(add(id, engine.KindNone, 5), key)
			if err != nil || !r2.Replayed || r2.Value != 5 || r2.Version != r.Version || r2.Kind != engine.KindCounter {
				e.t.Errorf("retry = %+v, %v; want the first result %+v, replayed", r2, err, r)
			}
			e.wantValue(id, engine.KindCounter, 105)
		}},
		{"replay of every op type", func(e *env) {
			ids := e.coLocated(2)
			ops := append(everyKind(e),
				set(e.id("s"), 4),
				engine.Op{Type: engine.OpExpire, ID: e.id("s"), TTL: 3600e9},
				engine.Op{Type: engine.OpHDel, ID: e.id("kh"), Names: []string{"f"}},
				pfadd(ids[0], "a"),
				engine.Op{Type: engine.OpPFMerge, ID: ids[1], Sources: ids[:1]},
				engine.Op{Type: engine.OpDelete, ID: e.id("kc")},
			)
			for i, op := range ops {
				key := e.keyOf(string(rune('a' + i)))
				r, err := e.applyKey(op, key)
				if err != nil {
					e.t.Fatalf("%s %q: %v", op.Type, op.ID, err)
				}
				e.awaitRecord(op)
				r2, err := e.applyKey(op, key)
				r.Replayed = true
				if err != nil || !sameResult(r, r2) {
					e.t.Errorf("%s %q retry = %+v, %v; want %+v", op.Type, op.ID, r2, err, r)
				}
			}
		}},
		{"key reused with another request", func(e *env) {
			id, key := e.id("c"), e.keyOf("a")
			if _, err := e.applyKey(add(id, engine.KindNone, 5), key); err != nil {
				e.t.Fatal(err)
			}
			before := e.snap(id)
			for _, c := range []struct {
				name string
				op   engine.Op
				// same: the request applies where the first one did.
				same bool
			}{
				{"another delta", add(id, engine.KindNone, 6), true},
				{"another id", add(e.id("other"), engine.KindNone, 5), false},
				{"another kind", add(id, engine.KindPN, 5), false},
				{"another op", set(id, 5), true},
				{"a field the op type does not read", engine.Op{Type: engine.OpAdd, ID: id, Delta: 5, TTL: 1}, true},
			} {
				if !c.same && !e.caps.GlobalIdempotencyKeys {
					continue
				}
				_, err := e.applyKey(c.op, key)
				e.wantErr("reuse for "+c.name, err, engine.ErrIdempotencyReuse)
			}
			_, err := e.b.ApplyBatch(e.ctx, []engine.Op{add(id, engine.KindNone, 5), add(id, engine.KindNone, 5)}, engine.WriteOptions{IdempotencyKey: key})
			e.wantErr("reuse for a batch", err, engine.ErrIdempotencyReuse)
			e.unchanged(id, before)
			e.wantMissing(e.id("other"))
		}},
		{"a failed request leaves its key free", func(e *env) {
			h, c, key := e.id("h"), e.id("c"), e.keyOf("a")
			e.apply(hadd(h, fd("f", 1)))
			_, err := e.applyKey(add(h, engine.KindNone, 1), key)
			e.wantErr("add to a hash", err, engine.ErrWrongKind)
			_, err = e.applyKey(add(h, engine.KindNone, 1), key)
			e.wantErr("the same failing add again", err, engine.ErrWrongKind)
			r, err := e.applyKey(add(c, engine.KindNone, 2), key)
			if err != nil || r.Replayed || r.Value != 2 {
				e.t.Errorf("another request with the key = %+v, %v; want applied", r, err)
			}
		}},
		{"batch replay", func(e *env) {
			key := e.keyOf("b")
			ops := []engine.Op{add(e.id("a"), engine.KindNone, 1), set(e.id("b"), 3), hadd(e.id("h"), fd("f", 2)), add(e.id("a"), engine.KindNone, 1)}
			res, err := e.b.ApplyBatch(e.ctx, ops, engine.WriteOptions{IdempotencyKey: key})
			if err != nil {
				e.t.Fatal(err)
			}
			res2, err := e.b.ApplyBatch(e.ctx, ops, engine.WriteOptions{IdempotencyKey: key})
			if err != nil || len(res2) != len(res) {
				e.t.Fatalf("retry = %+v, %v", res2, err)
			}
			for i := range res {
				want := res[i]
				want.Replayed = true
				if !sameResult(want, res2[i]) {
					e.t.Errorf("retry result %d = %+v, want %+v", i, res2[i], want)
				}
			}
			e.wantValue(e.id("a"), engine.KindCounter, 2)
			e.wantValue(e.id("b"), engine.KindCounter, 3)
			_, err = e.applyKey(ops[0], key)
			e.wantErr("the batch's key for one of its ops", err, engine.ErrIdempotencyReuse)
			_, err = e.b.ApplyBatch(e.ctx, ops[:2], engine.WriteOptions{IdempotencyKey: key})
			e.wantErr("the batch's key for part of it", err, engine.ErrIdempotencyReuse)
			e.wantValue(e.id("a"), engine.KindCounter, 2)
		}},
		{"a single op's key for a batch of that op", func(e *env) {
			key := e.keyOf("s")
			op := add(e.id("a"), engine.KindNone, 4)
			if _, err := e.applyKey(op, key); err != nil {
				e.t.Fatal(err)
			}
			// The same ops are the same request (engine.Fingerprint): a
			// replay, never a second apply.
			res, err := e.b.ApplyBatch(e.ctx, []engine.Op{op}, engine.WriteOptions{IdempotencyKey: key})
			if err != nil || len(res) != 1 || !res[0].Replayed || res[0].Value != 4 {
				e.t.Errorf("batch of the same op = %+v, %v; want a replay of 4", res, err)
			}
			e.wantValue(e.id("a"), engine.KindCounter, 4)
		}},
	}
}

// awaitRecord waits, after a keyed op, until a retry on any node replays
// it: with LaggingCRDTAdds, a keyed pn or sharded add is recorded on the
// node that applied it and reaches the others with the next push (up to
// CRDTPropagationMS); a retry elsewhere before that applies again. A
// documented time bound, so the wait is a sleep of three intervals.
func (e *env) awaitRecord(op engine.Op) {
	if op.Type == engine.OpAdd && (op.Kind == engine.KindPN || op.Kind == engine.KindSharded) {
		e.settle()
	}
}

// sameResult compares results (Fields by value).
func sameResult(a, b engine.Result) bool {
	return a.ID == b.ID && a.Kind == b.Kind && a.Value == b.Value && a.Version == b.Version &&
		a.Changed == b.Changed && a.Replayed == b.Replayed && slices.Equal(a.Fields, b.Fields)
}

func batchCases() []tcase {
	return []tcase{
		{"results", func(e *env) {
			ids := e.coLocated(2)
			w := add(e.id("w"), engine.KindWindow, 2)
			w.Window = testWindow
			ops := []engine.Op{
				add(e.id("a"), engine.KindNone, 1),
				add(e.id("a"), engine.KindNone, 2),
				set(e.id("b"), 3),
				hadd(e.id("h"), fd("f", 2), fd("g", 1)),
				pfadd(ids[0], "x", "y"),
				{Type: engine.OpPFMerge, ID: ids[1], Sources: ids[:1]},
				w,
				{Type: engine.OpExpire, ID: e.id("b"), TTL: 3600e9},
				{Type: engine.OpDelete, ID: e.id("missing")},
				{Type: engine.OpHDel, ID: e.id("h"), Names: []string{"g"}},
			}
			res, err := e.b.ApplyBatch(e.ctx, ops, engine.WriteOptions{})
			if err != nil || len(res) != len(ops) {
				e.t.Fatalf("batch = %+v, %v", res, err)
			}
			want := []struct {
				kind    engine.Kind
				value   int64
				changed bool
			}{
				{engine.KindCounter, 1, true}, {engine.KindCounter, 3, true}, {engine.KindCounter, 3, true},
				{engine.KindHash, 0, true}, {engine.KindHLL, 0, true}, {engine.KindHLL, 2, true},
				{engine.KindWindow, 2, true}, {engine.KindCounter, 3, true}, {engine.KindNone, 0, false},
				{engine.KindHash, 1, true},
			}
			for i, w := range want {
				if res[i].ID != ops[i].ID {
					e.t.Errorf("result %d id %q, want %q", i, res[i].ID, ops[i].ID)
				}
				if ops[i].Type == engine.OpExpire {
					res[i].Value = w.value // Result.Value of an expire is not specified
				}
				e.wantResult(ops[i].Type.String(), res[i], w.kind, w.value, w.changed)
			}
			if !slices.Equal(res[3].Fields, []counter.Field{{Name: "f", Value: 2}, {Name: "g", Value: 1}}) {
				e.t.Errorf("hadd fields = %v", res[3].Fields)
			}
			e.wantValue(e.id("a"), engine.KindCounter, 3)
			e.wantTTL(e.id("b"), 3600e9)
		}},
		{"too large", func(e *env) {
			ops := make([]engine.Op, 1001)
			for i := range ops {
				ops[i] = add(e.id("a"), engine.KindNone, 1)
			}
			_, err := e.b.ApplyBatch(e.ctx, ops, engine.WriteOptions{})
			e.wantErr("1001 ops", err, engine.ErrBatchTooLarge)
			e.wantMissing(e.id("a"))
		}},
		{"invalid op applies nothing", func(e *env) {
			ops := []engine.Op{add(e.id("a"), engine.KindNone, 1), set(e.id("b"), 1), {Type: engine.OpHAdd, ID: e.id("h")}}
			_, err := e.b.ApplyBatch(e.ctx, ops, engine.WriteOptions{})
			e.wantBatchErr(err, 2, engine.ErrInvalidArgument)
			e.wantMissing(e.id("a"))
			e.wantMissing(e.id("b"))
		}},
		{"failing op", func(e *env) {
			// One owner, so that every Batches guarantee applies in full.
			ids := e.coLocated(5)
			x, y, z, h, big := ids[0], ids[1], ids[2], ids[3], ids[4]
			e.apply(set(x, 10))
			e.apply(hadd(h, fd("f", 1)))
			e.apply(set(big, 1<<62))
			before := e.snap(h)
			ops := []engine.Op{
				add(x, engine.KindNone, 5),
				set(y, 7),
				hadd(z, fd("f", 3)),
				add(big, engine.KindNone, 1),
				add(h, engine.KindNone, 1), // wrong kind
			}
			_, err := e.b.ApplyBatch(e.ctx, ops, engine.WriteOptions{})
			e.wantBatchErr(err, 4, engine.ErrWrongKind)
			e.unchanged(h, before)
			switch e.caps.Batches {
			case engine.BatchAtomic, engine.BatchAtomicPerOwner:
				e.wantValue(x, engine.KindCounter, 10)
				e.wantMissing(y)
				e.wantMissing(z)
				e.wantValue(big, engine.KindCounter, 1<<62)
			case engine.BatchUndoInverse:
				// Adds and hash adds undone; the set stays.
				e.wantValue(x, engine.KindCounter, 10)
				e.wantValue(y, engine.KindCounter, 7)
				if f, _, err := e.b.HGet(e.ctx, z, "f"); err != nil || f != 0 {
					e.t.Errorf("hash add not undone: f = %d, %v", f, err)
				}
				e.wantValue(big, engine.KindCounter, 1<<62)
			default:
				e.t.Errorf("unknown Batches %q", e.caps.Batches)
			}
		}},
		{"failing op across owners", func(e *env) {
			a, b := e.id("a"), e.id("b")
			if !e.caps.MultiKeyAnyOwner {
				a, b = e.crossOwner()
			}
			e.apply(hadd(b, fd("f", 1)))
			_, err := e.b.ApplyBatch(e.ctx, []engine.Op{add(a, engine.KindNone, 1), add(b, engine.KindNone, 1)}, engine.WriteOptions{})
			e.wantBatchErr(err, 1, engine.ErrWrongKind)
			switch e.caps.Batches {
			case engine.BatchAtomic, engine.BatchUndoInverse:
				if v := e.get(a); v.Value != 0 {
					e.t.Errorf("%s batch: the other add stayed: %+v", e.caps.Batches, v)
				}
			case engine.BatchAtomicPerOwner:
				// The other owner's part may have applied: nothing to assert
				// beyond the error.
			}
		}},
		{"one-op batch names its op", func(e *env) {
			id := e.id("a")
			e.apply(set(id, 1<<62))
			_, err := e.b.ApplyBatch(e.ctx, []engine.Op{add(id, engine.KindNone, 1<<62)}, engine.WriteOptions{})
			e.wantBatchErr(err, 0, engine.ErrOverflow)
			_, err = e.b.ApplyBatch(e.ctx, []engine.Op{add(id, engine.KindNone, 1<<62)}, engine.WriteOptions{IdempotencyKey: e.id("k")})
			e.wantBatchErr(err, 0, engine.ErrOverflow)
			e.wantValue(id, engine.KindCounter, 1<<62)
		}},
		{"overflow in a batch", func(e *env) {
			id := e.id("a")
			e.apply(set(id, 1<<62))
			_, err := e.b.ApplyBatch(e.ctx, []engine.Op{add(id, engine.KindNone, 1<<62-1), add(id, engine.KindNone, 1)}, engine.WriteOptions{})
			e.wantBatchErr(err, 1, engine.ErrOverflow)
			e.wantValue(id, engine.KindCounter, 1<<62) // one id: every guarantee undoes the first add
		}},
	}
}

// wantBatchErr checks a batch error: the sentinel and the failing index.
func (e *env) wantBatchErr(err error, index int, sentinel error) {
	e.t.Helper()
	var be *engine.BatchError
	if !errors.As(err, &be) || be.Index != index || !errors.Is(err, sentinel) {
		e.t.Errorf("batch error %v, want op %d failing with %v", err, index, sentinel)
	}
}
