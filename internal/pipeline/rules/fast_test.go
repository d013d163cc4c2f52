package rules

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"pgregory.net/rapid"

	"github.com/counterd/counterd/internal/pipeline/event"
)

// genExpr draws a CEL expression of the fast path's subset and, now and
// then, something outside it (a comparison, arithmetic, a list), over
// attributes that may be missing or of any JSON type.
func genExpr(t *rapid.T, depth int) string {
	names := []string{"id", "type", "ts", "post", "user", "n", "b", "f", "o", "nope"}
	name := func() string { return rapid.SampledFrom(names).Draw(t, "name") }
	lit := func() string {
		return rapid.SampledFrom([]string{`"p"`, `"impression"`, `""`, `"e1"`, `1`, `0`, `3`, `true`, `false`, `2.5`, `null`}).Draw(t, "lit")
	}
	if depth <= 0 || rapid.IntRange(0, 3).Draw(t, "leaf") == 0 {
		switch rapid.IntRange(0, 4).Draw(t, "atom") {
		case 0:
			return "event." + name()
		case 1:
			return lit()
		case 2:
			return "has(event." + name() + ")"
		case 3:
			return "event.?" + name() + ".orValue(" + lit() + ")"
		default:
			return `event["` + name() + `"]` // outside the subset
		}
	}
	sub := func() string { return genExpr(t, depth-1) }
	switch rapid.IntRange(0, 8).Draw(t, "op") {
	case 0:
		return "(" + sub() + " == " + sub() + ")"
	case 1:
		return "(" + sub() + " != " + sub() + ")"
	case 2:
		return "(" + sub() + " + " + sub() + ")"
	case 3:
		return "(" + sub() + " && " + sub() + ")"
	case 4:
		return "(" + sub() + " || " + sub() + ")"
	case 5:
		return "!" + sub()
	case 6:
		return "(" + sub() + " < " + sub() + ")" // outside the subset
	case 7:
		return "[" + sub() + "][0]" // outside the subset
	default:
		return "string(" + sub() + ")" // outside the subset
	}
}

// genEvent draws an event whose attributes are of every JSON type, or
// missing.
func genEvent(t *rapid.T) string {
	vals := []string{`"p"`, `"impression"`, `""`, `"e1"`, `"\u00e9t\u00e9"`, `"a\"b"`, "\"a\x7f\"", `1`, `0`, `3`, `-7`, `2.5`, `1e3`, `true`, `false`, `null`, `[1,"x"]`, `{"k":1}`}
	var b strings.Builder
	fmt.Fprintf(&b, `{"id":%s,"type":%s,"ts":%d`,
		rapid.SampledFrom([]string{`"e1"`, `"p"`}).Draw(t, "id"),
		rapid.SampledFrom([]string{`"impression"`, `"click"`}).Draw(t, "type"),
		rapid.IntRange(0, 10).Draw(t, "ts"))
	for _, n := range []string{"post", "user", "n", "b", "f", "o"} {
		if rapid.Bool().Draw(t, "has "+n) {
			fmt.Fprintf(&b, `,%q:%s`, n, rapid.SampledFrom(vals).Draw(t, n))
		}
	}
	b.WriteString("}")
	return b.String()
}

// TestFastMatchesCEL: wherever the fast path answers, it answers what
// CEL does; where it declines, eval runs CEL. So an expression evaluated
// with the fast path gives exactly CEL's value or error.
func TestFastMatchesCEL(t *testing.T) {
	env, err := newEnv()
	if err != nil {
		t.Fatal(err)
	}
	answered := 0
	rapid.Check(t, func(t *rapid.T) {
		src := genExpr(t, 3)
		ast, iss := env.Compile(src)
		if iss.Err() != nil {
			return // does not type-check: Load refuses it
		}
		p, err := env.Program(ast, cel.EvalOptions(cel.OptOptimize))
		if err != nil {
			return // a constant that fails (string(null)): Load refuses it
		}
		celOnly, withFast := &program{cel: p}, newProgram("", ast, p)
		for range 5 {
			js := genEvent(t)
			e, err := event.Decode([]byte(js), event.Limits{})
			if err != nil {
				t.Fatalf("%s: %v", js, err)
			}
			want, werr := eval(celOnly, NewInput(&e))
			got, gerr := eval(withFast, NewInput(&e))
			if withFast.fast != nil {
				if _, ok := withFast.fast(NewInput(&e)); ok {
					answered++
				}
			}
			// The string fast path, where there is one, too.
			ws, wserr := evalString(celOnly, NewInput(&e))
			gs, gserr := evalString(withFast, NewInput(&e))
			if ws != gs || (wserr != nil) != (gserr != nil) || wserr != nil && wserr.Error() != gserr.Error() {
				t.Fatalf("%s on %s: evalString CEL %q, %v; fast path %q, %v", src, js, ws, wserr, gs, gserr)
			}
			// The appending fast path: CEL's string where it answers, on
			// a fresh Input and on one whose attributes str decoded.
			if withFast.app != nil {
				in := NewInput(&e)
				for round := range 2 {
					b, ok := withFast.app(in, []byte("x"))
					if ok && (wserr != nil || string(b) != "x"+ws) {
						t.Fatalf("%s on %s (round %d): append path %q, CEL %q, %v", src, js, round, b, ws, wserr)
					}
					_, _ = evalString(withFast, in)
				}
			}
			switch {
			case (werr != nil) != (gerr != nil):
				t.Fatalf("%s on %s: CEL %v, %v; fast path %v, %v", src, js, want, werr, got, gerr)
			case werr != nil && werr.Error() != gerr.Error():
				t.Fatalf("%s on %s: CEL error %q, fast path %q", src, js, werr, gerr)
			case werr == nil && (want.Type() != got.Type() || want.Equal(got) != types.True):
				t.Fatalf("%s on %s: CEL %v (%s), fast path %v (%s)", src, js, want, want.Type().TypeName(), got, got.Type().TypeName())
			}
		}
	})
	if answered == 0 {
		t.Fatal("the fast path answered no expression")
	}
}

// TestFastCoversTheExamples: the documented rules' expressions take the
// fast path (the subset is what rules are written in).
func TestFastCoversTheExamples(t *testing.T) {
	rs, err := Load("rules.yaml", []byte(example))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs.Rules {
		for what, p := range map[string]*program{"filter": r.filter, "counter": r.id, "by": r.by, "item": r.item, "field": r.field} {
			if p != nil && p.fast == nil {
				t.Errorf("rule %s %s: no fast path", r.Name, what)
			}
		}
	}
}
