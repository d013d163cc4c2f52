package region

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
)

// TestTrackerResume: each peer gets what changed after its acknowledged
// position; a peer that does not acknowledge (cut off) keeps everything
// pending while the other's positions move; ids every peer has are
// forgotten; a delete is remembered with its version.
func TestTrackerResume(t *testing.T) {
	tr := newTracker([]Peer{{Name: "us"}, {Name: "ap"}}, time.Now)
	add := func(id string, ver uint64) {
		tr.note(&contract.Op{Type: contract.OpAdd, ID: id}, &contract.Result{ID: id, Version: ver, Changed: true})
	}
	add("a", 1)
	add("b", 1)
	add("a", 2)
	ids, more := tr.pending("us=", 10)
	if more || len(ids) != 2 || ids[0].id != "b" || ids[1].id != "a" || ids[1].ver != 2 {
		t.Fatalf("pending: %+v %v", ids, more)
	}
	tr.ack("us=", ids[1].seq)
	if ids, _ := tr.pending("us=", 10); len(ids) != 0 {
		t.Fatalf("after ack: %+v", ids)
	}
	// ap is cut off: nothing acknowledged, everything stays pending.
	add("c", 1)
	tr.note(&contract.Op{Type: contract.OpDelete, ID: "b"}, &contract.Result{ID: "b", Version: 2, Changed: true})
	ids, _ = tr.pending("ap=", 10)
	if len(ids) != 3 {
		t.Fatalf("ap pending: %+v", ids)
	}
	if n, oldest := tr.lag("ap"); n != 3 || oldest == 0 {
		t.Fatalf("ap lag: %d %d", n, oldest)
	}
	// A batch limit: the first two, then the rest from the acknowledged
	// position.
	ids, more = tr.pending("ap=", 2)
	if !more || len(ids) != 2 || ids[0].id != "a" || ids[1].id != "c" {
		t.Fatalf("ap first batch: %+v %v", ids, more)
	}
	tr.ack("ap=", ids[1].seq)
	ids, more = tr.pending("ap=", 2)
	if more || len(ids) != 1 || ids[0].id != "b" || ids[0].del != 2 {
		t.Fatalf("ap second batch: %+v %v", ids, more)
	}
	// us has c and b pending; ap acknowledges b: a is forgotten (both have it).
	tr.ack("ap=", ids[0].seq)
	tr.mu.Lock()
	_, hasA := tr.marks["a"]
	n := len(tr.marks)
	tr.mu.Unlock()
	if hasA || n != 2 {
		t.Fatalf("marks after both acked a: hasA=%v n=%d", hasA, n)
	}
	// An old acknowledgement does not move a position back.
	tr.ack("us=", 1)
	if ids, _ := tr.pending("us=", 10); len(ids) != 2 {
		t.Fatalf("us pending after a stale ack: %+v", ids)
	}
}

// TestSendersAsOf: pushes from the nodes of a cluster region each carry
// their as-of; the region's is the oldest, null until every node that
// pushed has completed a push; a node pushing from a new process run
// resets its as-of and asks for anti-entropy.
func TestSendersAsOf(t *testing.T) {
	ecfg := engine.DefaultConfig()
	ecfg.InMemory, ecfg.NodeID = true, "eu-1"
	local, err := engine.Open(ecfg)
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	r, err := Open(Config{Name: "eu", Peers: []Peer{{Name: "us", Addr: "127.0.0.1:1"}, {Name: "us", Addr: "127.0.0.1:2"}}, Local: local, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	push := func(node string, inc uint64, asOf int64, complete bool) {
		t.Helper()
		if err := r.receive(ctx, caller{any: true}, EncodeBatch(nil, &Batch{From: "us", Node: node, Incarnation: inc, AsOf: asOf, Complete: complete})); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.receive(ctx, caller{any: true}, EncodeBatch(nil, &Batch{From: "us", Incarnation: 1})); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("push without a node: %v", err)
	}
	p := r.peers["us"]
	p.syncWanted = false
	push("us-1", 1, 100, true)
	push("us-2", 2, 50, false)
	if got := r.asOf("us"); !got.IsZero() {
		t.Fatalf("as-of %v while us-2 has not completed a push", got)
	}
	push("us-2", 2, 70, true)
	if got := r.asOf("us"); got.UnixNano() != 70 {
		t.Fatalf("as-of %d, want the older node's 70", got.UnixNano())
	}
	push("us-1", 1, 200, true)
	push("us-2", 2, 300, true)
	if got := r.asOf("us"); got.UnixNano() != 200 || p.syncWanted {
		t.Fatalf("as-of %d (want 200), sync wanted %v", got.UnixNano(), p.syncWanted)
	}
	push("us-1", 9, 400, false) // us-1 restarted
	if got := r.asOf("us"); !got.IsZero() || !p.syncWanted {
		t.Fatalf("after a restart: as-of %v, sync wanted %v", got, p.syncWanted)
	}
	st := r.Status()
	if len(st.Peers) != 1 || st.Peers[0].Addr != "127.0.0.1:1,127.0.0.1:2" || len(st.Peers[0].Senders) != 2 || st.Peers[0].Senders[0].Node != "us-1" {
		t.Fatalf("status: %+v", st)
	}
}
