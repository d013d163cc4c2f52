package consumer

import "github.com/counterd/counterd/internal/contract"

// grainSlots is the size of a grainCache: a power of two.
const grainSlots = 4096

// grainCache is the rollup grain (Applier.grain) of the counter ids a
// poll's ops named lately: the engine's look-up of a counter's rollup
// spec (its id's, else its namespace's: two maps) cost a sixth of a
// microsecond per event, and a stream's events name the same counters
// again and again. Direct-mapped by the ids' hashes (rules.Hit.IDHash):
// an id has one slot, which the last id looked up there holds, so the
// cache never grows; a probe compares the hash and then the id itself.
// reset, after each poll (scratch.release), empties it at once (a new
// generation: the slots of the last are stale), so a rollup spec set
// meanwhile (a rules reload) counts from the next poll on.
type grainCache struct {
	slots *[grainSlots]grainSlot // nil until used
	gen   uint64                 // the generation of the slots that hold an id
}

// grainSlot is a counter id and the grains of its adds and pfadds
// (grainUnknown until looked up), when gen is the cache's.
type grainSlot struct {
	h         uint64
	id        string
	add, pfad int64
	gen       uint64
}

const grainUnknown = -1

// cachedGrain is a.grain of op (an add or a pfadd) whose id has hash h,
// from c.
func (a *Applier) cachedGrain(c *grainCache, op *contract.Op, h uint64) int64 {
	if c.slots == nil {
		c.slots, c.gen = new([grainSlots]grainSlot), 1
	}
	s := &c.slots[h&(grainSlots-1)]
	if s.gen != c.gen || s.h != h || s.id != op.ID {
		*s = grainSlot{h, op.ID, grainUnknown, grainUnknown, c.gen}
	}
	g := &s.add
	if op.Type == contract.OpPFAdd {
		g = &s.pfad
	}
	if *g == grainUnknown {
		*g = a.grain(op.Type, op.ID)
	}
	return *g
}

// reset empties c: what its slots hold is of the generation before. The
// ids stay referenced until their slots are used again (at most
// grainSlots of them).
func (c *grainCache) reset() { c.gen++ }
