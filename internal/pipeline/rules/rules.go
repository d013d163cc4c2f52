// Package rules maps events to counter operations. A rules file is YAML
// with CEL expressions (github.com/google/cel-go); each rule has a filter,
// a counter id template, one operation and optionally a rollup spec to
// attach:
//
//	dedupe: 24h                  # how long an event id is remembered
//	rules:
//	  - name: viewers
//	    filter: event.type == "impression" && !event.?bot.orValue(false)
//	    counter: '"viewers:" + event.post'
//	    pfadd: event.user         # or add: EXPR, hadd: {field: EXPR, by: EXPR}, window: {...}
//	    rollup: {key: viewers, unique_days: 400d}
//
// Expressions see one variable, event: a map with "id", "type", "ts" (Unix
// milliseconds) and the event's attributes. Load compiles and type-checks
// every expression and refuses a bad file with the line of the bad member
// and the CEL error. Eval runs the compiled programs; an expression that
// fails on an event (a missing attribute, a wrong type, an invalid counter
// id) is an error that names the rule, and the caller dead-letters the
// event. A Set is immutable and safe for concurrent use.
package rules

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"go.yaml.in/yaml/v3"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/pipeline/event"
	"github.com/counterd/counterd/internal/rollup"
)

// Sentinel errors.
var (
	// ErrInvalid: a rules file that does not load. The message names the line.
	ErrInvalid = errors.New("rules: invalid rules file")
	// ErrEval: an expression failed on an event.
	ErrEval = errors.New("rules: evaluation failed")
)

// MaxRules bounds the rules of one file; MaxExprLen one expression.
// Rules are the operator's, not the event senders': evaluation runs
// without CEL's runtime cost tracking (a fifth of the consumer's CPU), and
// what an event can make a rule do is bounded by event.Limits.
const (
	MaxRules   = 1000
	MaxExprLen = 4096
)

// DefaultDedupe is how long an event id is remembered when the file does
// not say.
const DefaultDedupe = 24 * time.Hour

// Rule is one compiled rule.
type Rule struct {
	Name string
	Line int
	Op   contract.OpType // OpAdd (also for window counters), OpPFAdd or OpHAdd
	// Window, for window rules: the counter's granularity and span.
	Window counter.WindowSpec
	// RollupKey and Rollup, when RollupKey is not empty: the spec the
	// pipeline attaches to that namespace or id (contract.SetRollup).
	RollupKey string
	Rollup    rollup.Spec

	filter, id, by, item, field *program // nil: absent

	idx int // its place in its Set (Input.idCache)
}

// Set is a loaded rules file.
type Set struct {
	Rules  []*Rule
	Dedupe time.Duration // how long event ids are remembered (default DefaultDedupe)
}

type fileYAML struct {
	Dedupe string      `yaml:"dedupe"`
	Rules  []yaml.Node `yaml:"rules"`
}

type ruleYAML struct {
	Name    string            `yaml:"name"`
	Filter  string            `yaml:"filter"`
	Counter string            `yaml:"counter"`
	Add     string            `yaml:"add"`
	PFAdd   string            `yaml:"pfadd"`
	HAdd    *hashYAML         `yaml:"hadd"`
	Window  *windowYAML       `yaml:"window"`
	Rollup  map[string]string `yaml:"rollup"`
}

type hashYAML struct {
	Field string `yaml:"field"`
	By    string `yaml:"by"`
}

type windowYAML struct {
	Granularity string `yaml:"granularity"`
	Span        string `yaml:"span"`
	Fixed       bool   `yaml:"fixed"`
	By          string `yaml:"by"`
}

// newEnv is the CEL environment every rules file compiles in (built once;
// a cel.Env is safe for concurrent use).
var newEnv = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(cel.Variable("event", cel.MapType(cel.StringType, cel.DynType)), cel.OptionalTypes())
})

