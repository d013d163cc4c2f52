package region

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
)

// fakeDurable is a durable tier shared by the nodes of a region: an
// engine and its record of changes (each id's last change's sequence
// number), as PostgreSQL's region_changes keeps it.
type fakeDurable struct {
	eng  *engine.Engine
	be   contract.Backend
	mu   sync.Mutex
	seq  int64
	log  map[string]int64
	base map[string]uint64 // versions of earlier lives (PostgreSQL's region_changes.base)
}

func newFakeDurable(t *testing.T) *fakeDurable {
	e := memEngine(t, "durable")
	return &fakeDurable{eng: e, be: engine.Local(e), log: map[string]int64{}, base: map[string]uint64{}}
}

func (f *fakeDurable) apply(t *testing.T, op contract.Op) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if v, err := f.eng.Get(op.ID); err == nil && v.Exists && op.Type == contract.OpDelete {
		f.base[op.ID] += v.Version
	}
	if _, err := f.be.Apply(context.Background(), op, contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.seq++
	f.log[op.ID] = f.seq
}

func (f *fakeDurable) durable() *Durable {
	return &Durable{
		Changes: func(_ context.Context, after Cursor, limit int) (changes []Change, more bool, err error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			var cs []Cursor
			for id, s := range f.log {
				if s > after.Seq || s == after.Seq && id > after.ID {
					cs = append(cs, Cursor{s, id})
				}
			}
			slices.SortFunc(cs, func(a, b Cursor) int {
				if a.Seq != b.Seq {
					return int(a.Seq - b.Seq)
				}
				return strings.Compare(a.ID, b.ID)
			})
			if len(cs) > limit {
				cs, more = cs[:limit], true
			}
			for _, c := range cs {
				st, ok, err := f.eng.Export(c.ID)
				if err != nil {
					return nil, false, err
				}
				ch := Change{At: c}
				if b := f.base[c.ID]; b > 0 {
					ch.Tomb = &engine.State{ID: c.ID, Deleted: true, Version: b}
				}
				if ok {
					st.Version += f.base[c.ID]
					ch.State = &st
				}
				changes = append(changes, ch)
			}
			return changes, more, nil
		},
		ExportAll: func(ctx context.Context, fn func(engine.State) error) error {
			return f.eng.ExportAll(ctx, func(s engine.State) error {
				f.mu.Lock()
				s.Version += f.base[s.ID]
				f.mu.Unlock()
				return fn(s)
			})
		},
		Export: func(_ context.Context, id string) (engine.State, bool, error) {
			s, ok, err := f.eng.Export(id)
			f.mu.Lock()
			s.Version += f.base[id]
			f.mu.Unlock()
			return s, ok, err
		},
		Region: f.be,
	}
}

