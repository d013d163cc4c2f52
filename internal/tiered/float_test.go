package tiered_test

import (
	"context"
	"slices"
	"testing"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
)

// testFloatsRestoreFromPostgres: float counters, their conversions to and
// from counters, and HSET reach PostgreSQL through the write-behind and
// come back exactly when Redis has lost them.
func testFloatsRestoreFromPostgres(t *testing.T, s setup) {
	e := s.env(t, nil)
	ctx := context.Background()
	addf := func(id, incr string) contract.Result {
		return apply(t, e.b, contract.Op{Type: contract.OpAdd, ID: id, Kind: contract.KindFloat, Float: incr})
	}
	addf("f", "0.1")
	addf("f", "0.2")
	apply(t, e.b, add("c", contract.KindNone, 10))
	addf("c", "0.5") // counter 10 -> float 10.5
	addf("i", "1.5")
	addf("i", "0.5")
	apply(t, e.b, add("i", contract.KindNone, 3)) // float 2 -> counter 5
	addf("s", "7.25")
	apply(t, e.b, contract.Op{Type: contract.OpSet, ID: "s", Value: 9}) // float -> counter 9
	apply(t, e.b, contract.Op{Type: contract.OpHSet, ID: "h", Fields: []counter.FieldDelta{{Name: "a", Delta: 5}, {Name: "b", Delta: -2}}})
	apply(t, e.b, contract.Op{Type: contract.OpHSet, ID: "h", Fields: []counter.FieldDelta{{Name: "a", Delta: 1}}})
	check := func(when string) {
		t.Helper()
		for id, want := range map[string]string{"f": "0.3", "c": "10.5"} {
			if v := view(t, e.b, id); v.Kind != contract.KindFloat || v.Float != want {
				t.Errorf("%s: %s = %+v, want float %s", when, id, v, want)
			}
		}
		for id, want := range map[string]int64{"i": 5, "s": 9} {
			if v := view(t, e.b, id); v.Kind != contract.KindCounter || v.Value != want {
				t.Errorf("%s: %s = %+v, want counter %d", when, id, v, want)
			}
		}
		if v := view(t, e.b, "h"); !slices.Equal(v.Fields, []counter.Field{{Name: "a", Value: 1}, {Name: "b", Value: -2}}) {
			t.Errorf("%s: h = %+v", when, v.Fields)
		}
	}
	check("in Redis")
	if err := e.b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	e.flushRedis(t)
	check("from PostgreSQL")
	// Writes after the reload continue from the restored values, once.
	addf("f", "0.7")
	apply(t, e.b, add("i", contract.KindNone, 1))
	if err := e.b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	e.flushRedis(t)
	if v := view(t, e.b, "f"); v.Float != "1" {
		t.Errorf("f after a second reload = %+v, want 1", v)
	}
	if v := view(t, e.b, "i"); v.Value != 6 || v.Kind != contract.KindCounter {
		t.Errorf("i after a second reload = %+v, want counter 6", v)
	}
}
