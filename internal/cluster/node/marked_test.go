package node

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	pb "github.com/counterd/counterd/api/counterd/cluster/v1"
	"github.com/counterd/counterd/internal/contract"
)

// After lease_test.go's init (files initialize in name order): the
// seeds of FuzzWireDecode follow wireCases' order.
func init() {
	wireCases = append(wireCases,
		requestCase("apply marked", func() proto.Message { return new(pb.ApplyMarkedRequest) }, func(d *decoder, m proto.Message) markedRequest {
			return d.markedRequest(m.(*pb.ApplyMarkedRequest))
		}),
		responseCase("apply marked response", pbMarkedResponse),
	)
}

func addOp(id string, d int64) contract.Op {
	return contract.Op{Type: contract.OpAdd, ID: id, Kind: contract.KindCounter, Delta: d}
}

func TestMarkedApplyOnceAndSeen(t *testing.T) {
	c := newTestCluster(t, "n1", "n2", "n3")
	ctx := context.Background()
	n1, n2 := c.node("n1").n, c.node("n2").n
	var ops []contract.MarkedOp
	for i := range 12 {
		ops = append(ops, contract.MarkedOp{Op: addOp(fmt.Sprintf("mk:%d", i), int64(i+1)), Marks: []string{"e1", "e2"}})
	}
	seen, err := n1.ApplyCounterMarked(ctx, ops, time.Minute, contract.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range seen {
		if len(s) != 0 {
			t.Fatalf("op %d: seen %v on the first apply", i, s)
		}
	}
	// The same marks again, through another node: nothing applied, every
	// mark reported.
	seen, err = n2.ApplyCounterMarked(ctx, ops, time.Minute, contract.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range seen {
		slices.Sort(s)
		if !slices.Equal(s, []string{"e1", "e2"}) {
			t.Fatalf("op %d: seen %v, want both marks", i, s)
		}
	}
	// One old mark and one new: not applied, the old one reported.
	seen, err = n2.ApplyCounterMarked(ctx, []contract.MarkedOp{{Op: addOp("mk:0", 100), Marks: []string{"e2", "e3"}}}, time.Minute, contract.WriteOptions{})
	if err != nil || !slices.Equal(seen[0], []string{"e2"}) {
		t.Fatalf("seen %v, %v; want [e2]", seen, err)
	}
	for i := range 12 {
		for _, tn := range c.running() {
			v, err := tn.n.Get(ctx, fmt.Sprintf("mk:%d", i))
			if err != nil || v.Value != int64(i+1) {
				t.Fatalf("mk:%d on %s: %d, %v; want %d", i, tn.id, v.Value, err, i+1)
			}
		}
	}
	// Marks of one counter do not guard another.
	seen, err = n1.ApplyCounterMarked(ctx, []contract.MarkedOp{{Op: addOp("mk:other", 1), Marks: []string{"e1"}}}, time.Minute, contract.WriteOptions{})
	if err != nil || len(seen[0]) != 0 {
		t.Fatalf("another counter with the same event: seen %v, %v", seen, err)
	}
	// Bad input is refused, typed, and changes nothing.
	_, err = n1.ApplyCounterMarked(ctx, []contract.MarkedOp{{Op: addOp("mk:0", 1), Marks: []string{""}}}, time.Minute, contract.WriteOptions{})
	if !errors.Is(err, contract.ErrInvalidArgument) {
		t.Fatalf("empty mark: %v", err)
	}
	if _, err = n1.ApplyCounterMarked(ctx, ops[:1], 0, contract.WriteOptions{}); !errors.Is(err, contract.ErrInvalidArgument) {
		t.Fatalf("ttl 0: %v", err)
	}
}

// markedLoad plays the pipeline's consumer against a cluster: workers take
// batches of events, coalesce each batch per counter (one add of the sum,
// marked with the batch's event ids), apply through a random running node,
// drop the contributions of the events a counter reports seen and apply
// the rest again, and retry whole batches (same events, same marks) after
// errors and, now and then, after success (a redelivery). truth is what
// each counter must end at: every event counted once per counter.
type markedLoad struct {
	c       *testCluster
	stop    chan struct{}
	wg      sync.WaitGroup
	next    atomic.Int64
	applied atomic.Int64 // batches done
	errors  atomic.Int64
	redo    atomic.Int64
	mu      sync.Mutex
	truth   map[string]int64
}

// eventCounters is what event e adds to: two counters of a small set each.
func eventCounters(e int64) map[string]int64 {
	return map[string]int64{fmt.Sprintf("mv:a:%d", e%13): 1, fmt.Sprintf("mv:b:%d", e%7): e%3 + 1}
}

func startMarkedLoad(c *testCluster, workers, batch int) *markedLoad {
	l := &markedLoad{c: c, stop: make(chan struct{}), truth: map[string]int64{}}
	for w := range workers {
		l.wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				first := l.next.Add(int64(batch)) - int64(batch)
				events := make([]int64, batch)
				for i := range events {
					events[i] = first + int64(i)
				}
				l.mu.Lock()
				for _, e := range events {
					for id, d := range eventCounters(e) {
						l.truth[id] += d
					}
				}
				l.mu.Unlock()
				l.deliver(rng, events)
				if rng.IntN(4) == 0 {
					l.redo.Add(1)
					l.deliver(rng, events) // redelivered: must change nothing
				}
				l.applied.Add(1)
			}
		})
	}
	return l
}

