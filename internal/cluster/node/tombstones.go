package node

import (
	"sync"
	"time"
)

// The engine keeps no tombstone: a deleted counter is simply gone. A copy
// of it sent before the delete reached its sender (a push batch, an
// anti-entropy answer) would then bring it back on a node that merges it
// after the delete. So every node remembers the ids it deleted or learned
// deleted, with the time of the delete, for tombRetention, and drops
// incoming states of those ids last updated at or before that time. A
// counter written again after its delete (in a later tick of the engine's
// clock, which stamps both) is newer and merges as usual.

// Defaults of the tombstone memory.
const (
	tombRetention = time.Minute // longer than a push interval plus an anti-entropy round
	tombMax       = 100000      // oldest forgotten first
)

type tombRecord struct {
	id string
	at int64 // unix ns of the delete
}

// tombs are the recently deleted ids. Safe for concurrent use.
type tombs struct {
	mu    sync.Mutex       // guards at, order, head
	at    map[string]int64 // id -> unix ns of its latest delete
	order []tombRecord     // insertion order, for expiry and the bound
	head  int              // order[:head] are forgotten
}

// add remembers that id was deleted at (unix ns).
func (t *tombs) add(id string, at int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.at == nil {
		t.at = map[string]int64{}
	}
	if at > t.at[id] {
		t.at[id] = at
	}
	t.order = append(t.order, tombRecord{id, at})
	t.expireLocked(time.Now().UnixNano())
}

func (t *tombs) expireLocked(now int64) {
	for t.head < len(t.order) && (len(t.order)-t.head > tombMax || now-t.order[t.head].at > int64(tombRetention)) {
		if r := t.order[t.head]; t.at[r.id] == r.at {
			delete(t.at, r.id)
		}
		t.head++
	}
	if t.head > 1024 && t.head > len(t.order)/2 { // compact, amortised O(1) per add
		t.order = append(t.order[:0], t.order[t.head:]...)
		t.head = 0
	}
}

// filter returns states without stale copies of recently deleted ids, and
// remembers the tombstones among them.
func (t *tombs) filter(states []State) []State {
	var out []State
	for i := range states {
		s := &states[i]
		if s.Deleted {
			t.add(s.ID, s.UpdatedAt)
			out = append(out, *s)
			continue
		}
		t.mu.Lock()
		at, ok := t.at[s.ID]
		t.mu.Unlock()
		if ok && s.UpdatedAt <= at {
			continue
		}
		out = append(out, *s)
	}
	return out
}
