package region

import (
	"testing"
	"time"

	"github.com/counterd/counterd/internal/engine"
)

// TestTrackerResume: each peer gets what changed after its acknowledged
// position; a peer that does not acknowledge (cut off) keeps everything
// pending while the other's positions move; ids every peer has are
// forgotten; a delete is remembered with its version.
func TestTrackerResume(t *testing.T) {
	tr := newTracker([]Peer{{Name: "us"}, {Name: "ap"}}, time.Now)
	add := func(id string, ver uint64) {
		tr.note(&engine.Op{Type: engine.OpAdd, ID: id}, &engine.Result{ID: id, Version: ver, Changed: true})
	}
	add("a", 1)
	add("b", 1)
	add("a", 2)
	ids, more := tr.pending("us", 10)
	if more || len(ids) != 2 || ids[0].id != "b" || ids[1].id != "a" || ids[1].ver != 2 {
		t.Fatalf("pending: %+v %v", ids, more)
	}
	tr.ack("us", ids[1].seq)
	if ids, _ := tr.pending("us", 10); len(ids) != 0 {
		t.Fatalf("after ack: %+v", ids)
	}
	// ap is cut off: nothing acknowledged, everything stays pending.
	add("c", 1)
	tr.note(&engine.Op{Type: engine.OpDelete, ID: "b"}, &engine.Result{ID: "b", Version: 2, Changed: true})
	ids, _ = tr.pending("ap", 10)
	if len(ids) != 3 {
		t.Fatalf("ap pending: %+v", ids)
	}
	if n, oldest := tr.lag("ap"); n != 3 || oldest == 0 {
		t.Fatalf("ap lag: %d %d", n, oldest)
	}
	// A batch limit: the first two, then the rest from the acknowledged
	// position.
	ids, more = tr.pending("ap", 2)
	if !more || len(ids) != 2 || ids[0].id != "a" || ids[1].id != "c" {
		t.Fatalf("ap first batch: %+v %v", ids, more)
	}
	tr.ack("ap", ids[1].seq)
	ids, more = tr.pending("ap", 2)
	if more || len(ids) != 1 || ids[0].id != "b" || ids[0].del != 2 {
		t.Fatalf("ap second batch: %+v %v", ids, more)
	}
	// us has c and b pending; ap acknowledges b: a is forgotten (both have it).
	tr.ack("ap", ids[0].seq)
	tr.mu.Lock()
	_, hasA := tr.marks["a"]
	n := len(tr.marks)
	tr.mu.Unlock()
	if hasA || n != 2 {
		t.Fatalf("marks after both acked a: hasA=%v n=%d", hasA, n)
	}
	// An old acknowledgement does not move a position back.
	tr.ack("us", 1)
	if ids, _ := tr.pending("us", 10); len(ids) != 2 {
		t.Fatalf("us pending after a stale ack: %+v", ids)
	}
}
