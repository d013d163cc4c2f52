package consumer

import (
	"time"

	"github.com/counterd/counterd/internal/pipeline/rules"
)

// The grain of a hit's counter (Applier.grain) is kept, for the rest of
// the poll (an ApplyGroups call), in the word the rules' cache of counter
// ids keeps with the id (rules.Hit.Aux): grain asks the backend's rollup
// table (two map look-ups and a search for the namespace) and a stream's
// events name the same counters again and again (a post's views), while
// the id's slot in the cache is at hand already. The word holds the
// poll's generation (scratch.gen), the op's type and the grain's code: a
// word of another poll, of another type or never set (zero) is looked up
// again. A rollup set or dropped while the consumer runs so counts from
// the next poll on (a poll's events are all evaluated before any is
// applied anyway).

// The grains a word holds (Applier.grain's results).
const (
	grainNone uint8 = iota
	grainMinute
	grainHour
	grainDay
)

var grainOfCode = [...]int64{grainNone: 0, grainMinute: int64(time.Minute), grainHour: int64(time.Hour), grainDay: int64(24 * time.Hour)}

func grainCode(g int64) (uint8, bool) {
	for c, v := range grainOfCode {
		if v == g {
			return uint8(c), true
		}
	}
	return 0, false
}

// hitGrain is a.grain of h's op, from h.Aux when this poll (gen, at least
// 1) looked it up already.
func (a *Applier) hitGrain(h *rules.Hit, gen uint64) int64 {
	op := &h.Op
	if h.Aux != nil {
		if w := *h.Aux; w>>16 == gen && uint8(w>>8) == uint8(op.Type) {
			return grainOfCode[uint8(w)]
		}
	}
	g := a.grain(op.Type, op.ID)
	if h.Aux != nil {
		if code, ok := grainCode(g); ok {
			*h.Aux = gen<<16 | uint64(op.Type)<<8 | uint64(code)
		}
	}
	return g
}
