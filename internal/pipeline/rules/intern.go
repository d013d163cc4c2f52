package rules

import "hash/maphash"

// idSeed hashes counter ids: HashID, and the id caches of an Input.
var idSeed = maphash.MakeSeed()

// HashID returns the hash of counter id that Eval gives each hit
// (Hit.IDHash): a caller keeping a table of counter ids need not hash
// them again. It is stable for the life of the process only.
func HashID(id string) uint64 { return maphash.String(idSeed, id) }

// idCacheSlots is the size of an idCache (two a set): a power of two.
const idCacheSlots = 4096

// idCache is the counter ids one rule built lately (Rule.counterID), by
// hash: the events of a stream name the same counters again and again (a
// post's views), and an id found here is the string built and checked
// (contract.ValidateID) the first time, without a new string or a check
// of its own. Two-way set-associative: an id has a set of two slots (one
// cache line of memory), which the two ids built there last hold, the
// one found or added last first, so ids seen once (a user's window, in a
// stream of many users) cost a slot each and evict rather than grow it,
// and a thousand ids that come back (posts) seldom evict one another
// (direct-mapped, a fifth of them did, each then a new string, a check
// and a look-up of its rollup grain by the consumer: Hit.Aux); a probe
// compares the hash and then the bytes themselves, so a collision costs
// a comparison, never a wrong id. It holds only valid ids, so it is never
// emptied: an id stays valid, and it keeps at most idCacheSlots strings.
// Each rule has its own, so that ids of one rule do not evict another's;
// a rule whose ids are seldom found again (one per user, in a stream of
// many users) goes without it for a while (use).
type idCache struct {
	slots [idCacheSlots]idSlot
	// looks and hits count the look-ups of the current sample of
	// idSample; skip is how many ids to build without the cache.
	looks, hits, skip int
}

// The cache's sampling: a rule whose ids were found for fewer than one
// look-up in idMinHit of a sample of idSample goes idSkip ids without
// the cache (a look-up that misses costs a line from memory, for
// nothing), then samples again.
const (
	idSample = 1024
	idMinHit = 8
	idSkip   = 15 * idSample
)

// idSlot is an id and its hash, and the word the caller keeps with the
// id (Hit.Aux); the zero slot holds none.
type idSlot struct {
	h   uint64
	id  string
	aux uint64
}

// use reports whether to look the next id up in c (and keep it there).
func (c *idCache) use() bool {
	if c.skip > 0 {
		c.skip--
		return false
	}
	return true
}

// count counts a look-up and whether it found the id.
func (c *idCache) count(found bool) {
	c.looks++
	if found {
		c.hits++
	}
	if c.looks == idSample {
		if c.hits*idMinHit < c.looks {
			c.skip = idSkip
		}
		c.looks, c.hits = 0, 0
	}
}

// set returns the first of the two slots of hash h.
func (c *idCache) set(h uint64) *[2]idSlot {
	i := int(h&(idCacheSlots/2-1)) * 2
	return (*[2]idSlot)(c.slots[i : i+2])
}

// find returns the id whose bytes are b (hash h), if c holds it, and its
// aux word (Hit.Aux), which stays the id's while c keeps the id.
func (c *idCache) find(b []byte, h uint64) (string, *uint64, bool) {
	set := c.set(h)
	if s := &set[0]; s.h == h && s.id == string(b) {
		return s.id, &s.aux, true
	}
	if s := &set[1]; s.h == h && s.id == string(b) {
		set[0], set[1] = set[1], set[0] // the one found last first
		return set[0].id, &set[0].aux, true
	}
	return "", nil, false
}

// add keeps id (hash h) first in its set, with a zero aux word, which it
// returns; the set's other id goes (the one found or added before the
// first).
func (c *idCache) add(id string, h uint64) *uint64 {
	set := c.set(h)
	set[1] = set[0]
	set[0] = idSlot{h: h, id: id}
	return &set[0].aux
}

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