// deliver applies events until every counter reported each of them
// applied or seen.
func (l *markedLoad) deliver(rng *rand.Rand, events []int64) {
	// pending[id] = events still to apply to id.
	pending := map[string][]int64{}
	for _, e := range events {
		for id := range eventCounters(e) {
			pending[id] = append(pending[id], e)
		}
	}
	for len(pending) > 0 {
		var ops []contract.MarkedOp
		for id, evs := range pending {
			op := contract.MarkedOp{Op: addOp(id, 0)}
			for _, e := range evs {
				op.Op.Delta += eventCounters(e)[id]
				op.Marks = append(op.Marks, fmt.Sprintf("ev-%d", e))
			}
			ops = append(ops, op)
		}
		nodes := l.c.running()
		if len(nodes) == 0 {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		tn := nodes[rng.IntN(len(nodes))]
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		seen, err := tn.n.ApplyCounterMarked(ctx, ops, time.Hour, contract.WriteOptions{})
		cancel()
		if err != nil {
			l.errors.Add(1)
			time.Sleep(10 * time.Millisecond)
			continue // the same ops again: their marks make it safe
		}
		next := map[string][]int64{}
		for i, op := range ops {
			if len(seen[i]) == 0 {
				continue // applied
			}
			for _, e := range pending[op.Op.ID] {
				if !slices.Contains(seen[i], fmt.Sprintf("ev-%d", e)) {
					next[op.Op.ID] = append(next[op.Op.ID], e)
				}
			}
		}
		pending = next
	}
}

// more waits until n more batches are done (at most 30 s): each phase of
// a test runs under load however slow the machine is.
func (l *markedLoad) more(n int64) {
	want := l.applied.Load() + n
	deadline := time.Now().Add(30 * time.Second)
	for l.applied.Load() < want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}

func (l *markedLoad) finish() {
	close(l.stop)
	l.wg.Wait()
}

// check fails at once if a counter is above its truth on any node (an
// event applied twice) and waits until every node reads every counter at
// its truth.
func (l *markedLoad) check(t *testing.T, within time.Duration) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(within)
	for {
		var last string
		for _, tn := range l.c.running() {
			for id, want := range l.truth {
				v, err := tn.n.Get(ctx, id)
				if err == nil && v.Value > want {
					t.Fatalf("%s on %s: %d, truth %d: applied twice", id, tn.id, v.Value, want)
				}
				if err != nil || v.Value != want {
					last = fmt.Sprintf("%s on %s: %d (%v), truth %d", id, tn.id, v.Value, err, want)
				}
			}
		}
		if last == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not exact within %v: %s", within, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (l *markedLoad) report(t *testing.T) {
	t.Logf("%d batches (%d events), %d redelivered, %d retried after errors", l.applied.Load(), l.next.Load(), l.redo.Load(), l.errors.Load())
	if l.applied.Load() == 0 {
		t.Fatal("no batch went through")
	}
}

func TestMarkedHandoff3To4To3UnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-node membership changes")
	}
	c := newTestCluster(t, "n1", "n2", "n3")
	l := startMarkedLoad(c, 12, 20)
	l.more(20)
	c.start("n4", "")
	c.waitRing("n1", "n2", "n3", "n4")
	l.more(30)
	c.leave("n4")
	c.waitRing("n1", "n2", "n3")
	l.more(20)
	l.finish()
	l.report(t)
	l.check(t, 5*time.Second)
}

func TestMarkedOwnerKilledUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-node membership changes")
	}
	c := newTestCluster(t, "n1", "n2", "n3")
	l := startMarkedLoad(c, 12, 20)
	l.more(20)
	// Kill the owner of the busiest counters mid-load: retries go through
	// the new owner.
	victim := c.node("n1").n.Ring().Owner("mv:a:0")
	c.kill(victim)
	var rest []string
	for _, id := range []string{"n1", "n2", "n3"} {
		if id != victim {
			rest = append(rest, id)
		}
	}
	c.waitRing(rest...)
	l.more(30)
	// And a join while the load goes on.
	c.start("n5", "")
	c.waitRing(append(rest, "n5")...)
	l.more(30)
	l.finish()
	l.report(t)
	l.check(t, 5*time.Second)
}

// TestMarkedRetryAfterOwnerRestart: a marked op's marks are on the disk
// of every node that has its effect, so a node restarted on its data
// directory still reports them.
func TestMarkedMarksSurviveRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-node membership changes")
	}
	c := newTestCluster(t, "n1", "n2", "n3")
	ctx := context.Background()
	ops := []contract.MarkedOp{{Op: addOp("mr:x", 5), Marks: []string{"a", "b"}}}
	if _, err := c.node("n1").n.ApplyCounterMarked(ctx, ops, time.Hour, contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tn := range c.running() {
		eventually(t, 5*time.Second, "marks replicated to "+tn.id, func() bool {
			_, m := tn.n.dedupe.count()
			return m >= 2
		})
	}
	// Stop everything, restart all on their directories.
	dirs := map[string]string{}
	for _, tn := range c.running() {
		dirs[tn.id] = tn.dir
		c.kill(tn.id)
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		c.start(id, dirs[id])
	}
	c.waitRing("n1", "n2", "n3")
	seen, err := c.node("n2").n.ApplyCounterMarked(ctx, ops, time.Hour, contract.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(seen[0])
	if !slices.Equal(seen[0], []string{"a", "b"}) {
		t.Fatalf("after a restart: seen %v, want [a b]", seen[0])
	}
	v, err := c.node("n3").n.Get(ctx, "mr:x")
	if err != nil || v.Value != 5 {
		t.Fatalf("mr:x = %d, %v; want 5", v.Value, err)
	}
}

// TestMarkGroupMergeProperties: copies of a group may meet in any order
// and any number of times (push, fence, handoff, anti-entropy): merge must
// be commutative, associative and idempotent, and keep every event.
func TestMarkGroupMergeProperties(t *testing.T) {
	gen := func(t *rapid.T, label string) markGroup {
		evs := rapid.SliceOfDistinct(rapid.StringMatching(`[a-e]{1,3}`), rapid.ID[string]).Draw(t, label+"events")
		slices.Sort(evs)
		ws := rapid.SliceOfNDistinct(rapid.Uint64Range(0, 1<<40), 0, maxWrote, rapid.ID[uint64]).Draw(t, label+"wrote")
		slices.Sort(ws)
		return markGroup{ID: "x", Key: 7, Wrote: ws, Expires: rapid.Int64Range(1, 100).Draw(t, label+"exp"), Events: evs}
	}
	rapid.Check(t, func(t *rapid.T) {
		a, b, c := gen(t, "a"), gen(t, "b"), gen(t, "c")
		if ab, ba := mergeGroup(a, b), mergeGroup(b, a); !equalGroup(ab, ba) {
			t.Fatalf("not commutative: %+v vs %+v", ab, ba)
		}
		if l, r := mergeGroup(mergeGroup(a, b), c), mergeGroup(a, mergeGroup(b, c)); !equalGroup(l, r) {
			t.Fatalf("not associative: %+v vs %+v", l, r)
		}
		if aa := mergeGroup(a, a); !equalGroup(aa, a) {
			t.Fatalf("not idempotent: %+v vs %+v", aa, a)
		}
		// The store's shortcut for a copy it holds (no merge).
		for _, p := range [][2]markGroup{{a, b}, {b, a}, {a, a}, {mergeGroup(a, b), b}} {
			if h, eq := holdsGroup(&p[0], &p[1]), equalGroup(mergeGroup(p[0], p[1]), p[0]); h && !eq {
				t.Fatalf("holdsGroup(%+v, %+v) but the merge differs", p[0], p[1])
			}
		}
		if !holdsGroup(&a, &a) {
			t.Fatalf("a group does not hold itself: %+v", a)
		}
		m := mergeGroup(a, b)
		for _, e := range slices.Concat(a.Events, b.Events) {
			if !slices.Contains(m.Events, e) {
				t.Fatalf("lost event %q", e)
			}
		}
		if len(m.Wrote) > maxWrote {
			t.Fatalf("%d versions", len(m.Wrote))
		}
		// Any merge order of several copies into a store gives the same
		// store (what a node holds does not depend on who told it first).
		copies := []markGroup{a, b, c}
		perm := rapid.Permutation(copies).Draw(t, "order")
		var s1, s2 markStore
		s1.merge(copies, 0)
		for _, g := range perm {
			s2.merge([]markGroup{g}, 0)
		}
		g1, _ := s1.forIDs([]string{"x"}, "", 0)
		g2, _ := s2.forIDs([]string{"x"}, "", 0)
		if len(g1) != 1 || len(g2) != 1 || !equalGroup(g1[0], g2[0]) {
			t.Fatalf("stores differ by merge order: %+v vs %+v", g1, g2)
		}
	})
}

// TestMarkStoreLazyIndex: the event index a store builds at its first
// lookup of an id (a replica never looks up) answers as one kept up to
// date from the first merge, through merges and expiries in any order.
func TestMarkStoreLazyIndex(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var early, late markStore // early: looked up before every step
		events := []string{"a", "b", "c", "d", "e", "f"}
		steps := rapid.IntRange(1, 12).Draw(t, "steps")
		now := int64(10)
		for i := range steps {
			if rapid.Bool().Draw(t, fmt.Sprint("expire", i)) {
				now += rapid.Int64Range(0, 5).Draw(t, fmt.Sprint("advance", i))
				early.expire(now)
				late.expire(now)
				continue
			}
			g := markGroup{
				ID:      "x",
				Key:     rapid.Uint64Range(1, 4).Draw(t, fmt.Sprint("key", i)),
				Wrote:   []uint64{rapid.Uint64Range(1, 4).Draw(t, fmt.Sprint("wrote", i))},
				Expires: now + rapid.Int64Range(1, 10).Draw(t, fmt.Sprint("exp", i)),
				Events:  rapid.SliceOfNDistinct(rapid.SampledFrom(events), 1, 3, rapid.ID[string]).Draw(t, fmt.Sprint("events", i)),
			}
			early.seen("x", events, 0, true, now)
			early.merge([]markGroup{g}, now)
			late.merge([]markGroup{g}, now)
		}
		got, want := late.seen("x", events, 0, true, now), early.seen("x", events, 0, true, now)
		if !slices.Equal(got, want) {
			t.Fatalf("seen with an index built at the end %v, kept from the start %v", got, want)
		}
	})
}

