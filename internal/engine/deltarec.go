package engine

import (
	"encoding/binary"
	"fmt"

	"github.com/counterd/counterd/internal/contract"
)

// Window delta records. A flush writes the deltas of one shard's windows
// (counter.Window.AppendDelta, each after its entry's header, as a 'w' key
// holds it) as one Pebble value under 'W' + the shard's number, instead of
// a key per window: a consumer with a per-user window rule keeps tens of
// thousands of windows dirty, and a key each cost the flush a memtable
// insert each, and Pebble's flushes and compactions an older version each
// to skip.
//
// A shard's record is rewritten whole by every flush that writes any of
// the shard's counters, and holds: the windows of that flush written as
// deltas, and the deltas of the last record the flush did not write again
// (the window did not change since, so its delta is the same bytes),
// copied from memory. A delta copied deltaRecAge times moves to the
// window's own 'w' key instead (so that a window written once is not
// copied into every record of its shard for ever). A window's delta in its
// shard's record takes precedence over its 'w' key: a 'w' key left behind
// by a window that went back into its record is stale. Whatever removes a
// window from its record writes its state elsewhere in the same batch:
// whole under 'c' (which deletes the 'w' key, if the window may have one:
// flusher.mayHaveWKey), as a 'w' key, or deletes it.
//
// Value: format byte deltaRecFormat, then per window the uvarint length
// of its id, the id, the uvarint length of its delta value, the value.
const (
	prefixDeltaRec byte = 'W'
	deltaRecFormat byte = 1
	deltaRecAge         = 4
	// maxKeptRec: a shard's record buffer above this size is not kept
	// for the next rewrite of the shard's record.
	maxKeptRec = 64 << 10
)

// deltaRec is a shard's record as the flusher holds it: its value and,
// per window, where its id and delta are in it.
type deltaRec struct {
	buf []byte
	mem []recMember
	// unknown: a failed commit may have written this shard's record: the
	// next rewrite writes it even when it and the last were empty.
	unknown bool
}

type recMember struct {
	idx, idRef   uint32 // the window's slab index and id reference
	id, idEnd, v int32  // its id at buf[id:idEnd], its delta at buf[v:end]
	end          int32
	age          uint8 // how many rewrites copied it unchanged
	live         bool  // a window holds it (records read at load: a window entry matched it)
}

func (r *deltaRec) reset() {
	r.buf = append(r.buf[:0], deltaRecFormat)
	r.mem = r.mem[:0]
}

func (r *deltaRec) idOf(m *recMember) []byte  { return r.buf[m.id:m.idEnd] }
func (r *deltaRec) valOf(m *recMember) []byte { return r.buf[m.v:m.end] }

// add appends the delta v of the window with id at slab index idx.
func (r *deltaRec) add(idx, idRef uint32, id, v []byte, age uint8) {
	if len(r.buf) == 0 {
		r.buf = append(r.buf, deltaRecFormat)
	}
	r.buf = binary.AppendUvarint(r.buf, uint64(len(id)))
	m := recMember{idx: idx, idRef: idRef, id: int32(len(r.buf)), age: age, live: true}
	r.buf = append(r.buf, id...)
	m.idEnd = int32(len(r.buf))
	r.buf = binary.AppendUvarint(r.buf, uint64(len(v)))
	m.v = int32(len(r.buf))
	r.buf = append(r.buf, v...)
	m.end = int32(len(r.buf))
	r.mem = append(r.mem, m)
}

// parse sets r to the record value b (copied), its members not live.
// A value that is not a record (a wrong format byte, a length past the
// end, an empty or too long id) returns an error wrapping ErrCorrupt.
func (r *deltaRec) parse(b []byte) error {
	if len(b) == 0 || b[0] != deltaRecFormat {
		return fmt.Errorf("%w: window delta record: bad format", ErrCorrupt)
	}
	r.buf = append(r.buf[:0], b...)
	r.mem = r.mem[:0]
	if len(b) > 1<<30 {
		return fmt.Errorf("%w: window delta record of %d bytes", ErrCorrupt, len(b))
	}
	at := 1
	next := func(what string) (int, error) {
		n, k := binary.Uvarint(r.buf[at:])
		if k <= 0 || n > uint64(len(r.buf)-at-k) {
			return 0, fmt.Errorf("%w: window delta record: %s length at %d", ErrCorrupt, what, at)
		}
		at += k
		return int(n), nil
	}
	for at < len(r.buf) {
		n, err := next("id")
		if err != nil {
			return err
		}
		if n == 0 || n > contract.MaxIDLen {
			return fmt.Errorf("%w: window delta record: id of %d bytes", ErrCorrupt, n)
		}
		m := recMember{id: int32(at), idEnd: int32(at + n)}
		at += n
		if n, err = next("delta"); err != nil {
			return err
		}
		m.v, m.end = int32(at), int32(at+n)
		at += n
		r.mem = append(r.mem, m)
	}
	return nil
}

