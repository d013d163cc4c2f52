package chunksync

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
)

// Synthetic states for the size tests and benchmarks: plain counters named
// like the seeds' page views, sorted by id.

const baseTime = int64(1764000000) * 1e9

func counterState(i int, value int64, version uint64) engine.State {
	return engine.State{
		ID:        fmt.Sprintf("page_views:article_%08d", i),
		Kind:      contract.KindCounter,
		Version:   version,
		UpdatedAt: baseTime + int64(i)*1e6 + int64(version),
		Data:      binary.AppendVarint(nil, value),
	}
}

func syntheticStates(n int) []engine.State {
	states := make([]engine.State, n)
	for i := range states {
		states[i] = counterState(i, int64(i%1000), 1)
	}
	return states
}

// Patterns of change: which indexes of n states a change of frac touches.
type pattern struct {
	name  string
	pick  func(r *rand.Rand, n int, frac float64) []int
	keyed bool // changes keep to runs of neighbouring ids
}

// runLen is the length of a run of neighbouring ids that change together
// (one namespace's or one time bucket's counters).
const runLen = 1000

var patterns = []pattern{
	{name: "runs", keyed: true, pick: func(r *rand.Rand, n int, frac float64) []int {
		want := int(float64(n) * frac)
		seen := map[int]bool{}
		var out []int
		for len(out) < want {
			start := r.IntN(n/runLen) * runLen
			for i := start; i < start+runLen && len(out) < want; i++ {
				if !seen[i] {
					seen[i] = true
					out = append(out, i)
				}
			}
		}
		return out
	}},
	{name: "scattered", pick: func(r *rand.Rand, n int, frac float64) []int {
		want := int(float64(n) * frac)
		return r.Perm(n)[:want]
	}},
}

// changed returns a copy of states with the indexes idx incremented (a new
// version and value).
func changed(states []engine.State, idx []int) []engine.State {
	out := append([]engine.State(nil), states...)
	for _, i := range idx {
		v, _ := binary.Varint(out[i].Data)
		out[i] = counterState(i, v+1, out[i].Version+1)
	}
	return out
}