// TestMarkStoreExpiresDueBuckets: a sweep that visits only the due
// expiry buckets forgets exactly the groups that expired, through merges
// that move a group's expiry later, drops of ids and sweeps at any time.
func TestMarkStoreExpiresDueBuckets(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var s markStore
		want := map[string]map[uint64]int64{} // id -> key -> expiry
		sec := int64(time.Second)
		now := int64(1_000_000) * sec
		ids := []string{"x", "y", "z"}
		for i := range rapid.IntRange(1, 40).Draw(t, "steps") {
			switch rapid.IntRange(0, 5).Draw(t, fmt.Sprint("action", i)) {
			case 0: // a sweep, some time later
				now += rapid.Int64Range(0, 40).Draw(t, fmt.Sprint("advance", i)) * sec
				deleted := map[string]bool{}
				for _, r := range s.expire(now) {
					deleted[r.Key] = true
				}
				for id, m := range want {
					for k, exp := range m {
						if exp <= now {
							g := markGroup{ID: id, Key: k}
							if !deleted[g.storedKey()] {
								t.Fatalf("group %s/%d (expiry %d) not deleted at %d", id, k, exp, now)
							}
							delete(m, k)
						}
					}
				}
			case 1: // a handoff drops an id
				id := rapid.SampledFrom(ids).Draw(t, fmt.Sprint("drop", i))
				s.dropID(id)
				delete(want, id)
			default: // a new group or a copy with a later expiry
				id := rapid.SampledFrom(ids).Draw(t, fmt.Sprint("id", i))
				k := rapid.Uint64Range(1, 4).Draw(t, fmt.Sprint("key", i))
				exp := now + rapid.Int64Range(1, 60).Draw(t, fmt.Sprint("ttl", i))*sec
				s.merge([]markGroup{{ID: id, Key: k, Wrote: []uint64{k}, Expires: exp, Events: []string{fmt.Sprint("e", i)}}}, now)
				if want[id] == nil {
					want[id] = map[uint64]int64{}
				}
				want[id][k] = max(want[id][k], exp)
			}
			held := map[string]map[uint64]int64{}
			gs, _ := s.forIDs(ids, "", 0)
			for _, g := range gs {
				if held[g.ID] == nil {
					held[g.ID] = map[uint64]int64{}
				}
				held[g.ID][g.Key] = g.Expires
			}
			for _, id := range ids {
				if len(held[id]) != len(want[id]) {
					t.Fatalf("%s: the store holds %v, want %v", id, held[id], want[id])
				}
				for k, exp := range want[id] {
					if held[id][k] != exp {
						t.Fatalf("%s: the store holds %v, want %v", id, held[id], want[id])
					}
				}
			}
		}
	})
}

