package rules

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/pipeline/event"
	"github.com/counterd/counterd/internal/testutil/pipelinetest"
	"pgregory.net/rapid"
)

const example = `dedupe: 7d
rules:
  - name: views
    filter: event.type == "impression" && !event.?bot.orValue(false)
    counter: '"views:" + event.post'
    add: "1"
  - name: viewers
    filter: event.type == "impression"
    counter: '"viewers:" + event.post'
    pfadd: event.user
    rollup: {key: viewers, unique_days: 400d, unique_hours: 48h}
  - name: seconds
    counter: '"watch:" + event.post'
    hadd: {field: event.country, by: event.seconds}
  - name: recent
    filter: event.type == "impression"
    counter: '"recent:" + event.post'
    window: {granularity: 1m, span: 1h}
`

func mustEvent(t *testing.T, js string) *Input {
	t.Helper()
	e, err := event.Decode([]byte(js), event.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return NewInput(&e)
}

func TestLoadAndEval(t *testing.T) {
	s, err := Load("rules.yaml", []byte(example))
	if err != nil {
		t.Fatal(err)
	}
	if s.Dedupe != 7*24*time.Hour || len(s.Rules) != 4 {
		t.Fatalf("dedupe %v, %d rules", s.Dedupe, len(s.Rules))
	}
	if r := s.Rules[1]; r.RollupKey != "viewers" || r.Rollup.UniqueDays != 400*24*time.Hour {
		t.Fatalf("rollup %q %+v", r.RollupKey, r.Rollup)
	}
	hits, err := s.Eval(mustEvent(t, `{"id":"1","type":"impression","ts":1,"post":"p1","user":"u1","country":"de","seconds":12}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) != 4 {
		t.Fatalf("%d hits", len(hits))
	}
	want := []struct {
		t  contract.OpType
		id string
	}{{contract.OpAdd, "views:p1"}, {contract.OpPFAdd, "viewers:p1"}, {contract.OpHAdd, "watch:p1"}, {contract.OpAdd, "recent:p1"}}
	for i, w := range want {
		if hits[i].Op.Type != w.t || hits[i].Op.ID != w.id {
			t.Errorf("hit %d: %s %q, want %s %q", i, hits[i].Op.Type, hits[i].Op.ID, w.t, w.id)
		}
	}
	if hits[0].Op.Delta != 1 || string(hits[1].Op.Items[0]) != "u1" || hits[2].Op.Fields[0].Name != "de" || hits[2].Op.Fields[0].Delta != 12 {
		t.Errorf("ops %+v", hits)
	}
	if hits[3].Op.Kind != contract.KindWindow || hits[3].Op.Window.Span != time.Hour {
		t.Errorf("window op %+v", hits[3].Op)
	}

	// A bot matches neither views nor (with a wrong type) anything.
	hits, err = s.Eval(mustEvent(t, `{"id":"2","type":"click","ts":1,"post":"p1","user":"u1","country":"de","seconds":1,"bot":true}`), nil)
	if err != nil || len(hits) != 1 || hits[0].Rule.Name != "seconds" {
		t.Fatalf("click: %v %v", hits, err)
	}
	// A missing attribute is an evaluation error naming the rule.
	_, err = s.Eval(mustEvent(t, `{"id":"3","type":"impression","ts":1,"user":"u1"}`), nil)
	if !errors.Is(err, ErrEval) || !strings.Contains(err.Error(), `rule "views" counter`) {
		t.Fatalf("missing post: %v", err)
	}
	// A counter id the engine refuses is an evaluation error too.
	_, err = s.Eval(mustEvent(t, `{"id":"4","type":"impression","ts":1,"post":"\u0001","user":"u","country":"de","seconds":1}`), nil)
	if !errors.Is(err, ErrEval) {
		t.Fatalf("control character id: %v", err)
	}
}

func TestLoadErrors(t *testing.T) {
	f := func(name, file, want string) {
		t.Run(name, func(t *testing.T) {
			_, err := Load("r.yaml", []byte(file))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
				t.Fatalf("err = %v, want it to contain %q", err, want)
			}
		})
	}
	f("syntax", "rules:\n  - name: a\n    counter: '\"x\" +'\n    add: '1'\n", "r.yaml:3: rule \"a\" counter: ERROR")
	f("undeclared", "rules:\n  - name: a\n    counter: '\"x\"'\n    filter: evnt.type == 'x'\n    add: '1'\n", "r.yaml:4: rule \"a\" filter: ERROR: <input>:1:1: undeclared reference to 'evnt'")
	f("filter type", "rules:\n  - counter: '\"x\"'\n    filter: '1 + 2'\n    add: '1'\n", "r.yaml:3: rule \"\" filter: expression is int, want bool")
	f("add type", "rules:\n  - counter: '\"x\"'\n    add: '\"one\"'\n", "r.yaml:3: rule \"\" add: expression is string, want int")
	f("two ops", "rules:\n  - counter: '\"x\"'\n    add: '1'\n    pfadd: event.user\n", "r.yaml:2: rule \"\" needs exactly one operation")
	f("no counter", "rules:\n  - add: '1'\n", "r.yaml:2: rule \"\" has no counter")
	f("no rules", "dedupe: 1h\n", "no rules")
	f("bad dedupe", "dedupe: forever\nrules:\n  - counter: '\"x\"'\n    add: '1'\n", "r.yaml:1: dedupe")
	f("bad window", "rules:\n  - counter: '\"x\"'\n    window: {granularity: 7s, span: 1m}\n", "r.yaml:3: rule \"\" window")
	f("rollup key", "rules:\n  - counter: '\"x\"'\n    pfadd: event.user\n    rollup: {unique_days: 30d}\n", "r.yaml:4: rule \"\" rollup needs a key")
	f("rollup member", "rules:\n  - counter: '\"x\"'\n    pfadd: event.user\n    rollup: {key: x, weeks: 3}\n", "r.yaml:4: rule \"\" rollup: unknown member \"weeks\"")
	f("duplicate name", "rules:\n  - name: a\n    counter: '\"x\"'\n    add: '1'\n  - name: a\n    counter: '\"y\"'\n    add: '1'\n", "r.yaml:5: rule name \"a\" used twice")
	f("unknown member", "rules:\n  - counter: '\"x\"'\n    add: '1'\n    flter: 'true'\n", "r.yaml:4: rule \"\": unknown member \"flter\"")
	f("not yaml", "rules: [", "r.yaml")
	f("rule not a mapping", "rules:\n  - 3\n", "r.yaml:2: a rule must be a mapping")
}

// FuzzLoad: any file loads or fails with ErrInvalid naming the file; a
// loaded set evaluates a sample event without panicking, with every op
// valid or an ErrEval error.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(example))
	f.Add([]byte("rules:\n  - counter: '\"x:\" + event.id'\n    add: event.ts\n"))
	f.Add([]byte("rules:\n  - counter: 'event.id'\n    hadd: {field: 'event.type', by: '2'}\n    rollup: {key: a, minute: 1h}\n"))
	f.Add([]byte("dedupe: 1h\nrules:\n  - filter: '[1,2,3].all(x, x > 0)'\n    counter: '\"w\"'\n    window: {granularity: 1s, span: 1m, fixed: true}\n"))
	ev := event.NewEvent("e1", "impression", 5, map[string]any{"post": "p", "user": "u", "n": 3.0})
	in := NewInput(&ev)
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Load("f.yaml", data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "f.yaml") {
				t.Fatalf("error %v is not ErrInvalid naming the file", err)
			}
			return
		}
		hits, err := s.Eval(in, nil)
		if err != nil {
			if !errors.Is(err, ErrEval) {
				t.Fatalf("eval error %v is not ErrEval", err)
			}
			return
		}
		for _, h := range hits {
			if err := h.Op.Validate(contract.Limits{}); err != nil {
				t.Fatalf("rule %s made an invalid op: %v", h.Rule.Name, err)
			}
		}
	})
}

// TestInputMap: the event variable behaves as a CEL map whatever an
// expression asks of it, though its attributes are decoded on demand.
func TestInputMap(t *testing.T) {
	env, err := newEnv()
	if err != nil {
		t.Fatal(err)
	}
	in := mustEvent(t, `{"id":"e1","type":"impression","ts":5,"post":"p","n":3,"f":2.5,"o":{"k":[1,"x"]},"b":false}`)
	for _, src := range []string{
		`event.post == "p" && event.n == 3 && event.f == 2.5 && event.ts == 5`,
		`has(event.post) && !has(event.nope)`,
		`event.?nope.orValue(7) == 7 && event.?n.orValue(0) == 3`,
		`"post" in event && !("nope" in event)`,
		`event["type"] == "impression"`,
		`size(event) == 8`,
		`event.exists(k, k == "o") && event.all(k, k != "")`,
		`event.o.k[0] == 1 && event.o.k[1] == "x"`,
		`!event.b`,
		`event == {"id":"e1","type":"impression","ts":5,"post":"p","n":3,"f":2.5,"o":{"k":[1,"x"]},"b":false}`,
	} {
		ast, iss := env.Compile(src)
		if iss.Err() != nil {
			t.Fatalf("%s: %v", src, iss.Err())
		}
		p, err := env.Program(ast)
		if err != nil {
			t.Fatal(err)
		}
		for _, prog := range []*program{{cel: p}, newProgram("", ast, p)} {
			ok, err := evalBool(prog, in)
			if err != nil || !ok {
				t.Errorf("%s (fast path %v) = %v, %v", src, prog.fast != nil, ok, err)
			}
		}
	}
}

// TestLoadReportsEveryError: a file with several mistakes is refused with
// all of them, each with its line, not only the first.
func TestLoadReportsEveryError(t *testing.T) {
	_, err := Load("r.yaml", []byte(`rules:
  - name: a
    counter: '"x" +'
    add: '1'
  - name: b
    counter: '"y"'
    filter: event.likes
    add: '"one"'
  - name: c
    counter: '"z"'
    add: '1'
    flter: 'true'
  - name: e
    counter: '"v"'
    add: '1'
  - name: e
    counter: '"w"'
    add: '1'
`))
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("err = %v, want ErrInvalid", err)
	}
	for _, want := range []string{
		"5 errors:",
		`r.yaml:3: rule "a" counter: ERROR`,
		`r.yaml:7: rule "b" filter: expression is dyn, want bool`,
		`r.yaml:8: rule "b" add: expression is string, want int`,
		`r.yaml:12: rule "c": unknown member "flter"`,
		`r.yaml:16: rule name "e" used twice`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v\nwant it to contain %q", err, want)
		}
	}
}

// TestLoadKindConflict: two rules that always name the same counter (the
// same template) with ops of different kinds are refused at load, naming
// both; the same template with ops of one kind loads, and different
// templates load (they meet at run time only, where the events involved
// are dead-lettered).
func TestLoadKindConflict(t *testing.T) {
	f := func(ops ...string) error {
		var b strings.Builder
		b.WriteString("rules:\n")
		for i, op := range ops {
			fmt.Fprintf(&b, "  - name: r%d\n    counter: '\"x:\" + event.post'\n    %s\n", i, op)
		}
		_, err := Load("r.yaml", []byte(b.String()))
		return err
	}
	err := f("add: '1'", "pfadd: event.user")
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `r.yaml:5: rule "r1" makes counter "x:" + event.post a hll, but rule "r0" (line 2) makes it a counter`) {
		t.Fatalf("add and pfadd: %v", err)
	}
	err = f("window: {granularity: 1s, span: 1m}", "window: {granularity: 1m, span: 1h}")
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "makes it a window (granularity 1s, span 1m0s)") {
		t.Fatalf("two windows: %v", err)
	}
	if err := f("add: '1'", "add: '2'"); err != nil {
		t.Fatalf("two adds: %v", err)
	}
	if _, err := Load("r.yaml", []byte("rules:\n  - counter: '\"x:\" + event.post'\n    add: '1'\n  - counter: '\"x:\" + event.target'\n    pfadd: event.user\n")); err != nil {
		t.Fatalf("different templates: %v", err)
	}
}

// TestFilterMustBeBool: a filter on an attribute of unknown type is
// refused at load; compared, it loads.
func TestFilterMustBeBool(t *testing.T) {
	for src, ok := range map[string]bool{
		"event.likes":                          false,
		"event.likes == true":                  true,
		"event.type == 'x' && event.likes > 0": true,
		"!event.?bot.orValue(false)":           true,
		"event.?bot.orValue(false)":            false,
		"bool(event.likes)":                    true,
		"event.type":                           false,
	} {
		_, err := Load("r.yaml", []byte("rules:\n  - counter: '\"x\"'\n    filter: \""+src+"\"\n    add: '1'\n"))
		if (err == nil) != ok {
			t.Errorf("filter %s: %v, want loaded %v", src, err, ok)
		}
	}
}

// TestOneItem: oneItem(s) holds exactly s, short or long; a short one is
// clipped (an append to it copies it first, not writing past it).
func TestOneItem(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.StringN(0, 40, -1).Draw(t, "s")
		items := oneItem(s)
		if len(items) != 1 || string(items[0]) != s || cap(items) != 1 || (len(s) <= 24 && cap(items[0]) != len(s)) {
			t.Fatalf("oneItem(%q) = %q (caps %d, %d)", s, items, cap(items), cap(items[0]))
		}
	})
}

// TestCounterIDsAppended: counter ids and pfadd items built by the
// append path (fastAppend) are those of the expressions: from plain and
// escaped attributes, short and long items, and an invalid id or a
// declined value refused with the error of evaluating afresh.
func TestCounterIDsAppended(t *testing.T) {
	s, err := Load("rules.yaml", []byte(`rules:
  - name: views
    counter: '"views:" + event.post'
    add: "1"
  - name: viewers
    counter: '"viewers:" + event.post'
    pfadd: event.user
`))
	if err != nil {
		t.Fatal(err)
	}
	var e event.Event
	in := NewInput(&e)
	eval := func(js string) ([]Hit, error) {
		t.Helper()
		if err := event.DecodeInto(&e, []byte(js), event.Limits{}); err != nil {
			t.Fatal(err)
		}
		in.Reset(&e)
		return s.Eval(in, nil)
	}
	for _, c := range []struct{ js, id, item string }{
		{`{"id":"a","type":"t","ts":1,"post":"p1","user":"u1"}`, "views:p1", "u1"},
		{`{"id":"b","type":"t","ts":1,"user":"u2","post":"p\u0031"}`, "views:p1", "u2"},
		{`{"id":"c","type":"t","ts":1,"post":"p2","user":"a very long user name, longer than 24 bytes"}`, "views:p2", "a very long user name, longer than 24 bytes"},
		{`{"id":"d","type":"t","ts":1,"post":"\u00e9","user":"\u00e9"}`, "views:\u00e9", "\u00e9"},
	} {
		hits, err := eval(c.js)
		if err != nil || len(hits) != 2 || hits[0].Op.ID != c.id || hits[1].Op.ID != "viewers:"+c.id[6:] || string(hits[1].Op.Items[0]) != c.item {
			t.Fatalf("%s: %v %v", c.js, hits, err)
		}
	}
	for _, post := range []string{"\"p\x7f\"", `"p\u0001"`, `1`, `null`} {
		js := `{"id":"d","type":"t","ts":1,"post":` + post + `,"user":"u"}`
		_, err := eval(js)
		var fresh event.Event
		_ = event.DecodeInto(&fresh, []byte(js), event.Limits{})
		_, want := s.Eval(NewInput(&fresh), nil)
		if err == nil || want == nil || err.Error() != want.Error() {
			t.Errorf("post %s: error %v, afresh %v", post, err, want)
		}
	}
}

// TestEvalAllocs: the consume-cost rules (pipelinetest.CostRules) on an
// impression, with the consumer's reused Input and hits, allocate only
// the three counter ids when they are new: no string of an attribute
// first, no concatenation in between, the pfadd item cut from a slab;
// and next to nothing when the event names counters the Input built
// before (a stream names the same counters again and again): the ids are
// the strings built the first time (idCache).
func TestEvalAllocs(t *testing.T) {
	s, err := Load("rules.yaml", []byte(pipelinetest.CostRules))
	if err != nil {
		t.Fatal(err)
	}
	const runs = 1000
	evs := make([]event.Event, runs+1) // AllocsPerRun runs once more first
	for i := range evs {
		js := fmt.Appendf(nil, `{"id":"c1","type":"impression","ts":1,"post":"p%d","user":"u%d","country":"c1"}`, i, i)
		if err := event.DecodeInto(&evs[i], js, event.Limits{}); err != nil {
			t.Fatal(err)
		}
	}
	hits := make([]Hit, 0, 8)
	for _, c := range []struct {
		fresh bool // every event names new counters
		most  float64
	}{{true, 3.1}, {false, 0.1}} {
		in := NewInput(&evs[0])
		n := 0
		allocs := testing.AllocsPerRun(runs, func() {
			in.Reset(&evs[n])
			if c.fresh {
				n++
			}
			if hits, err = s.Eval(in, hits[:0]); err != nil || len(hits) != 3 {
				t.Fatal(hits, err)
			}
		})
		if allocs > c.most {
			t.Errorf("new counters %v: %v allocations an event, want at most %v", c.fresh, allocs, c.most)
		}
	}
}
