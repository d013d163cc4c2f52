package consumer

import (
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/pipeline/rules"
	"github.com/counterd/counterd/internal/rollup"
)

// specs is a backend's rollup specs by id or namespace (rollupOfer),
// counting its look-ups.
type specs struct {
	m     map[string]rollup.Spec
	looks *int
}

func (s specs) RollupOf(id string) (rollup.Spec, bool) {
	*s.looks++
	if sp, ok := s.m[id]; ok {
		return sp, true
	}
	ns, _, _ := strings.Cut(id, ":")
	sp, ok := s.m[ns]
	return sp, ok
}

// TestGrainCacheMatchesGrain: through any sequence of ops (adds and
// pfadds on ids with and without rollups, of their own or their
// namespace's; hashes drawn from a few values, so that ids share slots
// and hashes) and resets, cachedGrain answers what grain does, with at
// most one look-up, and none for the id and type it answered last.
func TestGrainCacheMatchesGrain(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		looks := 0
		sp := specs{looks: &looks, m: map[string]rollup.Spec{
			"likes":      {Hour: 30 * 24 * time.Hour},
			"viewers":    {UniqueDays: 400 * 24 * time.Hour},
			"views:p1":   {Minute: time.Hour, UniqueHours: 24 * time.Hour},
			"daily":      {Day: 30 * 24 * time.Hour},
			"recent:u10": {Month: 365 * 24 * time.Hour},
		}}
		a := &Applier{rollups: sp}
		var c grainCache
		type key struct {
			t  contract.OpType
			id string
			h  uint64
		}
		held := map[key]bool{} // what the cache may answer without a look-up
		ids := rapid.SampledFrom([]string{"likes:p1", "viewers:p2", "views:p1", "views:p2", "daily", "recent:u10", "other:x"})
		for range rapid.IntRange(0, 300).Draw(t, "steps") {
			if rapid.IntRange(0, 30).Draw(t, "reset") == 0 {
				c.reset()
				clear(held)
				continue
			}
			op := contract.Op{Type: rapid.SampledFrom([]contract.OpType{contract.OpAdd, contract.OpPFAdd}).Draw(t, "type"), ID: ids.Draw(t, "id")}
			h := rules.HashID(op.ID)
			if rapid.Bool().Draw(t, "collide") {
				h = rapid.SampledFrom([]uint64{3, 3 + grainSlots, 5}).Draw(t, "h")
			}
			want := a.grain(op.Type, op.ID)
			before := looks
			if got := a.cachedGrain(&c, &op, h); got != want {
				t.Fatalf("cachedGrain(%s %q, %d) = %d, grain %d", op.Type, op.ID, h, got, want)
			}
			k := key{op.Type, op.ID, h}
			if held[k] && looks != before {
				t.Fatalf("%s %q looked up again", op.Type, op.ID)
			}
			if looks > before+1 {
				t.Fatalf("%s %q: %d look-ups, want at most 1", op.Type, op.ID, looks-before)
			}
			clear(held) // a slot holds one id: only the last is sure to be there
			held[k] = true
		}
	})
}