// Load parses and compiles a rules file. name prefixes error messages
// ("rules.yaml:12: ...").
func Load(name string, data []byte) (*Set, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, name, err)
	}
	if len(root.Content) == 0 {
		return nil, fmt.Errorf("%w: %s: empty file", ErrInvalid, name)
	}
	doc := root.Content[0]
	var f fileYAML
	if err := doc.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, name, err)
	}
	if err := checkKeys(doc, "rules file", "dedupe", "rules"); err != nil {
		return nil, fmt.Errorf("%w: %s:%v", ErrInvalid, name, err)
	}
	set := &Set{Dedupe: DefaultDedupe}
	if f.Dedupe != "" {
		d, err := rollup.ParseRetention(f.Dedupe)
		if err != nil || d <= 0 || d > contract.MaxTTL {
			return nil, fmt.Errorf("%w: %s:%d: dedupe %q: want a positive duration up to %v", ErrInvalid, name, line(doc, "dedupe"), f.Dedupe, contract.MaxTTL)
		}
		set.Dedupe = d
	}
	if len(f.Rules) == 0 {
		return nil, fmt.Errorf("%w: %s:%d: no rules", ErrInvalid, name, doc.Line)
	}
	if len(f.Rules) > MaxRules {
		return nil, fmt.Errorf("%w: %s: %d rules, at most %d", ErrInvalid, name, len(f.Rules), MaxRules)
	}
	env, err := newEnv()
	if err != nil {
		return nil, fmt.Errorf("rules: CEL environment: %w", err)
	}
	// Every mistake of the file is reported at once, each with its line.
	var errs []string
	names := map[string]bool{}
	for i := range f.Rules {
		n := &f.Rules[i]
		r, rerrs := compile(env, n)
		for _, e := range rerrs {
			errs = append(errs, fmt.Sprintf("%s:%v", name, e))
		}
		if r == nil {
			continue
		}
		if r.Name == "" {
			r.Name = "rule" + strconv.Itoa(i+1)
		}
		if names[r.Name] {
			errs = append(errs, fmt.Sprintf("%s:%d: rule name %q used twice", name, n.Line, r.Name))
		}
		names[r.Name] = true
		r.idx = len(set.Rules)
		set.Rules = append(set.Rules, r)
	}
	errs = append(errs, kindConflicts(name, set.Rules)...)
	switch len(errs) {
	case 0:
		return set, nil
	case 1:
		return nil, fmt.Errorf("%w: %s", ErrInvalid, errs[0])
	}
	return nil, fmt.Errorf("%w: %d errors:\n%s", ErrInvalid, len(errs), strings.Join(errs, "\n"))
}

// kind is what a rule's op makes of its counter: its kind, and for a
// window rule its spec.
func (r *Rule) kind() (contract.Kind, counter.WindowSpec) {
	switch {
	case r.Window.Span > 0:
		return contract.KindWindow, r.Window
	case r.Op == contract.OpPFAdd:
		return contract.KindHLL, counter.WindowSpec{}
	case r.Op == contract.OpHAdd:
		return contract.KindHash, counter.WindowSpec{}
	}
	return contract.KindCounter, counter.WindowSpec{}
}

// kindConflicts reports rules whose counter expressions are the same (so
// they always name the same counter) but whose ops need different kinds,
// or window rules of different spans on one counter: one of them would
// fail on every event. Expressions that differ may still meet at run time;
// then only the events involved fail, with the counter's kind as reason.
func kindConflicts(file string, rs []*Rule) []string {
	type first struct {
		r    *Rule
		kind contract.Kind
		win  counter.WindowSpec
	}
	seen := map[string]first{}
	var errs []string
	for _, r := range rs {
		k, w := r.kind()
		key := strings.Join(strings.Fields(r.id.src), " ")
		f, ok := seen[key]
		if !ok {
			seen[key] = first{r, k, w}
			continue
		}
		if f.kind != k || f.win != w {
			errs = append(errs, fmt.Sprintf("%s:%d: rule %q makes counter %s a %s, but rule %q (line %d) makes it a %s",
				file, r.Line, r.Name, r.id.src, kindText(k, w), f.r.Name, f.r.Line, kindText(f.kind, f.win)))
		}
	}
	return errs
}