// carryDeltas finishes the record of shard no, which holds the deltas the
// flush wrote (in f.wnext[no]), after the flush took the shard's dirty
// entries list: it copies in the deltas of the last record of the windows
// not in list, moves those copied deltaRecAge times to their 'w' keys,
// and adds the record (or its deletion) to kv. Caller holds sh.mu.
func (f *flusher) carryDeltas(sh *shard, no int, list []uint32, kv *sortedKV, key []byte) []byte {
	old, rec := &f.wrec[no], &f.wnext[no]
	for _, i := range list {
		f.seen[i/64] |= 1 << (i % 64)
	}
	for k := range old.mem {
		m := &old.mem[k]
		if !m.live || f.seen[m.idx/64]&(1<<(m.idx%64)) != 0 || sh.refOf(m.idx) != m.idRef {
			continue // no window, or written by this flush
		}
		if m.age+1 >= deltaRecAge {
			key = append(append(key[:0], prefixWindowDelta), old.idOf(m)...)
			kv.add(key, old.valOf(m), false)
			f.setWKey(no, m.idx)
			continue
		}
		rec.add(m.idx, m.idRef, old.idOf(m), old.valOf(m), m.age+1)
	}
	for _, i := range list {
		f.seen[i/64] = 0
	}
	key = append(key[:0], prefixDeltaRec, byte(no))
	switch {
	case len(rec.mem) > 0:
		kv.add(key, rec.buf, false)
	case len(old.mem) > 0 || old.unknown:
		kv.add(key, nil, true)
	}
	f.recShards = append(f.recShards, no)
	return key
}

// setWKey records that the window at slab index i of shard no may have
// a 'w' key on disk: a flush that writes it whole deletes the key.
func (f *flusher) setWKey(no int, i uint32) {
	b := &f.wkeys[no]
	if w := int(i/64) + 1; len(*b) < w {
		*b = append(*b, make([]uint64, w-len(*b))...)
	}
	(*b)[i/64] |= 1 << (i % 64)
}

// orphanWKey records a 'w' key of id that no loaded window matched (its
// counter is not a window, or was not loaded): a window of that id written
// whole deletes it.
func (f *flusher) orphanWKey(id []byte) {
	if f.wOrphans == nil {
		f.wOrphans = map[string]bool{}
	}
	f.wOrphans[string(id)] = true
}

// mayHaveWKey reports whether the window id at slab index i of shard no
// may have a 'w' key on disk: one a flush moved its delta to (and no
// committed flush deleted since), one read at load, or an orphan 'w' key
// of its id. A window written whole without one needs no delete of it.
func (f *flusher) mayHaveWKey(no int, i uint32, id []byte) bool {
	if b := f.wkeys[no]; int(i/64) < len(b) && b[i/64]&(1<<(i%64)) != 0 {
		return true
	}
	return len(f.wOrphans) > 0 && f.wOrphans[string(id)]
}

// wKeysDeleted ends a flush for the 'w' keys it deleted: committed, the
// windows have none (an orphan key of the id stays recorded: a needless
// delete at worst); else they may still have them.
func (f *flusher) wKeysDeleted(committed bool) {
	if committed {
		for _, it := range f.wDeleted {
			if b := f.wkeys[it.shard]; int(it.idx/64) < len(b) {
				b[it.idx/64] &^= 1 << (it.idx % 64)
			}
		}
	}
	f.wDeleted = f.wDeleted[:0]
}

// growSeen makes f.seen cover n slab indexes.
func (f *flusher) growSeen(n int) {
	if w := (n + 63) / 64; len(f.seen) < w {
		f.seen = append(f.seen, make([]uint64, w-len(f.seen))...)
	}
}

// recordsWritten ends a flush for the shard records it rewrote: committed,
// they are what the shards' records on disk hold; otherwise (failed) what
// reached the disk is unknown when committed is false and refused false.
func (f *flusher) recordsWritten(committed, refused bool) {
	for _, no := range f.recShards {
		switch {
		case committed:
			f.wrec[no], f.wnext[no] = f.wnext[no], f.wrec[no]
			f.wrec[no].unknown = false
			if cap(f.wnext[no].buf) > maxKeptRec {
				f.wnext[no] = deltaRec{} // (a big record is held once, not twice)
			}
		case !refused:
			f.wrec[no].unknown = true
		}
	}
	f.recShards = f.recShards[:0]
}
