package ratelimit

import (
	"hash/maphash"
	"strings"
	"unsafe"

	"github.com/cespare/xxhash/v2"
	"github.com/counterd/counterd/internal/engine"
)

// The table: a Limiter's state lives in the counter engine's index as
// limiter entries (internal/engine/limiter.go), one per (key, limit),
// identified by a 96-bit fingerprint of the key and the limit in the
// engine's reserved limiter namespace; keys are not stored (but with
// Config.KeepKeys). A check locks the entry, runs the algorithm (a pure
// function of the state, algorithm.go) and unlocks it: no allocation, no
// write-ahead log, no flush. What an entry keeps beside its three words
// (the SlidingLog ring, the key and limit for handoff) is its aux.

// aux is a limiter entry's Aux value in the engine.
type aux struct {
	kr  keyRef  // Config.KeepKeys: the key and limit, for handoff (handoff.go)
	log *hitLog // SlidingLog: the admitted hits
}

// auxOf returns the locked entry's aux, nil if it has none.
func auxOf(le *engine.LimEntry) *aux {
	return (*aux)(le.Aux()) // the only Aux this package sets
}

// logOf returns the locked entry's hitLog, nil if it has none.
func logOf(le *engine.LimEntry) *hitLog {
	if a := auxOf(le); a != nil {
		return a.log
	}
	return nil
}

// auxFor returns the locked entry's aux, creating it.
func auxFor(le *engine.LimEntry) *aux {
	a := auxOf(le)
	if a == nil {
		a = new(aux)
		le.SetAux(unsafe.Pointer(a))
	}
	return a
}

// newLog returns the locked entry's hitLog, creating it.
func newLog(le *engine.LimEntry) *hitLog {
	a := auxFor(le)
	if a.log == nil {
		a.log = new(hitLog)
	}
	return a.log
}

// remember stores the key and limit of a locked entry that has none
// (Config.KeepKeys). The key is copied: RL.CHECK passes keys that alias a
// connection buffer.
func (l *Limiter) remember(le *engine.LimEntry, key string, lim *Limit) {
	if !l.keep {
		return
	}
	a := auxFor(le)
	if a.kr.key == "" {
		a.kr = keyRef{key: strings.Clone(key), lim: *lim}
	}
}

// fingerprint of a key: two independent 64-bit hashes.
type keyHash struct{ a, b uint64 }

var keySeed = maphash.MakeSeed()

func hashKey(key string) keyHash {
	return keyHash{xxhash.Sum64String(key), maphash.String(keySeed, key)}
}

// limitHash mixes every field of a Limit (its identity).
func limitHash(lim *Limit) uint64 {
	h := uint64(lim.Algorithm)*0x9e3779b97f4a7c15 ^ uint64(lim.Limit)*0xc2b2ae3d27d4eb4f
	h = mix64(h) ^ uint64(lim.Period)*0x165667b19e3779f9 ^ uint64(lim.Burst)*0x27d4eb2f165667c5
	if lim.Name != "" {
		h ^= xxhash.Sum64String(lim.Name) * 0xff51afd7ed558ccd
	}
	if lim.Scope != ScopeOwner {
		h ^= uint64(lim.Scope) * 0x94d049bb133111eb
	}
	return mix64(h)
}

// fingerprint of a (key, limit) pair: h1 picks shard, slot and tag.
func fingerprint(k keyHash, lh uint64) (uint64, uint32) {
	return mix64(k.a ^ lh), uint32(mix64(k.b+lh*0x9e3779b97f4a7c15) >> 32)
}

// mix64 is the murmur3 finalizer.
func mix64(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}