// TestDurableRegionConverges: region t is two nodes on one durable tier
// (each shipping the whole record, a few ids a push), region e one
// embedded node; both take writes (t deletes one of its counters), and
// the global value read on all three nodes converges to the sum of both
// regions' parts.
func TestDurableRegionConverges(t *testing.T) {
	ctx := context.Background()
	fd := newFakeDurable(t)
	eLocal := memEngine(t, "e")
	// Listeners first: every replicator needs the others' addresses.
	lns := make([]net.Listener, 3)
	addrs := make([]string, 3)
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i], addrs[i] = ln, ln.Addr().String()
	}
	tPeers := []Peer{{Name: "e", Addr: addrs[2]}}
	ePeers := []Peer{{Name: "t", Addr: addrs[0]}, {Name: "t", Addr: addrs[1]}}
	var reps []*Replicator
	for i := range 2 {
		r, err := Open(Config{Name: "t", Node: []string{"t1", "t2"}[i], Peers: tPeers, Durable: fd.durable(), Dir: t.TempDir(),
			Interval: 20 * time.Millisecond, MaxBatchIDs: 3})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		reps = append(reps, r)
	}
	er, err := Open(Config{Name: "e", Node: "e1", Peers: ePeers, Local: eLocal, Dir: t.TempDir(), Interval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { er.Close() })
	reps = append(reps, er)
	for i, r := range reps {
		gs := grpc.NewServer()
		r.Register(gs)
		go gs.Serve(lns[i])
		t.Cleanup(gs.Stop)
		r.Start(ctx)
	}
	ebe := er.Wrap(engine.Local(eLocal))
	want := map[string]int64{}
	for i := range 20 {
		id := []string{"a", "b", "c", "d", "e", "f", "g"}[i%7]
		fd.apply(t, contract.Op{Type: contract.OpAdd, ID: id, Delta: int64(i + 1)})
		if _, err := ebe.Apply(ctx, contract.Op{Type: contract.OpAdd, ID: id, Delta: 100}, contract.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		want[id] += int64(i+1) + 100
	}
	converge := func(what string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			bad := ""
		all:
			for _, r := range reps {
				for id, v := range want {
					g, err := r.Global(ctx, id)
					if err != nil {
						t.Fatal(err)
					}
					if g.Value != v {
						bad = r.cfg.Node + ": " + id
						break all
					}
				}
			}
			if bad == "" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s not converged", what, bad)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	converge("after the writes")
	// t deletes its part of "a" and counts it again.
	v, _ := fd.eng.Get("a")
	fd.apply(t, contract.Op{Type: contract.OpDelete, ID: "a"})
	fd.apply(t, contract.Op{Type: contract.OpAdd, ID: "a", Delta: 5})
	want["a"] += 5 - v.Value
	converge("after t's delete")
	// Both of t's nodes push to e: e's view of t has two senders.
	st := er.Status()
	if len(st.Peers) != 1 || len(st.Peers[0].Senders) != 2 {
		t.Fatalf("e's status: %+v", st)
	}
	// Anti-entropy with t compares e's copy with a cut of the durable
	// tier: nothing differs.
	// The background loop's own syncs (the one at start, one after an
	// incarnation change) may run at the same time and may have compared
	// before the region converged; a try they overlapped is not counted.
	for try := 0; ; try++ {
		before := er.Status().Peers[0]
		if err := er.SyncFrom(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		after := er.Status().Peers[0]
		if after.Syncs != before.Syncs+1 && try < 20 {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if after.Syncs != before.Syncs+1 || after.ChunksFetched != before.ChunksFetched {
			t.Fatalf("anti-entropy with a converged region: before %+v, after %+v", before, after)
		}
		break
	}
}

// TestDurableBatchBytes: a push stops at MaxBatchBytes on an id boundary
// (at least one id a push) and the next resumes after the last id sent,
// until every change has been sent once.
func TestDurableBatchBytes(t *testing.T) {
	fd := newFakeDurable(t)
	for i := range 10 {
		fd.apply(t, contract.Op{Type: contract.OpAdd, ID: fmt.Sprintf("id:%d", i), Delta: 1})
	}
	fd.apply(t, contract.Op{Type: contract.OpDelete, ID: "id:3"})
	peer := Peer{Name: "e", Addr: "127.0.0.1:1"}
	r, err := Open(Config{Name: "t", Peers: []Peer{peer}, Durable: fd.durable(), Dir: t.TempDir(), MaxBatchBytes: 1, MaxBatchIDs: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	d := r.peers["e"].dests[0]
	sent := map[string]int{}
	for range 20 {
		_, b, next, more, err := r.durableBatch(context.Background(), d)
		if err != nil {
			t.Fatal(err)
		}
		if len(b.States)+len(b.Tombs) != 1 || b.Complete == more {
			t.Fatalf("batch of %d states, %d tombstones, complete=%v more=%v", len(b.States), len(b.Tombs), b.Complete, more)
		}
		for _, s := range append(b.States, b.Tombs...) {
			sent[s.ID]++
		}
		d.cursor = next
		if !more {
			break
		}
	}
	if len(sent) != 10 {
		t.Fatalf("sent %v", sent)
	}
	for id, n := range sent {
		if n != 1 {
			t.Fatalf("%s sent %d times", id, n)
		}
	}
}
