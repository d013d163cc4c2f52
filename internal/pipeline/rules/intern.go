package rules

import "hash/maphash"

// idSeed hashes counter ids: HashID, and the id caches of an Input.
var idSeed = maphash.MakeSeed()

// HashID returns the hash of counter id that Eval gives each hit
// (Hit.IDHash): a caller keeping a table of counter ids need not hash
// them again. It is stable for the life of the process only.
func HashID(id string) uint64 { return maphash.String(idSeed, id) }

// idCacheSlots is the size of an idCache: a power of two.
const idCacheSlots = 4096

// idCache is the counter ids one rule built lately (Rule.counterID), by
// hash: the events of a stream name the same counters again and again (a
// post's views), and an id found here is the string built and checked
// (contract.ValidateID) the first time, without a new string or a check
// of its own. Direct-mapped: an id has one slot, which the last id built
// there holds, so ids seen once (a user's window, in a stream of many
// users) cost a slot each and evict rather than grow it; a probe compares
// the hash and then the bytes themselves, so a collision costs a
// comparison, never a wrong id. It holds only valid ids, so it is never
// emptied: an id stays valid, and it keeps at most idCacheSlots strings.
// Each rule has its own, so that ids of one rule do not evict another's.
type idCache [idCacheSlots]idSlot

// idSlot is an id and its hash; the zero slot holds none.
type idSlot struct {
	h  uint64
	id string
}

// find returns the id whose bytes are b (hash h), if c holds it.
func (c *idCache) find(b []byte, h uint64) (string, bool) {
	s := &c[h&(idCacheSlots-1)]
	if s.h == h && s.id == string(b) {
		return s.id, true
	}
	return "", false
}

// add keeps id (hash h) in its slot.
func (c *idCache) add(id string, h uint64) { c[h&(idCacheSlots-1)] = idSlot{h, id} }

// idCache returns the cache of rule r's counter ids.
func (in *Input) idCache(r *Rule) *idCache {
	if r.idx >= len(in.ids) {
		in.ids = append(in.ids, make([]*idCache, r.idx+1-len(in.ids))...)
	}
	c := in.ids[r.idx]
	if c == nil {
		c = new(idCache)
		in.ids[r.idx] = c
	}
	return c
}
