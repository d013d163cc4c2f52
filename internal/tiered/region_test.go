package tiered

import (
	"context"
	"fmt"
	"os"
	"testing"

	"pgregory.net/rapid"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/store/postgres"
)

// pgModel is one counter as PostgreSQL's region export sees it.
type pgModel struct {
	live    bool
	kind    string
	value   int64
	fields  map[string]int64
	version int64
	base    int64
}

func (m pgModel) row() postgres.RegionRow {
	r := postgres.RegionRow{Live: m.live, Base: m.base}
	r.ID, r.Kind, r.Value, r.Version = "c", m.kind, m.value, m.version
	if m.kind == postgres.KindHash {
		r.Fields = map[string]int64{}
		for f, v := range m.fields {
			r.Fields[f] = v
			r.Value += v
		}
	}
	return r
}

// TestRegionStatesConverge: a peer region's copy (an engine, merging by
// Replace as internal/region does) that receives the tiered region's
// exported states, from any number of nodes each shipping the region's
// changes in order but interleaved with the others in any way, each
// batch possibly again (a lost acknowledgement), ends with the counter's
// last committed state: its value and kind, or no counter after a
// delete. Counters are deleted and created again, possibly of another
// kind, so versions restart in the hot tier.
func TestRegionStatesConverge(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var hist []pgModel
		m := pgModel{}
		n := rapid.IntRange(1, 30).Draw(t, "ops")
		for i := range n {
			switch op := rapid.IntRange(0, 5).Draw(t, fmt.Sprint("op", i)); {
			case op == 0: // delete
				if m.live {
					m = pgModel{base: m.base + m.version}
				}
			default:
				kind := postgres.KindCounter
				if op == 5 {
					kind = postgres.KindHash
				}
				d := rapid.Int64Range(-5, 9).Draw(t, fmt.Sprint("d", i))
				if !m.live || m.kind != kind {
					if m.live { // a kind change is a delete and a create (as in Redis)
						m = pgModel{base: m.base + m.version}
					}
					m = pgModel{live: true, kind: kind, version: 0, base: m.base, fields: map[string]int64{}}
				}
				m.version++
				if kind == postgres.KindHash {
					f := rapid.SampledFrom([]string{"a", "b"}).Draw(t, fmt.Sprint("f", i))
					nf := map[string]int64{}
					for k, v := range m.fields {
						nf[k] = v
					}
					nf[f] += d
					m.fields = nf
				} else {
					m.value += d
				}
			}
			hist = append(hist, m)
		}
		// Each sender ships an increasing subsequence of the history
		// ending with its last state, some batches twice.
		senders := rapid.IntRange(1, 3).Draw(t, "senders")
		streams := make([][]int, senders)
		for s := range streams {
			for i := range hist {
				if i == len(hist)-1 || rapid.Bool().Draw(t, fmt.Sprint("ship", s, i)) {
					streams[s] = append(streams[s], i)
					if rapid.IntRange(0, 4).Draw(t, fmt.Sprint("again", s, i)) == 0 {
						streams[s] = append(streams[s], i)
					}
				}
			}
		}
		eng := openCopy(t)
		ctx := context.Background()
		pos := make([]int, senders)
		for {
			var open []int
			for s := range streams {
				if pos[s] < len(streams[s]) {
					open = append(open, s)
				}
			}
			if len(open) == 0 {
				break
			}
			s := rapid.SampledFrom(open).Draw(t, "next")
			row := hist[streams[s][pos[s]]].row()
			pos[s]++
			tomb, st, ok := regionStates(&row)
			if tomb != nil {
				if _, err := eng.Replace(ctx, []engine.State{*tomb}, contract.WriteOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if ok {
				if _, err := eng.Replace(ctx, []engine.State{st}, contract.WriteOptions{}); err != nil {
					t.Fatal(err)
				}
			}
		}
		last := hist[len(hist)-1]
		v, err := eng.Get("c")
		if err != nil {
			t.Fatal(err)
		}
		if v.Exists != last.live {
			t.Fatalf("copy exists=%v, last state live=%v", v.Exists, last.live)
		}
		if !last.live {
			return
		}
		switch last.kind {
		case postgres.KindHash:
			if v.Kind != contract.KindHash || len(v.Fields) != len(last.fields) {
				t.Fatalf("copy %+v, want hash %v", v, last.fields)
			}
			for _, f := range v.Fields {
				if last.fields[f.Name] != f.Value {
					t.Fatalf("copy %+v, want hash %v", v, last.fields)
				}
			}
		default:
			if v.Kind != contract.KindCounter || v.Value != last.value {
				t.Fatalf("copy %s %d, want counter %d", v.Kind, v.Value, last.value)
			}
		}
	})
}

// openCopy opens an engine in a fresh directory, removed with it.
func openCopy(t *rapid.T) *engine.Engine {
	dir, err := os.MkdirTemp("", "region-copy")
	if err != nil {
		t.Fatal(err)
	}
	cfg := engine.DefaultConfig()
	cfg.Dir, cfg.NodeID = dir, "copy"
	eng, err := engine.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = eng.Close()
		_ = os.RemoveAll(dir)
	})
	return eng
}
