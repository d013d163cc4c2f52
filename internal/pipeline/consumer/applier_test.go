package consumer

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/pipeline/event"
	"github.com/counterd/counterd/internal/pipeline/rules"
	"github.com/counterd/counterd/internal/pipeline/stream"
)

const testRules = `rules:
  - name: views
    filter: event.type == "view"
    counter: '"views:" + event.post'
    add: "1"
  - name: viewers
    filter: event.type == "view"
    counter: '"viewers:" + event.post'
    pfadd: event.user
  - name: by-country
    filter: event.type == "view"
    counter: '"countries:" + event.post'
    hadd: {field: event.country}
`

func newApplier(t testing.TB, maxBatch int) (*Applier, *engine.Engine) {
	t.Helper()
	cfg := engine.DefaultConfig()
	cfg.InMemory = true
	cfg.MaxBatch = maxBatch
	e, err := engine.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	rs, err := rules.Load("rules.yaml", []byte(testRules))
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewApplier(engine.Local(e), rs, event.Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return a, e
}

// loadWithRollups loads the rules file src and attaches its rules'
// rollup specs to e, as the pipeline does.
func loadWithRollups(tb testing.TB, e *engine.Engine, src string) *rules.Set {
	tb.Helper()
	rs, err := rules.Load("rules.yaml", []byte(src))
	if err != nil {
		tb.Fatal(err)
	}
	for _, r := range rs.Rules {
		if r.RollupKey != "" {
			if err := e.SetRollup(r.RollupKey, r.Rollup); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return rs
}

// records returns n events of 3 posts as records at offsets 0..n-1; every
// 7th repeats the id of the one before; every 50th has no post (its
// counter template fails), every 13th is a click (filtered out).
func records(n int) (recs []stream.Record, views map[string]int64, bad map[int64]bool) {
	bad = map[int64]bool{}
	id := 0
	for i := range n {
		if i%7 != 6 {
			id++
		}
		post := fmt.Sprintf("p%d", id%3)
		var js string
		switch {
		case i%50 == 49:
			js = fmt.Sprintf(`{"id":"bad-%d","type":"view","ts":1,"user":"u"}`, i)
			bad[int64(i)] = true
		case id%13 == 0:
			js = fmt.Sprintf(`{"id":"e%d","type":"click","ts":1,"post":%q}`, id, post)
		default:
			js = fmt.Sprintf(`{"id":"e%d","type":"view","ts":1,"post":%q,"user":"u%d","country":"c%d"}`, id, post, id%10, id%2)
		}
		recs = append(recs, stream.Record{Partition: 2, Offset: int64(i), Value: []byte(js)})
	}
	// What counts: the first view of each id with a post.
	views = map[string]int64{}
	seen := map[string]bool{}
	for _, r := range recs {
		e, err := event.Decode(r.Value, event.Limits{})
		if err != nil || e.Type != "view" || seen[e.ID] {
			continue
		}
		post, ok := e.Attr("post")
		if !ok {
			continue
		}
		seen[e.ID] = true
		views[post.(string)]++
	}
	return recs, views, bad
}

func checkViews(t *testing.T, e *engine.Engine, views map[string]int64) {
	t.Helper()
	for post, want := range views {
		v, err := e.Get("views:" + post)
		if err != nil || v.Value != want {
			t.Errorf("views:%s = %d (%v), want %d", post, v.Value, err, want)
		}
		c, err := e.Get("countries:" + post)
		var sum int64
		for _, f := range c.Fields {
			sum += f.Value
		}
		if err != nil || sum != want {
			t.Errorf("countries:%s fields sum to %d (%v), want %d", post, sum, err, want)
		}
	}
}

func checkDead(t *testing.T, dead []stream.DeadLetter, bad map[int64]bool) {
	t.Helper()
	got := map[int64]bool{}
	for _, d := range dead {
		if !bad[d.Record.Offset] || got[d.Record.Offset] {
			t.Errorf("unexpected dead letter at %d: %s", d.Record.Offset, d.Reason)
		}
		got[d.Record.Offset] = true
		if !strings.Contains(d.Reason, `rule "views" counter`) {
			t.Errorf("dead letter at %d: reason %q", d.Record.Offset, d.Reason)
		}
	}
	if len(got) != len(bad) {
		t.Errorf("%d dead letters, want %d", len(got), len(bad))
	}
}

// TestApplyExactlyOnce: records applied, then delivered again whole and
// in overlapping slices (a consumer restarted from an older commit),
// count once; small engine batches split the work into many chunks.
func TestApplyExactlyOnce(t *testing.T) {
	for _, maxBatch := range []int{1000, 10} {
		t.Run(fmt.Sprint("maxBatch=", maxBatch), func(t *testing.T) {
			a, e := newApplier(t, maxBatch)
			recs, views, bad := records(2000)
			ctx := context.Background()
			dead, err := a.Apply(ctx, "test", recs[:1200])
			if err != nil {
				t.Fatal(err)
			}
			more, err := a.Apply(ctx, "test", recs[1200:])
			if err != nil {
				t.Fatal(err)
			}
			checkDead(t, append(dead, more...), bad)
			checkViews(t, e, views)
			for _, r := range [][2]int{{0, 2000}, {500, 1500}, {1199, 1201}} {
				dead, err := a.Apply(ctx, "test", recs[r[0]:r[1]])
				if err != nil {
					t.Fatal(err)
				}
				for _, d := range dead {
					if !bad[d.Record.Offset] {
						t.Errorf("redelivery dead-lettered %d: %s", d.Record.Offset, d.Reason)
					}
				}
			}
			checkViews(t, e, views)
			if n, _, _ := e.PFCount("viewers:p1"); n < 9 || n > 10 {
				t.Errorf("viewers:p1 = %d, want 10 (HLL)", n)
			}
		})
	}
}

// TestApplyConcurrentCopies: two appliers (a zombie and its successor, or
// two nodes of a JetStream durable consumer) apply the same records at
// once; the marker of each event lets exactly one of them count it.
func TestApplyConcurrentCopies(t *testing.T) {
	a, e := newApplier(t, 50)
	b, err := NewApplier(engine.Local(e), a.Rules(), event.Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	recs, views, _ := records(3000)
	var wg sync.WaitGroup
	for _, ap := range []*Applier{a, b, a, b} {
		wg.Go(func() {
			for i := 0; i < len(recs); i += 100 {
				if _, err := ap.Apply(context.Background(), "test", recs[i:i+100]); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	checkViews(t, e, views)
}

// TestApplyRefusedOp: an op the engine refuses at apply time (a counter
// of another kind) dead-letters the events behind it and applies the rest;
// dead letters come in offset order.
func TestApplyRefusedOp(t *testing.T) {
	a, e := newApplier(t, 1000)
	ctx := context.Background()
	if _, err := e.Apply(ctx, contract.Op{Type: contract.OpPFAdd, ID: "views:p9", Items: [][]byte{[]byte("x")}}, contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	recs := []stream.Record{
		{Offset: 0, Value: []byte(`{"id":"a","type":"view","ts":1,"post":"p1","user":"u","country":"de"}`)},
		{Offset: 1, Value: []byte(`{"id":"b","type":"view","ts":1,"post":"p9","user":"u","country":"de"}`)},
		{Offset: 2, Value: []byte(`{"id":"c","type":"view","ts":1,"post":"p1","user":"u","country":"de"}`)},
		{Offset: 3, Value: []byte(`not json`)},
	}
	dead, err := a.Apply(ctx, "test", recs)
	if err != nil {
		t.Fatal(err)
	}
	// In offset order, though the engine refused offset 1 after the decoder
	// refused offset 3: Kafka's dead-letter publisher skips what is not
	// after the last position it published.
	if len(dead) != 2 || dead[0].Record.Offset != 1 || dead[1].Record.Offset != 3 || !strings.Contains(dead[0].Reason, "wrong kind") {
		t.Fatalf("dead letters %+v", dead)
	}
	checkViews(t, e, map[string]int64{"p1": 2})
	if _, _, exists := e.TTL(MarkerID("b")); exists {
		t.Fatal("the refused event left its marker")
	}
}

func TestMarkerID(t *testing.T) {
	long := strings.Repeat("x", 250)
	for _, id := range []string{"a", "#a", long, long + "y"} {
		m := MarkerID(id)
		if err := contract.ValidateID(m); err != nil {
			t.Errorf("MarkerID(%q) = %q: %v", id, m, err)
		}
	}
	if MarkerID(long) == MarkerID(long+"y") || MarkerID("#a") == MarkerID("a") {
		t.Error("distinct ids share a marker")
	}
}

// TestApplyGroups: the groups of a poll (partitions) share engine batches;
// an event copied across partitions counts once, each group gets its own
// dead letters, and each partition's progress counter its last offset.
func TestApplyGroups(t *testing.T) {
	a, e := newApplier(t, 1000)
	ev := func(part int32, off int64, id, post string) stream.Record {
		return stream.Record{Partition: part, Offset: off, Value: []byte(`{"id":"` + id + `","type":"view","ts":1,"post":"` + post + `","user":"u","country":"de"}`)}
	}
	groups := [][]stream.Record{
		{ev(0, 10, "a", "p1"), ev(0, 11, "b", "p2"), ev(0, 12, "c", "p1")},
		{ev(1, 20, "b", "p2"), {Partition: 1, Offset: 21, Value: []byte(`{"id":"d","type":"view","ts":1}`)}, ev(1, 22, "e", "p2")},
	}
	dead, err := a.ApplyGroups(context.Background(), "test", groups)
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 2 || len(dead[0]) != 0 || len(dead[1]) != 1 || dead[1][0].Record.Offset != 21 {
		t.Fatalf("dead letters %+v", dead)
	}
	checkViews(t, e, map[string]int64{"p1": 2, "p2": 2})
	for part, want := range map[int32]int64{0: 12, 1: 22} {
		if v, err := e.Get(ProgressID("test", part)); err != nil || v.Value != want {
			t.Errorf("progress of partition %d = %d (%v), want %d", part, v.Value, err, want)
		}
	}
}

// TestKindConflictDeadLettersOnlyTheEventsInvolved: two rules whose
// templates can name the same counter with different kinds (an add and a
// pfadd). The first op on a counter gives it its kind, as applying the
// events one by one would; only the events that then ask for another kind
// are dead-lettered, each naming its rule and the kind the counter has;
// every other event of the batch applies.
func TestKindConflictDeadLettersOnlyTheEventsInvolved(t *testing.T) {
	cfg := engine.DefaultConfig()
	cfg.InMemory = true
	e, err := engine.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	rs, err := rules.Load("rules.yaml", []byte(`rules:
  - name: likes
    filter: event.type == "like"
    counter: '"x:" + event.post'
    add: "1"
  - name: viewers
    filter: event.type == "view"
    counter: '"x:" + event.target'
    pfadd: event.user
`))
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewApplier(engine.Local(e), rs, event.Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var recs []stream.Record
	for i, js := range []string{
		`{"id":"1","type":"like","ts":1,"post":"8"}`,
		`{"id":"2","type":"view","ts":1,"target":"8","user":"u"}`, // x:8 is a counter by now
		`{"id":"3","type":"like","ts":1,"post":"8"}`,
		`{"id":"4","type":"view","ts":1,"target":"9","user":"u"}`,
		`{"id":"5","type":"like","ts":1,"post":"9"}`, // x:9 is an hll by now
		`{"id":"6","type":"like","ts":1,"post":"10"}`,
		`{"id":"7","type":"view","ts":1,"target":"9","user":"v"}`,
	} {
		recs = append(recs, stream.Record{Offset: int64(i), Value: []byte(js)})
	}
	dead, err := a.Apply(context.Background(), "test", recs)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]string{
		1: `rule "viewers": apply pfadd "x:8": engine: operation against a counter of the wrong kind: "x:8" is of kind counter; pfadd needs kind hll`,
		4: `rule "likes": apply add "x:9": engine: operation against a counter of the wrong kind: "x:9" is of kind hll; add needs an additive kind`,
	}
	if len(dead) != len(want) {
		t.Fatalf("dead letters %+v, want events at %v", dead, want)
	}
	for _, d := range dead {
		if !strings.HasPrefix(d.Reason, want[d.Record.Offset]) {
			t.Errorf("dead letter at %d: %q, want %q", d.Record.Offset, d.Reason, want[d.Record.Offset])
		}
	}
	for id, v := range map[string]int64{"x:8": 2, "x:9": 2, "x:10": 1} {
		got, err := e.Get(id)
		if err != nil || got.Value != v {
			t.Errorf("%s = %d (%v), want %d", id, got.Value, err, v)
		}
	}
}

// TestApplyScratchReleased: after ApplyGroups of a poll of several
// segments, the scratch the applier keeps for the next poll holds no
// reference to the poll's records, ids or items (its slices are zero up
// to their capacities), though segments reuse them without zeroing; and
// a second poll over the reused scratch counts exactly.
func TestApplyScratchReleased(t *testing.T) {
	a, e := newApplier(t, 1000)
	recs, views, _ := records(3*segmentEvents + 100)
	ctx := context.Background()
	half := len(recs) / 2
	for _, poll := range [][]stream.Record{recs[:half], recs[half:]} {
		if _, err := a.ApplyGroups(ctx, "test", [][]stream.Record{poll}); err != nil {
			t.Fatal(err)
		}
		s := a.kept.Load()
		if s == nil {
			t.Fatal("no scratch kept")
		}
		if cap(s.arena) == 0 || cap(s.evs) == 0 || cap(s.c.ops) == 0 || cap(s.c.marks) == 0 {
			t.Fatalf("scratch not used: arena %d evs %d ops %d marks %d", cap(s.arena), cap(s.evs), cap(s.c.ops), cap(s.c.marks))
		}
		zero := func(name string, n int, isZero func(i int) bool) {
			for i := range n {
				if !isZero(i) {
					t.Fatalf("%s[%d] of %d not zero after the poll", name, i, n)
				}
			}
		}
		zero("arena", cap(s.arena), func(i int) bool {
			h := s.arena[:cap(s.arena)][i]
			return h.Rule == nil && h.Op.ID == "" && h.Op.Items == nil
		})
		zero("evs", cap(s.evs), func(i int) bool { p := s.evs[:cap(s.evs)][i]; return p.rec == nil && p.hits == nil && p.marker == "" })
		zero("markers", cap(s.markers), func(i int) bool { return s.markers[:cap(s.markers)][i] == "" })
		zero("ops", cap(s.c.ops), func(i int) bool {
			o := s.c.ops[:cap(s.c.ops)][i]
			return o.ID == "" && o.Items == nil && o.Fields == nil
		})
		zero("marks", cap(s.c.marks), func(i int) bool { return s.c.marks[:cap(s.c.marks)][i] == "" })
		zero("events", cap(s.c.events), func(i int) bool { return s.c.events[:cap(s.c.events)][i] == nil })
	}
	checkViews(t, e, views)
}