// TestMarkGroupStoredRoundTrip: the disk form of a group reads back as
// the group; garbage is a typed error, never a group.
func TestMarkGroupStoredRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		g := markGroup{
			ID:      rapid.StringMatching(`[a-z:/0-9]{1,40}`).Draw(t, "id"),
			Key:     rapid.Uint64().Draw(t, "key"),
			Wrote:   rapid.SliceOfN(rapid.Uint64(), 0, maxWrote).Draw(t, "wrote"),
			Expires: rapid.Int64().Draw(t, "exp"),
			Events:  rapid.SliceOf(rapid.String()).Draw(t, "events"),
		}
		back, err := decodeGroup(g.stored(1))
		if err != nil {
			t.Fatal(err)
		}
		if back.ID != g.ID || back.Key != g.Key || back.Expires != g.Expires || !slices.Equal(back.Wrote, g.Wrote) || !slices.Equal(back.Events, g.Events) {
			t.Fatalf("round trip: %+v -> %+v", g, back)
		}
		rec := g.stored(1)
		rec.Data = rapid.SliceOf(rapid.Byte()).Draw(t, "garbage")
		if _, err := decodeGroup(rec); err != nil && !errors.Is(err, errMarkRecord) {
			t.Fatalf("garbage: untyped error %v", err)
		}
	})
}

// TestMarkedPieces: the pieces of a forwarded ApplyMarked keep every op
// once, in order, with its marks, within the bounds of one message.
func TestMarkedPieces(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 3*maxMarkedOps).Draw(t, "ops")
		big := rapid.IntRange(1, 300_000).Draw(t, "mark size")
		ops := make([]contract.MarkedOp, n)
		for i := range ops {
			ops[i] = contract.MarkedOp{Op: addOp(fmt.Sprint(i), 1)}
			if i%97 == 0 {
				ops[i].Marks = []string{strings.Repeat("m", big)}
			}
		}
		var back []contract.MarkedOp
		for _, p := range markedPieces(ops) {
			if p.first != len(back) || len(p.ops) == 0 || len(p.ops) > maxMarkedOps {
				t.Fatalf("piece at %d of %d ops (have %d)", p.first, len(p.ops), len(back))
			}
			size := 0
			for _, op := range p.ops {
				for _, m := range op.Marks {
					size += len(m)
				}
			}
			if len(p.ops) > 1 && size > maxMarkBytes {
				t.Fatalf("piece of %d ops with %d bytes of marks", len(p.ops), size)
			}
			back = append(back, p.ops...)
		}
		if len(back) != n {
			t.Fatalf("%d ops back of %d", len(back), n)
		}
		for i := range back {
			if back[i].Op.ID != ops[i].Op.ID {
				t.Fatalf("op %d is %q", i, back[i].Op.ID)
			}
		}
	})
}

