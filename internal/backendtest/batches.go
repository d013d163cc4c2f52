package backendtest

import (
	"errors"
	"slices"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
)

func idemCases() []tcase {
	return []tcase{
		{"replay returns the first result", func(e *env) {
			id, key := e.id("c"), e.keyOf("a")
			r, err := e.applyKey(add(id, contract.KindNone, 5), key)
			if err != nil || r.Replayed || r.Value != 5 {
				e.t.Fatalf("first apply = %+v, %v; want 5, not replayed", r, err)
			}
			e.apply(add(id, contract.KindNone, 100)) // the replay must not show it
			r2, err := e.applyKey(add(id, contract.KindNone, 5), key)
			if err != nil || !r2.Replayed || r2.Value != 5 || r2.Version != r.Version || r2.Kind != contract.KindCounter {
				e.t.Errorf("retry = %+v, %v; want the first result %+v, replayed", r2, err, r)
			}
			e.wantValue(id, contract.KindCounter, 105)
		}},
		{"replay of every op type", func(e *env) {
			ids := e.coLocated(2)
			ops := append(everyKind(e),
				set(e.id("s"), 4),
				contract.Op{Type: contract.OpExpire, ID: e.id("s"), TTL: 3600e9},
				contract.Op{Type: contract.OpHDel, ID: e.id("kh"), Names: []string{"f"}},
				pfadd(ids[0], "a"),
				contract.Op{Type: contract.OpPFMerge, ID: ids[1], Sources: ids[:1]},
				contract.Op{Type: contract.OpDelete, ID: e.id("kc")},
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
			if _, err := e.applyKey(add(id, contract.KindNone, 5), key); err != nil {
				e.t.Fatal(err)
			}
			before := e.snap(id)
			for _, c := range []struct {
				name string
				op   contract.Op
				// same: the request applies where the first one did.
				same bool
			}{
				{"another delta", add(id, contract.KindNone, 6), true},
				{"another id", add(e.id("other"), contract.KindNone, 5), false},
				{"another kind", add(id, contract.KindPN, 5), false},
				{"another op", set(id, 5), true},
				{"a field the op type does not read", contract.Op{Type: contract.OpAdd, ID: id, Delta: 5, TTL: 1}, true},
			} {
				if !c.same && !e.caps.GlobalIdempotencyKeys {
					continue
				}
				_, err := e.applyKey(c.op, key)
				e.wantErr("reuse for "+c.name, err, contract.ErrIdempotencyReuse)
			}
			_, err := e.b.ApplyBatch(e.ctx, []contract.Op{add(id, contract.KindNone, 5), add(id, contract.KindNone, 5)}, contract.WriteOptions{IdempotencyKey: key})
			e.wantErr("reuse for a batch", err, contract.ErrIdempotencyReuse)
			e.unchanged(id, before)
			e.wantMissing(e.id("other"))
		}},
		{"a failed request leaves its key free", func(e *env) {
			h, c, key := e.id("h"), e.id("c"), e.keyOf("a")
			e.apply(hadd(h, fd("f", 1)))
			_, err := e.applyKey(add(h, contract.KindNone, 1), key)
			e.wantErr("add to a hash", err, contract.ErrWrongKind)
			_, err = e.applyKey(add(h, contract.KindNone, 1), key)
			e.wantErr("the same failing add again", err, contract.ErrWrongKind)
			r, err := e.applyKey(add(c, contract.KindNone, 2), key)
			if err != nil || r.Replayed || r.Value != 2 {
				e.t.Errorf("another request with the key = %+v, %v; want applied", r, err)
			}
		}},
		{"batch replay", func(e *env) {
			key := e.keyOf("b")
			ops := []contract.Op{add(e.id("a"), contract.KindNone, 1), set(e.id("b"), 3), hadd(e.id("h"), fd("f", 2)), add(e.id("a"), contract.KindNone, 1)}
			res, err := e.b.ApplyBatch(e.ctx, ops, contract.WriteOptions{IdempotencyKey: key})
			if err != nil {
				e.t.Fatal(err)
			}
			res2, err := e.b.ApplyBatch(e.ctx, ops, contract.WriteOptions{IdempotencyKey: key})
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
			e.wantValue(e.id("a"), contract.KindCounter, 2)
			e.wantValue(e.id("b"), contract.KindCounter, 3)
			_, err = e.applyKey(ops[0], key)
			e.wantErr("the batch's key for one of its ops", err, contract.ErrIdempotencyReuse)
			_, err = e.b.ApplyBatch(e.ctx, ops[:2], contract.WriteOptions{IdempotencyKey: key})
			e.wantErr("the batch's key for part of it", err, contract.ErrIdempotencyReuse)
			e.wantValue(e.id("a"), contract.KindCounter, 2)
		}},
		{"a single op's key for a batch of that op", func(e *env) {
			key := e.keyOf("s")
			op := add(e.id("a"), contract.KindNone, 4)
			if _, err := e.applyKey(op, key); err != nil {
				e.t.Fatal(err)
			}
			// The same ops are the same request (engine.Fingerprint): a
			// replay, never a second apply.
			res, err := e.b.ApplyBatch(e.ctx, []contract.Op{op}, contract.WriteOptions{IdempotencyKey: key})
			if err != nil || len(res) != 1 || !res[0].Replayed || res[0].Value != 4 {
				e.t.Errorf("batch of the same op = %+v, %v; want a replay of 4", res, err)
			}
			e.wantValue(e.id("a"), contract.KindCounter, 4)
		}},
	}
}

// awaitRecord waits, after a keyed op, until a retry on any node replays
// it: with LaggingCRDTAdds, a keyed pn or sharded add is recorded on the
// node that applied it and reaches the others with the next push (up to
// CRDTPropagationMS); a retry elsewhere before that applies again. A
// documented time bound, so the wait is a sleep of three intervals.
func (e *env) awaitRecord(op contract.Op) {
	if op.Type == contract.OpAdd && (op.Kind == contract.KindPN || op.Kind == contract.KindSharded) {
		e.settle()
	}
}

// sameResult compares results (Fields by value).
func sameResult(a, b contract.Result) bool {
	return a.ID == b.ID && a.Kind == b.Kind && a.Value == b.Value && a.Version == b.Version &&
		a.Changed == b.Changed && a.Replayed == b.Replayed && slices.Equal(a.Fields, b.Fields)
}

func batchCases() []tcase {
	return []tcase{
		{"results", func(e *env) {
			ids := e.coLocated(2)
			w := add(e.id("w"), contract.KindWindow, 2)
			w.Window = testWindow
			ops := []contract.Op{
				add(e.id("a"), contract.KindNone, 1),
				add(e.id("a"), contract.KindNone, 2),
				set(e.id("b"), 3),
				hadd(e.id("h"), fd("f", 2), fd("g", 1)),
				pfadd(ids[0], "x", "y"),
				{Type: contract.OpPFMerge, ID: ids[1], Sources: ids[:1]},
				w,
				{Type: contract.OpExpire, ID: e.id("b"), TTL: 3600e9},
				{Type: contract.OpDelete, ID: e.id("missing")},
				{Type: contract.OpHDel, ID: e.id("h"), Names: []string{"g"}},
			}
			res, err := e.b.ApplyBatch(e.ctx, ops, contract.WriteOptions{})
			if err != nil || len(res) != len(ops) {
				e.t.Fatalf("batch = %+v, %v", res, err)
			}
			want := []struct {
				kind    contract.Kind
				value   int64
				changed bool
			}{
				{contract.KindCounter, 1, true}, {contract.KindCounter, 3, true}, {contract.KindCounter, 3, true},
				{contract.KindHash, 0, true}, {contract.KindHLL, 0, true}, {contract.KindHLL, 2, true},
				{contract.KindWindow, 2, true}, {contract.KindCounter, 3, true}, {contract.KindNone, 0, false},
				{contract.KindHash, 1, true},
			}
			for i, w := range want {
				if res[i].ID != ops[i].ID {
					e.t.Errorf("result %d id %q, want %q", i, res[i].ID, ops[i].ID)
				}
				if ops[i].Type == contract.OpExpire {
					res[i].Value = w.value // Result.Value of an expire is not specified
				}
				e.wantResult(ops[i].Type.String(), res[i], w.kind, w.value, w.changed)
			}
			if !slices.Equal(res[3].Fields, []counter.Field{{Name: "f", Value: 2}, {Name: "g", Value: 1}}) {
				e.t.Errorf("hadd fields = %v", res[3].Fields)
			}
			e.wantValue(e.id("a"), contract.KindCounter, 3)
			e.wantTTL(e.id("b"), 3600e9)
		}},
		{"too large", func(e *env) {
			ops := make([]contract.Op, 1001)
			for i := range ops {
				ops[i] = add(e.id("a"), contract.KindNone, 1)
			}
			_, err := e.b.ApplyBatch(e.ctx, ops, contract.WriteOptions{})
			e.wantErr("1001 ops", err, contract.ErrBatchTooLarge)
			e.wantMissing(e.id("a"))
		}},
		{"invalid op applies nothing", func(e *env) {
			ops := []contract.Op{add(e.id("a"), contract.KindNone, 1), set(e.id("b"), 1), {Type: contract.OpHAdd, ID: e.id("h")}}
			_, err := e.b.ApplyBatch(e.ctx, ops, contract.WriteOptions{})
			e.wantBatchErr(err, 2, contract.ErrInvalidArgument)
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
			ops := []contract.Op{
				add(x, contract.KindNone, 5),
				set(y, 7),
				hadd(z, fd("f", 3)),
				add(big, contract.KindNone, 1),
				add(h, contract.KindNone, 1), // wrong kind
			}
			_, err := e.b.ApplyBatch(e.ctx, ops, contract.WriteOptions{})
			e.wantBatchErr(err, 4, contract.ErrWrongKind)
			e.unchanged(h, before)
			switch e.caps.Batches {
			case contract.BatchAtomic, contract.BatchAtomicPerOwner:
				e.wantValue(x, contract.KindCounter, 10)
				e.wantMissing(y)
				e.wantMissing(z)
				e.wantValue(big, contract.KindCounter, 1<<62)
			case contract.BatchUndoInverse:
				// Adds and hash adds undone; the set stays.
				e.wantValue(x, contract.KindCounter, 10)
				e.wantValue(y, contract.KindCounter, 7)
				if f, _, err := e.b.HGet(e.ctx, z, "f"); err != nil || f != 0 {
					e.t.Errorf("hash add not undone: f = %d, %v", f, err)
				}
				e.wantValue(big, contract.KindCounter, 1<<62)
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
			_, err := e.b.ApplyBatch(e.ctx, []contract.Op{add(a, contract.KindNone, 1), add(b, contract.KindNone, 1)}, contract.WriteOptions{})
			e.wantBatchErr(err, 1, contract.ErrWrongKind)
			switch e.caps.Batches {
			case contract.BatchAtomic, contract.BatchUndoInverse:
				if v := e.get(a); v.Value != 0 {
					e.t.Errorf("%s batch: the other add stayed: %+v", e.caps.Batches, v)
				}
			case contract.BatchAtomicPerOwner:
				// The other owner's part may have applied: nothing to assert
				// beyond the error.
			}
		}},
		{"one-op batch names its op", func(e *env) {
			id := e.id("a")
			e.apply(set(id, 1<<62))
			_, err := e.b.ApplyBatch(e.ctx, []contract.Op{add(id, contract.KindNone, 1<<62)}, contract.WriteOptions{})
			e.wantBatchErr(err, 0, contract.ErrOverflow)
			_, err = e.b.ApplyBatch(e.ctx, []contract.Op{add(id, contract.KindNone, 1<<62)}, contract.WriteOptions{IdempotencyKey: e.id("k")})
			e.wantBatchErr(err, 0, contract.ErrOverflow)
			e.wantValue(id, contract.KindCounter, 1<<62)
		}},
		{"overflow in a batch", func(e *env) {
			id := e.id("a")
			e.apply(set(id, 1<<62))
			_, err := e.b.ApplyBatch(e.ctx, []contract.Op{add(id, contract.KindNone, 1<<62-1), add(id, contract.KindNone, 1)}, contract.WriteOptions{})
			e.wantBatchErr(err, 1, contract.ErrOverflow)
			e.wantValue(id, contract.KindCounter, 1<<62) // one id: every guarantee undoes the first add
		}},
	}
}

// wantBatchErr checks a batch error: the sentinel and the failing index.
func (e *env) wantBatchErr(err error, index int, sentinel error) {
	e.t.Helper()
	var be *contract.BatchError
	if !errors.As(err, &be) || be.Index != index || !errors.Is(err, sentinel) {
		e.t.Errorf("batch error %v, want op %d failing with %v", err, index, sentinel)
	}
}
