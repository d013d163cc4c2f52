package engine

import (
	"sync/atomic"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/rollup"
)

// Peeks: a consumer's atomic batch names thousands of counters (one
// window per user of its events), each in its own few cache lines that
// are rarely in cache: the index's slot, the entry, its id, its ext, the
// window and the slot of the ring an add writes, the rollups. A lookup
// or a check that reads them one entry after another waits for each
// miss in turn (the next load depends on the last: slot, entry, ext,
// window, ring). So the walks over such a batch first read, for the next
// peekBlock entries at once, what they are about to read, in loops whose
// loads do not depend on one another: the misses of a block overlap.
// Peeks change nothing and decide nothing; each returns a sum of what it
// read, which the caller keeps (multiScratch.peeked) so that the reads
// are not optimised away.
//
// BenchmarkApplyMarkedBatch (the engine's share of BenchmarkConsumeCost's
// batches), 8 runs alternated with the code before peeks on a shared
// 2-core machine: 2478 -> 1682 CPU ns an event (medians; paired ratio
// 0.66). Fusing the check with the apply instead (an undo record for
// every window, applied in the walk) measured worse than both: the
// record costs more than the check's second read of a cached line.

// peekBlock is how many entries a peek reads at once.
const peekBlock = 32

// peekIDs hashes ids (at most peekBlock) into hs and (unless noPeek)
// reads what lookup reads first of each: the slot of its hash in its
// shard's table and the entry, id reference and id bytes the slot
// points to. It reads as findRef does, without locks.
func (e *Engine) peekIDs(ids []string, hs *[peekBlock]uint64) int64 {
	for n, id := range ids {
		hs[n] = hashID(id)
	}
	if e.noPeek {
		return 0
	}
	var vs [peekBlock]uint32
	for n := range ids {
		h := hs[n]
		if t := e.shards[shardOf(h)].tab.Load(); t != nil {
			vs[n] = atomic.LoadUint32(&t.slots[h&uint64(len(t.slots)-1)])
		}
	}
	var sum int64
	for n := range ids {
		v := vs[n]
		if v == slotEmpty || v>>24 != tagOf(hs[n]) || v&slotIndexMask == 0 {
			continue
		}
		sh := &e.shards[shardOf(hs[n])]
		en, rp := sh.at(v&slotIndexMask - 1)
		if en == nil {
			continue
		}
		b, _ := idOf(sh.ar.Load(), rp.Load())
		sum += int64(len(b)) + int64(en.lk.Load())
	}
	return sum
}

// peekAhead reads what checkRun and applyLocked read first of the
// entries of keys (at most peekBlock; keys as in applyMultiIn, of ops
// that read no other entry, so a key's ref index is its op's): the op,
// the entry's ext, its rollups (rollup.State.Peek) and state: for a
// window, the slot of the op's bucket (counter.Window.Peek), for a
// sketch its entries (counter.HLL.Peek). Caller
// holds the entries' locks.
func peekAhead(refs []ref, ops []contract.Op, keys []uint64, now int64) int64 {
	var st [peekBlock]any
	var rs [peekBlock]*rollup.State
	var sum int64
	for n, k := range keys {
		if x := refs[uint32(k)].e.ext(); x != nil {
			st[n], rs[n] = x.state, x.roll
		}
		sum += int64(ops[uint32(k)].Type)
	}
	for n, k := range keys {
		if rs[n] != nil {
			sum += rs[n].Peek()
		}
		switch x := st[n].(type) {
		case *counter.Window:
			at := ops[uint32(k)].At
			if at == 0 || at > now {
				at = now
			}
			sum += x.Peek(at)
		case *counter.HLL:
			sum += x.Peek()
		}
	}
	return sum
}

// peekChecked peeks (peekAhead) at the entries of the next peekBlock ops
// from i that applyPass applies without an undo record (of ops that read
// no other entry) and returns the index of the op after them. Caller
// holds the entries' locks.
func peekChecked(refs []ref, ops []contract.Op, i int, now int64, sc *multiScratch) int {
	var keys [peekBlock]uint64
	n := 0
	for ; i < len(ops) && n < peekBlock; i++ {
		if !sc.undo[i] && refs[i].e != nil {
			keys[n] = uint64(i)
			n++
		}
	}
	sc.peeked += peekAhead(refs, ops, keys[:n], now)
	return i
}