// TestMarkStorePushDelta: a push to a peer carries the groups that changed
// since the last push it delivered (new ones, grown ones), none twice
// otherwise, and all of them when asked (handoff, fence).
func TestMarkStorePushDelta(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var s markStore
		delivered := map[uint64]markGroup{} // what the peer holds, by key
		all := map[uint64]markGroup{}
		steps := rapid.IntRange(1, 60).Draw(t, "steps")
		for i := range steps {
			switch rapid.IntRange(0, 2).Draw(t, "action") {
			case 0, 1: // a new group or a copy that grows one
				k := rapid.Uint64Range(1, 12).Draw(t, "key")
				g := markGroup{ID: "x", Key: k, Wrote: []uint64{k}, Expires: 100, Events: []string{fmt.Sprint("e", i)}}
				s.merge([]markGroup{g}, 0)
				if cur, ok := all[k]; ok {
					g = mergeGroup(cur, g)
				}
				all[k] = g
			case 2: // a push to the peer
				gs, upTo := s.forIDs([]string{"x"}, "p", 0)
				for _, g := range gs {
					if prev, ok := delivered[g.Key]; ok && equalGroup(prev, g) {
						t.Fatalf("group %d pushed again unchanged", g.Key)
					}
					delivered[g.Key] = g
				}
				s.delivered("p", upTo)
				for k, g := range all {
					if !equalGroup(delivered[k], g) {
						t.Fatalf("after a push the peer lacks group %d as it is: %+v vs %+v", k, delivered[k], g)
					}
				}
			}
		}
		gs, _ := s.forIDs([]string{"x"}, "", 0)
		if len(gs) != len(all) {
			t.Fatalf("all: %d groups, want %d", len(gs), len(all))
		}
	})
}

