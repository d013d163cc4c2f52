package consumer

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/pipeline/rules"
)

// TestOpTableMatchesMap: the chunk's table of ops finds, after any
// sequence of puts (new keys and keys that get a new op) and resets,
// the same op for every key as a map[opKey]int does, and none for a key
// never put, across growth.
func TestOpTableMatchesMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var tab opTable
		want := map[opKey]int{}
		var ops []contract.Op
		genOp := func(label string) contract.Op {
			// Few values per field, so keys collide in every field but one.
			op := contract.Op{
				Type: rapid.SampledFrom([]contract.OpType{contract.OpAdd, contract.OpPFAdd}).Draw(t, label+"type"),
				ID:   rapid.SampledFrom([]string{"a", "b", "views:p1", "views:p2", ""}).Draw(t, label+"id") + rapid.StringN(0, 3, -1).Draw(t, label+"suffix"),
				At:   int64(rapid.IntRange(0, 3).Draw(t, label+"at")) * int64(time.Minute),
			}
			if rapid.Bool().Draw(t, label+"window") {
				op.Window = counter.WindowSpec{Granularity: time.Minute, Span: time.Duration(rapid.IntRange(1, 2).Draw(t, label+"span")) * time.Hour, Fixed: rapid.Bool().Draw(t, label+"fixed")}
			}
			return op
		}
		check := func(op contract.Op) {
			k := opKey{op.Type, op.ID, op.Window, op.At}
			w, ok := want[k]
			if !ok {
				w = -1
			}
			if got := tab.find(ops, &op, opHash(&op, rules.HashID(op.ID))); got != w {
				t.Fatalf("find %+v: %d, want %d", k, got, w)
			}
		}
		for step := range rapid.IntRange(0, 3000).Draw(t, "steps") {
			switch rapid.IntRange(0, 20).Draw(t, "action") {
			case 0:
				tab.reset()
				ops, want = ops[:0], map[opKey]int{}
			case 1, 2, 3:
				check(genOp("probe"))
			default:
				op := genOp("op")
				ops = append(ops, op)
				tab.put(ops, opHash(&op, rules.HashID(op.ID)), len(ops)-1)
				want[opKey{op.Type, op.ID, op.Window, op.At}] = len(ops) - 1
			}
			_ = step
		}
		for k := range want {
			check(contract.Op{Type: k.t, ID: k.id, Window: k.window, At: k.at})
		}
		if tab.n != len(want) {
			t.Fatalf("table holds %d keys, want %d", tab.n, len(want))
		}
	})
}
