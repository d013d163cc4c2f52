package backendtest

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/counterd/counterd/internal/contract"
)

func versionCases() []tcase {
	return []tcase{
		{"every write raises the version", func(e *env) {
			id := e.id("v")
			steps := []struct {
				name string
				op   contract.Op
			}{
				{"set", set(id, 1)},
				{"add", add(id, contract.KindNone, 2)},
				{"set again", set(id, 7)},
				{"expire", contract.Op{Type: contract.OpExpire, ID: id, TTL: time.Hour}},
				{"persist", contract.Op{Type: contract.OpExpire, ID: id}},
				{"persist without a ttl", contract.Op{Type: contract.OpExpire, ID: id}},
			}
			var last uint64
			for _, s := range steps {
				r := e.apply(s.op)
				// Every write raises the version, expire and persist
				// included; removing a TTL the counter does not have
				// changes nothing.
				if s.name == "persist without a ttl" {
					if r.Version != last {
						e.t.Errorf("%s: version %d, want %d (nothing changed)", s.name, r.Version, last)
					}
				} else if r.Version <= last {
					e.t.Errorf("%s: version %d, want above %d", s.name, r.Version, last)
				}
				if v := e.get(id); v.Version != r.Version {
					e.t.Errorf("%s: result version %d, get version %d", s.name, r.Version, v.Version)
				}
				last = r.Version
			}
		}},
		{"concurrent adds to one counter are all counted, each with its own value and version", func(e *env) {
			// A hot counter (the engine's lock-free path for contended
			// counters) must give each add what a sequence of adds would:
			// the values 1..n once each, versions rising with them, and
			// the read after them the last add's value and version.
			id := e.id("hot")
			const workers, per = 4, 250
			res := make([][]contract.Result, workers)
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range per {
						r, err := e.b.Apply(e.ctx, add(id, contract.KindNone, 1), contract.WriteOptions{})
						if err != nil {
							e.t.Errorf("add: %v", err)
							return
						}
						res[w] = append(res[w], r)
					}
				}()
			}
			wg.Wait()
			all := slices.Concat(res...)
			if len(all) != workers*per {
				return // the error is reported
			}
			slices.SortFunc(all, func(a, b contract.Result) int { return cmp.Compare(a.Value, b.Value) })
			for i, r := range all {
				if r.Value != int64(i+1) || (i > 0 && r.Version <= all[i-1].Version) {
					e.t.Fatalf("add with value rank %d: %+v (previous %+v): want value %d, version above the previous", i, r, all[max(i-1, 0)], i+1)
				}
			}
			last := all[len(all)-1]
			if v := e.get(id); v.Value != workers*per || v.Version != last.Version {
				e.t.Errorf("get after the adds: value %d version %d, want %d version %d", v.Value, v.Version, workers*per, last.Version)
			}
		}},
		{"compare and set", func(e *env) {
			id := e.id("cas")
			op := contract.Op{Type: contract.OpSet, ID: id, Value: 1, CheckVersion: true} // expected 0: must not exist
			r := e.apply(op)
			e.wantResult("create with expected version 0", r, contract.KindCounter, 1, true)
			op.Value, op.ExpectedVersion = 2, r.Version
			r2 := e.apply(op)
			if r2.Version <= r.Version || r2.Value != 2 {
				e.t.Errorf("set with the current version = %+v, want value 2 above version %d", r2, r.Version)
			}
			_, err := e.b.Apply(e.ctx, op, contract.WriteOptions{}) // the version it just replaced
			e.wantErr("set with the replaced version", err, contract.ErrVersionConflict)
			e.wantValue(id, contract.KindCounter, 2)
		}},
		{"every kind has versions", func(e *env) {
			for _, op := range everyKind(e) {
				r := e.apply(op)
				lag := op.Kind == contract.KindPN || op.Kind == contract.KindSharded
				if lag && e.caps.LaggingCRDTAdds {
					continue // the add's version is the receiving node's
				}
				v := e.get(op.ID)
				if r.Version == 0 || v.Version != r.Version {
					e.t.Errorf("%s %q: result version %d, get version %d; want the same, above 0", op.Type, op.ID, r.Version, v.Version)
				}
			}
		}},
		{"no-op writes keep the version", func(e *env) {
			u := e.id("u")
			r := e.apply(pfadd(u, "a"))
			r2 := e.apply(pfadd(u, "a"))
			if r2.Changed || r2.Version != r.Version {
				e.t.Errorf("pfadd of a known item = %+v, want unchanged at version %d", r2, r.Version)
			}
			c := e.id("c")
			r = e.apply(set(c, 1))
			nx := set(c, 2)
			nx.SetMode = contract.SetIfAbsent
			e.apply(nx)
			if v := e.get(c); v.Version != r.Version || v.Value != 1 {
				e.t.Errorf("after SET NX that did not apply: %+v, want value 1 at version %d", v, r.Version)
			}
		}},
	}
}

// keyOf returns a fresh idempotency key of e.
func (e *env) keyOf(name string) string { return fmt.Sprintf("%skey.%s", e.p, name) }
