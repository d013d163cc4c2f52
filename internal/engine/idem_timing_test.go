package engine

import (
	"github.com/counterd/counterd/internal/contract"
	"strconv"
	"testing"
)

// BenchmarkIdemAdd is a keyed add (a new key each time, async): the claim,
// the Pebble lookup of the key, the apply and the record in memory and in
// the next flush.
func BenchmarkIdemAdd(b *testing.B) {
	e := openMem(b)
	op := contract.Op{Type: contract.OpAdd, ID: "page_views:keyed", Delta: 1}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		if _, err := e.Apply(bg, op, contract.WriteOptions{IdempotencyKey: "k-" + strconv.Itoa(i)}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkIdemReplay is a retry of one keyed add: the record's results
// replayed from memory.
func BenchmarkIdemReplay(b *testing.B) {
	e := openMem(b)
	op := contract.Op{Type: contract.OpAdd, ID: "page_views:keyed", Delta: 1}
	wo := contract.WriteOptions{IdempotencyKey: "retried"}
	if _, err := e.Apply(bg, op, wo); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if r, err := e.Apply(bg, op, wo); err != nil || !r.Replayed {
			b.Fatal(r, err)
		}
	}
}

// BenchmarkIdemBatch is a keyed batch of 8 adds to 8 counters (a new key
// each time).
func BenchmarkIdemBatch(b *testing.B) {
	e := openMem(b)
	ops := make([]contract.Op, 8)
	for j := range ops {
		ops[j] = contract.Op{Type: contract.OpAdd, ID: "batch:" + strconv.Itoa(j), Delta: 1}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		if _, err := e.ApplyBatch(bg, ops, contract.WriteOptions{IdempotencyKey: "b-" + strconv.Itoa(i)}); err != nil {
			b.Fatal(err)
		}
	}
}