func kindText(k contract.Kind, w counter.WindowSpec) string {
	if k == contract.KindWindow {
		return fmt.Sprintf("window (granularity %v, span %v)", w.Granularity, w.Span)
	}
	return k.String()
}

// line returns the line of member key of the mapping node n (n's own
// line when absent).
func line(n *yaml.Node, key string) int {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				return n.Content[i+1].Line
			}
		}
	}
	return n.Line
}

// checkKeys refuses members of the mapping n that are not in known (a
// misspelt "flter" would otherwise make a rule match everything).
func checkKeys(n *yaml.Node, what string, known ...string) error {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
next:
	for i := 0; i+1 < len(n.Content); i += 2 {
		for _, k := range known {
			if n.Content[i].Value == k {
				continue next
			}
		}
		return fmt.Errorf("%d: %s: unknown member %q", n.Content[i].Line, what, n.Content[i].Value)
	}
	return nil
}

// sub returns the mapping member key of n, or nil.
func sub(n *yaml.Node, key string) *yaml.Node {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				return n.Content[i+1]
			}
		}
	}
	return nil
}

// compile compiles one rule; it returns every mistake found in it (and
// a nil rule when there is one), each "line: message".
func compile(env *cel.Env, n *yaml.Node) (*Rule, []error) {
	var y ruleYAML
	if n.Kind != yaml.MappingNode {
		return nil, []error{fmt.Errorf("%d: a rule must be a mapping", n.Line)}
	}
	if err := n.Decode(&y); err != nil {
		return nil, []error{fmt.Errorf("%d: %v", n.Line, err)}
	}
	r := &Rule{Name: y.Name, Line: n.Line}
	var errs []error
	fail := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	fail(checkKeys(n, "rule "+strconv.Quote(y.Name), "name", "filter", "counter", "add", "pfadd", "hadd", "window", "rollup"))
	fail(checkKeys(sub(n, "hadd"), "hadd", "field", "by"))
	fail(checkKeys(sub(n, "window"), "window", "granularity", "span", "fixed", "by"))
	if y.Name != "" {
		if err := event.ValidateText(y.Name); err != nil {
			fail(fmt.Errorf("%d: rule name %v", line(n, "name"), err))
		}
	}
	prog := func(node *yaml.Node, key, src string, want *cel.Type) *program {
		ln := line(node, key)
		if len(src) > MaxExprLen {
			fail(fmt.Errorf("%d: rule %q %s: expression longer than %d bytes", ln, y.Name, key, MaxExprLen))
			return nil
		}
		ast, iss := env.Compile(src)
		if iss.Err() != nil {
			fail(fmt.Errorf("%d: rule %q %s: %v", ln, y.Name, key, iss.Err()))
			return nil
		}
		out := ast.OutputType()
		switch {
		case out.IsExactType(want):
		case want.IsExactType(cel.BoolType):
			// A filter must be a condition: an attribute of unknown type
			// (dyn) would fail at run time on every event where it is not
			// a bool.
			fail(fmt.Errorf("%d: rule %q %s: expression is %s, want bool (compare it, as in event.likes == true or event.likes > 0)", ln, y.Name, key, out))
			return nil
		case !out.IsExactType(cel.DynType):
			fail(fmt.Errorf("%d: rule %q %s: expression is %s, want %s", ln, y.Name, key, out, want))
			return nil
		}
		p, err := env.Program(ast, cel.EvalOptions(cel.OptOptimize))
		if err != nil {
			fail(fmt.Errorf("%d: rule %q %s: %v", ln, y.Name, key, err))
			return nil
		}
		return newProgram(src, ast, p)
	}
	if y.Filter != "" {
		r.filter = prog(n, "filter", y.Filter, cel.BoolType)
	}
	if y.Counter == "" {
		fail(fmt.Errorf("%d: rule %q has no counter (an id template such as '\"views:\" + event.post')", n.Line, y.Name))
	} else {
		r.id = prog(n, "counter", y.Counter, cel.StringType)
	}
	ops := 0
	for _, set := range []bool{y.Add != "", y.PFAdd != "", y.HAdd != nil, y.Window != nil} {
		if set {
			ops++
		}
	}
	if ops != 1 {
		fail(fmt.Errorf("%d: rule %q needs exactly one operation of add, pfadd, hadd, window", n.Line, y.Name))
		return nil, errs
	}
	by := func(node *yaml.Node, src string) *program {
		if src == "" {
			return nil // by 1
		}
		return prog(node, "by", src, cel.IntType)
	}
	switch {
	case y.Add != "":
		r.Op = contract.OpAdd
		r.by = prog(n, "add", y.Add, cel.IntType)
	case y.PFAdd != "":
		r.Op = contract.OpPFAdd
		r.item = prog(n, "pfadd", y.PFAdd, cel.StringType)
	case y.HAdd != nil:
		r.Op = contract.OpHAdd
		hn := sub(n, "hadd")
		if y.HAdd.Field == "" {
			fail(fmt.Errorf("%d: rule %q hadd needs a field expression", hn.Line, y.Name))
		} else {
			r.field = prog(hn, "field", y.HAdd.Field, cel.StringType)
		}
		r.by = by(hn, y.HAdd.By)
	case y.Window != nil:
		r.Op = contract.OpAdd
		wn := sub(n, "window")
		g, gerr := time.ParseDuration(y.Window.Granularity)
		s, serr := time.ParseDuration(y.Window.Span)
		if gerr != nil || serr != nil {
			fail(fmt.Errorf("%d: rule %q window needs granularity and span as Go durations (1m, 1h)", wn.Line, y.Name))
		} else {
			r.Window = counter.WindowSpec{Granularity: g, Span: s, Fixed: y.Window.Fixed}
			probe := contract.Op{Type: contract.OpAdd, ID: "x", Kind: contract.KindWindow, Window: r.Window}
			if verr := probe.Validate(contract.Limits{}); verr != nil {
				fail(fmt.Errorf("%d: rule %q window: %v", wn.Line, y.Name, verr))
			}
		}
		r.by = by(wn, y.Window.By)
	}
	if y.Rollup != nil {
		fail(r.parseRollup(sub(n, "rollup"), y.Rollup))
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return r, nil
}

func (r *Rule) parseRollup(n *yaml.Node, m map[string]string) error {
	r.RollupKey = m["key"]
	if r.RollupKey == "" {
		return fmt.Errorf("%d: rule %q rollup needs a key (the namespace or id it applies to)", n.Line, r.Name)
	}
	if err := contract.ValidateID(r.RollupKey); err != nil {
		return fmt.Errorf("%d: rule %q rollup key: %v", line(n, "key"), r.Name, err)
	}
	r.Rollup = rollup.DefaultSpec()
	fields := map[string]*time.Duration{
		"minute": &r.Rollup.Minute, "hour": &r.Rollup.Hour, "day": &r.Rollup.Day, "month": &r.Rollup.Month,
		"unique_hours": &r.Rollup.UniqueHours, "unique_days": &r.Rollup.UniqueDays,
	}
	for k, v := range m {
		if k == "key" {
			continue
		}
		if k == "precision" {
			p, err := strconv.ParseUint(v, 10, 8)
			if err != nil {
				return fmt.Errorf("%d: rule %q rollup precision %q: %v", line(n, k), r.Name, v, err)
			}
			r.Rollup.Precision = uint8(p)
			continue
		}
		f, ok := fields[k]
		if !ok {
			return fmt.Errorf("%d: rule %q rollup: unknown member %q", line(n, k), r.Name, k)
		}
		d, err := rollup.ParseRetention(v)
		if err != nil {
			return fmt.Errorf("%d: rule %q rollup %s: %v", line(n, k), r.Name, k, err)
		}
		*f = d
	}
	if err := r.Rollup.Validate(); err != nil {
		return fmt.Errorf("%d: rule %q rollup: %v", n.Line, r.Name, err)
	}
	return nil
}

// Hit is one rule that matched an event, with the op it asks for.
type Hit struct {
	Rule *Rule
	Op   contract.Op
	// IDHash is HashID(Op.ID), which Eval had at hand: a caller keying
	// a table by counter id need not hash the id again.
	IDHash uint64
	// Aux, when not nil, is a word the caller may keep with Op.ID (a
	// property of the counter it looked up, say) for as long as the rule's
	// cache of the ids it built (the Input's) holds the id: the next hits
	// of the rule with that id get the same word, and a word the caller
	// never set (or that the id's slot lost to another id) is zero. Valid
	// until the next Eval on the same Input; the word is the Input's, so
	// whatever the caller keeps in it must tell the rule's op too (a
	// reloaded rules file may give another rule the same cache).
	Aux *uint64
}

// NewInput returns e's Input.
func NewInput(e *event.Event) *Input {
	in := &Input{}
	in.Reset(e)
	return in
}

// Eval appends to hits the rules that match in and the op of each. An
// error (wrapping ErrEval) names the rule and expression that failed; the
// event then has no effect at all.
func (s *Set) Eval(in *Input, hits []Hit) ([]Hit, error) {
	act := in
	start := len(hits)
	for _, r := range s.Rules {
		if r.filter != nil {
			ok, err := evalBool(r.filter, act)
			if err != nil {
				return hits[:start], fmt.Errorf("%w: rule %q filter: %v", ErrEval, r.Name, err)
			}
			if !ok {
				continue
			}
		}
		// The op is made in its place in hits: an Op is 248 bytes.
		hits = append(hits, Hit{Rule: r})
		if err := r.op(act, &hits[len(hits)-1]); err != nil {
			clear(hits[start:])
			return hits[:start], fmt.Errorf("%w: rule %q %v", ErrEval, r.Name, err)
		}
	}
	return hits, nil
}

// op sets h.Op (zero) to the op r asks of the event of act, and h.IDHash.
func (r *Rule) op(act *Input, h *Hit) error {
	op := &h.Op
	id, idh, aux, err := r.counterID(act)
	if err != nil {
		return fmt.Errorf("counter: %v", err)
	}
	op.Type, op.ID, h.IDHash, h.Aux = r.Op, id, idh, aux
	switch r.Op {
	case contract.OpAdd:
		if op.Delta, err = evalInt(r.by, act); err != nil {
			return fmt.Errorf("add: %v", err)
		}
		if r.Window.Span > 0 {
			op.Kind, op.Window = contract.KindWindow, r.Window
		}
	case contract.OpPFAdd:
		if op.Items = appendItem(r.item, act); op.Items != nil {
			break
		}
		item, err := evalString(r.item, act)
		if err != nil {
			return fmt.Errorf("pfadd: %v", err)
		}
		op.Items = oneItem(item)
	case contract.OpHAdd:
		field, err := evalString(r.field, act)
		if err != nil {
			return fmt.Errorf("hadd field: %v", err)
		}
		if len(field) > contract.MaxFieldLen {
			return fmt.Errorf("hadd field longer than %d bytes", contract.MaxFieldLen)
		}
		d, err := evalInt(r.by, act)
		if err != nil {
			return fmt.Errorf("hadd by: %v", err)
		}
		op.Fields = []counter.FieldDelta{{Name: field, Delta: d}}
	}
	return nil
}

// counterID evaluates the rule's counter id, checks it
// (contract.ValidateID) and returns it with its hash (HashID). An id of
// the append subset (fastAppend) is built in act's buffer without a
// string of each attribute it reads or of each concatenation first, and
// is then looked up among the ids the rule built lately (idCache): a
// string and a check only for an id not there (or when the rule's ids are
// seldom found there: idCache.use). aux is the id's word in the cache
// (Hit.Aux), nil when the id is not kept there.
func (r *Rule) counterID(act *Input) (id string, h uint64, aux *uint64, err error) {
	if r.id.app != nil {
		b, ok := r.id.app(act, act.buf[:0])
		act.buf = b[:0]
		if ok && len(b) > 0 {
			h := maphash.Bytes(idSeed, b)
			c := act.idCache(r)
			cached := c.use()
			if cached {
				id, aux, found := c.find(b, h)
				c.count(found)
				if found {
					return id, h, aux, nil
				}
			}
			id := string(b)
			if err := contract.ValidateID(id); err != nil {
				return "", 0, nil, err
			}
			if cached {
				return id, h, c.add(id, h), nil
			}
			return id, h, nil, nil
		}
	}
	if id, err = evalString(r.id, act); err != nil {
		return "", 0, nil, err
	}
	if err := contract.ValidateID(id); err != nil {
		return "", 0, nil, err
	}
	return id, HashID(id), nil, nil
}

// appendItem is oneItem of the value of p when p is in the append
// subset and the item is short: built in place, without a string of the
// attribute first; nil otherwise.
func appendItem(p *program, act *Input) [][]byte {
	if p.app == nil {
		return nil
	}
	if len(act.items) == 0 {
		act.items = make([]smallItem, itemSlab)
	}
	it := &act.items[0] // taken only if the item is made
	b, ok := p.app(act, it.buf[:0])
	if !ok {
		return nil
	}
	act.items = act.items[1:]
	// A longer item outgrew it.buf into an array of its own.
	it.items[0] = b[:len(b):len(b)]
	return it.items[:]
}

// itemSlab is how many smallItems appendItem allocates at once (a slab
// of a few kilobytes, never reused: the GC frees it when the last op
// holding one of its items is gone).
const itemSlab = 128

// smallItem is the one item of a pfadd op and its slice header in one
// allocation, when the item is short (a user id, say).
type smallItem struct {
	items [1][]byte
	buf   [24]byte
}

// oneItem returns [][]byte{[]byte(s)}, in one allocation for a short s.
func oneItem(s string) [][]byte {
	if len(s) > len(smallItem{}.buf) {
		return [][]byte{[]byte(s)}
	}
	p := new(smallItem)
	n := copy(p.buf[:], s)
	p.items[0] = p.buf[:n:n]
	return p.items[:]
}

func eval(p *program, act *Input) (ref.Val, error) {
	if p.fast != nil {
		if v, ok := p.fast(act); ok {
			return v, nil
		}
	}
	v, _, err := p.cel.Eval(act)
	if err != nil {
		return nil, err
	}
	if types.IsError(v) {
		return nil, v.(*types.Err)
	}
	return v, nil
}

func evalBool(p *program, act *Input) (bool, error) {
	v, err := eval(p, act)
	if err != nil {
		return false, err
	}
	b, ok := v.(types.Bool)
	if !ok {
		return false, fmt.Errorf("result is %s, not bool", v.Type().TypeName())
	}
	return bool(b), nil
}

func evalString(p *program, act *Input) (string, error) {
	if p.str != nil {
		if s, ok := p.str(act); ok {
			return s, nil
		}
	}
	v, err := eval(p, act)
	if err != nil {
		return "", err
	}
	s, ok := v.(types.String)
	if !ok {
		return "", fmt.Errorf("result is %s, not string", v.Type().TypeName())
	}
	return string(s), nil
}

// evalInt evaluates an int expression; nil p is 1. A whole double is
// accepted, since JSON numbers in attributes may arrive as either.
func evalInt(p *program, act *Input) (int64, error) {
	if p == nil {
		return 1, nil
	}
	v, err := eval(p, act)
	if err != nil {
		return 0, err
	}
	switch n := v.(type) {
	case types.Int:
		return int64(n), nil
	case types.Double:
		if f := float64(n); f == math.Trunc(f) && math.Abs(f) < 1<<62 {
			return int64(f), nil
		}
		return 0, fmt.Errorf("result %v is not a whole number", float64(n))
	}
	return 0, fmt.Errorf("result is %s, not int", v.Type().TypeName())
}

// String describes a rule for logs: name, line and op.
func (r *Rule) String() string {
	return fmt.Sprintf("%s (line %d, %s)", r.Name, r.Line, strings.ToLower(r.Op.String()))
}