// TestMarkedOldOwnerFencedByEpoch: the replicas of a counter promised a
// newer ownership epoch to another node while its owner still applies (a
// ring the owner has not seen yet). The owner's marked write is then not
// acknowledged (its push is stale), and its own copy of the marks does
// not answer the retry as seen until a new fence checked that copy
// against the replicas: here nobody else wrote, so the fenced state holds
// the write, the retry is seen, and the counter counts the event once on
// every node.
func TestMarkedOldOwnerFencedByEpoch(t *testing.T) {
	c := newTestCluster(t, "n1", "n2", "n3")
	ctx := context.Background()
	const id = "mo:x"
	owner := c.node("n1").n.Ring().Owner(id)
	on := c.node(owner).n
	if _, err := on.ApplyCounterMarked(ctx, []contract.MarkedOp{{Op: addOp(id, 1), Marks: []string{"e1"}}}, time.Hour, contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Another node claims the id at a much higher epoch on both replicas.
	claimElsewhere(t, c, owner, id, 1000)
	op := []contract.MarkedOp{{Op: addOp(id, 1), Marks: []string{"e2"}}}
	_, err := on.ApplyCounterMarked(ctx, op, time.Hour, contract.WriteOptions{})
	if !errors.Is(err, contract.ErrUnavailable) {
		t.Fatalf("old owner's marked write: %v, want unavailable (not acknowledged)", err)
	}
	seen, err := on.ApplyCounterMarked(ctx, op, time.Hour, contract.WriteOptions{})
	if err != nil || !slices.Equal(seen[0], []string{"e2"}) {
		t.Fatalf("retry after a new fence: seen %v, %v; want [e2]", seen, err)
	}
	for _, tn := range c.running() {
		eventually(t, 5*time.Second, "value 2 on "+tn.id, func() bool {
			v, err := tn.n.Get(ctx, id)
			return err == nil && v.Value == 2
		})
	}
}

// TestMarkedOldOwnerWriteLostIsAppliedAgain: as above, but the newer
// owner's state (epoch 1000, without the old owner's write) reached the
// replicas: the old owner's write is lost to it, so the retry must apply
// the event again (once) rather than answer it seen from the old owner's
// own copy of the marks.
func TestMarkedOldOwnerWriteLostIsAppliedAgain(t *testing.T) {
	c := newClusterNoAntiEntropy(t, "n1", "n2", "n3")
	ctx := context.Background()
	const id = "mo:y"
	owner := c.node("n1").n.Ring().Owner(id)
	on := c.node(owner).n
	if _, err := on.ApplyCounterMarked(ctx, []contract.MarkedOp{{Op: addOp(id, 1), Marks: []string{"e1"}}}, time.Hour, contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	st, ok, err := on.store.Export(id)
	if err != nil || !ok {
		t.Fatalf("export: %v %v", ok, err)
	}
	others := claimElsewhere(t, c, owner, id, 1000)
	newer := st
	newer.Version = epochFloor(1000) | 5 // the new owner's state: value 1, e2 not in it
	for _, tn := range others {
		if r := tn.n.serveReplicate(ctx, &replicateRequest{header: header{From: others[0].id}, States: []State{newer}, Sync: true}); r.Err != nil || len(r.Stale) > 0 {
			t.Fatalf("newer state on %s: %+v", tn.id, r)
		}
	}
	op := []contract.MarkedOp{{Op: addOp(id, 1), Marks: []string{"e2"}}}
	if _, err := on.ApplyCounterMarked(ctx, op, time.Hour, contract.WriteOptions{}); !errors.Is(err, contract.ErrUnavailable) {
		t.Fatalf("old owner's marked write: %v, want unavailable (not acknowledged)", err)
	}
	seen, err := on.ApplyCounterMarked(ctx, op, time.Hour, contract.WriteOptions{})
	if err != nil || len(seen[0]) != 0 {
		t.Fatalf("retry: seen %v, %v; want applied (the first write was lost)", seen, err)
	}
	for _, tn := range c.running() {
		eventually(t, 5*time.Second, "value 2 on "+tn.id, func() bool {
			v, err := tn.n.Get(ctx, id)
			return err == nil && v.Value == 2
		})
	}
}

// TestMarkedSeenAfterWritelessClaims: under ring churn, nodes claim an
// id and lose it again before they write (a marked op waits for the
// inbound handoffs first). A group keeps maxWrote versions, the highest:
// if each such claim added its epoch's floor to the groups its state
// holds, four of them would push out the version that matches the
// owner's state (here the write's own), and the owner that claims the id
// back would apply the group's events again. The owner must still report
// them seen, before its first write of its new epoch (the first op after
// the claim is typically the retry of the batch that failed while
// ownership moved) and after it.
func TestMarkedSeenAfterWritelessClaims(t *testing.T) {
	c := newClusterNoAntiEntropy(t, "n1", "n2", "n3")
	ctx := context.Background()
	const id = "mw:x"
	owner := c.node("n1").n.Ring().Owner(id)
	on := c.node(owner).n
	op := []contract.MarkedOp{{Op: addOp(id, 1), Marks: []string{"e1"}}}
	if _, err := on.ApplyCounterMarked(ctx, op, time.Hour, contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	var others []*testNode
	for _, tn := range c.running() {
		if tn.id != owner {
			others = append(others, tn)
			eventually(t, 5*time.Second, "the group on "+tn.id, func() bool {
				_, m := tn.n.dedupe.count()
				return m == 1
			})
		}
	}
	// Four claims by the other nodes in turn, none of which writes; each
	// claimant's fence merges the others' copies of the group.
	for i := range 4 {
		claimBy(t, c, others[i%len(others)], owner, id, uint32(1000+i))
	}
	// The owner fences again (as after a ring change, or a failed
	// replication): its fence merges their copies and claims above 1003,
	// from the state of the first write.
	on.fence.forget([]string{id})
	seen, err := on.ApplyCounterMarked(ctx, op, time.Hour, contract.WriteOptions{})
	if err != nil || !slices.Equal(seen[0], []string{"e1"}) {
		t.Fatalf("redelivered after the claims: seen %v, %v; want [e1] (applied twice)", seen, err)
	}
	// The next write lifts the state to the owner's epoch: still seen.
	if _, err := on.ApplyCounterMarked(ctx, []contract.MarkedOp{{Op: addOp(id, 1), Marks: []string{"e2"}}}, time.Hour, contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, ev := range []string{"e1", "e2"} {
		op := []contract.MarkedOp{{Op: addOp(id, 1), Marks: []string{ev}}}
		seen, err = on.ApplyCounterMarked(ctx, op, time.Hour, contract.WriteOptions{})
		if err != nil || !slices.Equal(seen[0], []string{ev}) {
			t.Fatalf("%s redelivered after a write of the new epoch: seen %v, %v; want [%s]", ev, seen, err, ev)
		}
	}
	for _, tn := range c.running() {
		eventually(t, 5*time.Second, "value 2 on "+tn.id, func() bool {
			v, err := tn.n.Get(ctx, id)
			return err == nil && v.Value == 2
		})
	}
}

// claimElsewhere has the first node other than owner claim id at epoch
// (claimBy), and returns the nodes other than owner, the claimant first.
func claimElsewhere(t *testing.T, c *testCluster, owner, id string, epoch uint32) []*testNode {
	t.Helper()
	var others []*testNode
	for _, tn := range c.running() {
		if tn.id != owner {
			others = append(others, tn)
		}
	}
	claimBy(t, c, others[0], owner, id, epoch)
	return others
}

// claimBy is claimant's fence of id at epoch without owner (which has not
// seen the ring that moved id): every node but owner promises the epoch
// and answers with its copy of the id, which the claimant merges before
// it claims the epoch from the state it then holds.
func claimBy(t *testing.T, c *testCluster, claimant *testNode, owner, id string, epoch uint32) {
	t.Helper()
	ctx := context.Background()
	for _, tn := range c.running() {
		if tn.id == owner {
			continue
		}
		resp := tn.n.serveFetch(ctx, &fetchRequest{header: header{From: claimant.id}, IDs: []string{id}, Claims: []uint32{epoch}})
		if resp.Err != nil || resp.Refused[0] != 0 {
			t.Fatalf("claim on %s: %+v", tn.id, resp)
		}
		if tn != claimant {
			if _, err := claimant.n.mergeWithRecords(ctx, resp.States, resp.Idem, resp.Marks, contract.WriteOptions{Durability: contract.Sync}); err != nil {
				t.Fatalf("%s merging the answer of %s: %v", claimant.id, tn.id, err)
			}
		}
	}
	claimant.n.recheckRecords([]string{id}, map[string]uint32{id: epoch})
	claimant.n.claimMarks([]string{id}, map[string]uint32{id: epoch})
}

// exportCounting counts the states its store exports.
type exportCounting struct {
	Store
	n atomic.Int64
}

func (s *exportCounting) Export(id string) (State, bool, error) {
	s.n.Add(1)
	return s.Store.Export(id)
}

// TestMarkedAloneExportsNothing: a cluster of one applies marked ops
// (always replicated at once, sync) without exporting their states: no
// replica to push them to. Then, with a second member, the states go to
// it again.
func TestMarkedAloneExportsNothing(t *testing.T) {
	var n1 *exportCounting // the first store wrapped: n1's
	c := startTestCluster(&testCluster{t: t, nodes: map[string]*testNode{}, wrapStore: func(s Store) Store {
		w := &exportCounting{Store: s}
		if n1 == nil {
			n1 = w
		}
		return w
	}}, "n1")
	ctx := context.Background()
	var ops []contract.MarkedOp
	for i := range 20 {
		ops = append(ops, contract.MarkedOp{Op: addOp(fmt.Sprintf("al:%d", i), 1), Marks: []string{"e1"}})
	}
	if _, err := c.node("n1").n.ApplyCounterMarked(ctx, ops, time.Minute, contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := n1.n.Load(); n != 0 {
		t.Errorf("a cluster of one exported %d states for its marked writes", n)
	}
	c.start("n2", "")
	c.waitRing("n1", "n2")
	ops = ops[:1]
	ops[0].Marks = []string{"e2"}
	if _, err := c.node("n1").n.ApplyCounterMarked(ctx, ops, time.Minute, contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if v, err := c.node("n2").eng.Get("al:0"); err != nil || v.Value != 2 {
		t.Errorf("n2: al:0 = %d, %v; want 2 (replicated once n2 is a member)", v.Value, err)
	}
}
