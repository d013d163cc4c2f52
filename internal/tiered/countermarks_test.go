package tiered_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/tiered"
)

// applyEvents applies events from..to-1 (event k adds 1 to v:<k%5> and to
// field f<k%3> of h:<k%5>) through b in chunks of step events coalesced
// per counter, dropping the events a counter has seen and applying the
// rest again, as the pipeline's consumer does.
func applyEvents(t *testing.T, b *tiered.Backend, n, step int) {
	ctx := context.Background()
	for at := 0; at < n; at += step {
		type part struct {
			id     string
			hash   bool
			events []int
		}
		var parts []*part
		byID := map[string]*part{}
		for k := at; k < min(at+step, n); k++ {
			for _, id := range []string{fmt.Sprintf("v:%d", k%5), fmt.Sprintf("h:%d", k%5)} {
				p := byID[id]
				if p == nil {
					p = &part{id: id, hash: id[0] == 'h'}
					byID[id] = p
					parts = append(parts, p)
				}
				p.events = append(p.events, k)
			}
		}
		for len(parts) > 0 {
			ops := make([]contract.MarkedOp, len(parts))
			for i, p := range parts {
				var op contract.Op
				if p.hash {
					op = contract.Op{Type: contract.OpHAdd, ID: p.id}
					for _, k := range p.events {
						f := fmt.Sprintf("f%d", k%3)
						if j := slices.IndexFunc(op.Fields, func(x counter.FieldDelta) bool { return x.Name == f }); j >= 0 {
							op.Fields[j].Delta++
						} else {
							op.Fields = append(op.Fields, counter.FieldDelta{Name: f, Delta: 1})
						}
					}
				} else {
					op = contract.Op{Type: contract.OpAdd, ID: p.id, Delta: int64(len(p.events))}
				}
				for _, k := range p.events {
					ops[i].Marks = append(ops[i].Marks, fmt.Sprintf("e%d", k))
				}
				ops[i].Op = op
			}
			seen, err := b.ApplyCounterMarked(ctx, ops, time.Hour, contract.WriteOptions{Durability: contract.Sync})
			if err != nil {
				t.Error(err)
				return
			}
			var again []*part
			for i, p := range parts {
				if len(seen[i]) == 0 {
					continue
				}
				p.events = slices.DeleteFunc(p.events, func(k int) bool { return slices.Contains(seen[i], fmt.Sprintf("e%d", k)) })
				if len(p.events) > 0 {
					again = append(again, p)
				}
			}
			parts = again
		}
	}
}

// TestCounterMarkedTwoNodes: two tiered nodes on one Redis and one
// database apply the same events at once, coalesced differently: every
// counter counts each event once, in Redis and, after the write-behind,
// in PostgreSQL.
func TestCounterMarkedTwoNodes(t *testing.T) {
	e := newEnv(t, nil)
	b2 := e.open(t, func(o *tiered.Options) { o.NodeID = "t2" })
	const n = 3000
	var wg sync.WaitGroup
	wg.Go(func() { applyEvents(t, e.b, n, 100) })
	wg.Go(func() { applyEvents(t, b2, n, 70) })
	wg.Go(func() { applyEvents(t, b2, n, 250) })
	wg.Wait()
	ctx := context.Background()
	for _, b := range []*tiered.Backend{e.b, b2} {
		if err := b.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for r := range 5 {
		want := int64(0)
		for k := range n {
			if k%5 == r {
				want++
			}
		}
		id := fmt.Sprintf("v:%d", r)
		if v := view(t, e.b, id); v.Value != want {
			t.Errorf("%s = %d in Redis, want %d", id, v.Value, want)
		}
		rec, ok, err := e.b.Postgres().Load(ctx, id)
		if err != nil || !ok || rec.Value != want {
			t.Errorf("%s = %d in PostgreSQL (%v, %v), want %d", id, rec.Value, ok, err, want)
		}
		hid := fmt.Sprintf("h:%d", r)
		h := view(t, e.b, hid)
		var sum int64
		for _, f := range h.Fields {
			sum += f.Value
		}
		if sum != want {
			t.Errorf("%s fields sum to %d in Redis, want %d", hid, sum, want)
		}
	}
}
