package rules

import (
	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
)

// The fast path: most rule expressions are a few lookups, comparisons
// and concatenations (`event.type == "impression" && !event.?bot.orValue(false)`,
// `"views:" + event.post`, `event.user`, `1`). For those a rule also keeps
// a tree of Go closures, built from the checked CEL expression, that
// evaluates them without CEL's interpreter (its attribute resolution,
// qualifiers and allocations were most of the rules' cost). A closure
// answers only when the values are of the types it handles (strings, ints,
// bools) and every attribute it reads is there; otherwise it declines and
// the whole expression runs in CEL, so errors and every other case are
// CEL's own. TestFastMatchesCEL checks the closures against CEL on random
// expressions and events.

// fastExpr evaluates an expression on in; ok false declines (run CEL).
type fastExpr func(in *Input) (v ref.Val, ok bool)

// program is a compiled expression: CEL, and the fast path when the
// expression is in its subset.
type program struct {
	src  string // the expression as written
	cel  cel.Program
	fast fastExpr // nil: CEL only
	// str is fast for an expression of strings (a literal, an attribute,
	// a concatenation of those) without boxing each into a ref.Val.
	str fastString // nil: use fast
	// app is str appending to a buffer instead of making a string: a
	// counter id or an item is built without a copy of each attribute
	// it reads or of the concatenation (Rule.op).
	app fastAppend // nil: use str
}

// fastAppend appends the value of a string expression to buf; ok false
// declines (buf then holds anything).
type fastAppend func(in *Input, buf []byte) ([]byte, bool)

// fastString evaluates a string expression; ok false declines.
type fastString func(in *Input) (s string, ok bool)

// newProgram returns the program of a checked expression.
func newProgram(src string, a *cel.Ast, p cel.Program) *program {
	e := a.NativeRep().Expr()
	return &program{src: src, cel: p, fast: fastNode(e), str: fastStr(e), app: fastApp(e)}
}

// strNode is a node of the string subset (fastStr, fastApp): a string
// literal, an attribute of event, or a concatenation of two such nodes.
type strNode struct {
	kind int // strLit, strAttr or strConcat
	lit  string
	key  string   // the attribute
	l, r ast.Expr // the concatenation's operands (themselves to check)
}

const (
	strLit = iota + 1
	strAttr
	strConcat
)

// stringNode classifies e; ok false when it is not in the subset.
func stringNode(e ast.Expr) (strNode, bool) {
	switch e.Kind() {
	case ast.LiteralKind:
		if s, ok := e.AsLiteral().(types.String); ok {
			return strNode{kind: strLit, lit: string(s)}, true
		}
	case ast.SelectKind:
		s := e.AsSelect()
		if !s.IsTestOnly() && s.Operand().Kind() == ast.IdentKind && s.Operand().AsIdent() == "event" {
			return strNode{kind: strAttr, key: s.FieldName()}, true
		}
	case ast.CallKind:
		c := e.AsCall()
		if c.FunctionName() == operators.Add && !c.IsMemberFunction() && len(c.Args()) == 2 {
			return strNode{kind: strConcat, l: c.Args()[0], r: c.Args()[1]}, true
		}
	}
	return strNode{}, false
}

// fastStr returns the string fast path of e: a string literal, an
// attribute (declining when it is not a string) or a concatenation of
// those; nil for anything else.
func fastStr(e ast.Expr) fastString {
	n, ok := stringNode(e)
	switch {
	case !ok:
		return nil
	case n.kind == strLit:
		return func(*Input) (string, bool) { return n.lit, true }
	case n.kind == strAttr:
		return func(in *Input) (string, bool) {
			s, found, ok := in.findString(n.key)
			return s, found && ok
		}
	}
	l, r := fastStr(n.l), fastStr(n.r)
	if l == nil || r == nil {
		return nil
	}
	return func(in *Input) (string, bool) {
		a, ok := l(in)
		if !ok {
			return "", false
		}
		b, ok := r(in)
		return a + b, ok
	}
}

// fastApp is fastStr appending: the same subset, the same values.
func fastApp(e ast.Expr) fastAppend {
	n, ok := stringNode(e)
	switch {
	case !ok:
		return nil
	case n.kind == strLit:
		return func(_ *Input, buf []byte) ([]byte, bool) { return append(buf, n.lit...), true }
	case n.kind == strAttr:
		return func(in *Input, buf []byte) ([]byte, bool) { return in.appendString(buf, n.key) }
	}
	l, r := fastApp(n.l), fastApp(n.r)
	if l == nil || r == nil {
		return nil
	}
	return func(in *Input, buf []byte) ([]byte, bool) {
		buf, ok := l(in, buf)
		if !ok {
			return buf, false
		}
		return r(in, buf)
	}
}

func fastNode(e ast.Expr) fastExpr {
	switch e.Kind() {
	case ast.LiteralKind:
		v := e.AsLiteral()
		switch v.(type) {
		case types.String, types.Int, types.Bool:
			return func(*Input) (ref.Val, bool) { return v, true }
		}
	case ast.SelectKind:
		s := e.AsSelect()
		if s.Operand().Kind() != ast.IdentKind || s.Operand().AsIdent() != "event" {
			return nil
		}
		var key ref.Val = types.String(s.FieldName()) // boxed once
		if s.IsTestOnly() {
			// has(event.name)
			return func(in *Input) (ref.Val, bool) {
				_, found := in.Find(key)
				return types.Bool(found), true
			}
		}
		return func(in *Input) (ref.Val, bool) { return fastValue(in.Find(key)) }
	case ast.CallKind:
		return fastCall(e.AsCall())
	}
	return nil
}

// fastValue passes on the value of a lookup of a type the fast path
// handles; a missing key or another type declines.
func fastValue(v ref.Val, found bool) (ref.Val, bool) {
	if !found {
		return nil, false
	}
	switch v.(type) {
	case types.String, types.Int, types.Bool:
		return v, true
	}
	return nil, false
}

func fastCall(c ast.CallExpr) fastExpr {
	args := c.Args()
	if c.FunctionName() == "orValue" && c.IsMemberFunction() && len(args) == 1 {
		return fastOrValue(c.Target(), args[0])
	}
	if c.IsMemberFunction() {
		return nil
	}
	fs := make([]fastExpr, len(args))
	for i, a := range args {
		if fs[i] = fastNode(a); fs[i] == nil {
			return nil
		}
	}
	switch {
	case c.FunctionName() == operators.LogicalNot && len(fs) == 1:
		x := fs[0]
		return func(in *Input) (ref.Val, bool) {
			b, ok := fastBool(x, in)
			return types.Bool(!b), ok
		}
	case (c.FunctionName() == operators.LogicalAnd || c.FunctionName() == operators.LogicalOr) && len(fs) == 2:
		// false && anything (an error too) is false in CEL, true || anything true.
		l, r, short := fs[0], fs[1], c.FunctionName() == operators.LogicalOr
		return func(in *Input) (ref.Val, bool) {
			b, ok := fastBool(l, in)
			if !ok {
				return nil, false
			}
			if b == short {
				return types.Bool(short), true
			}
			b, ok = fastBool(r, in)
			return types.Bool(b), ok
		}
	case (c.FunctionName() == operators.Equals || c.FunctionName() == operators.NotEquals) && len(fs) == 2:
		l, r, neg := fs[0], fs[1], c.FunctionName() == operators.NotEquals
		// Strings on both sides (event.type == "like") compare without
		// boxing either; when a side is not a string (an int attribute,
		// say), the general comparison below decides.
		ls, rs := fastStr(args[0]), fastStr(args[1])
		return func(in *Input) (ref.Val, bool) {
			if ls != nil && rs != nil {
				if a, ok := ls(in); ok {
					if b, ok := rs(in); ok {
						return types.Bool((a == b) != neg), true
					}
				}
			}
			a, ok := l(in)
			if !ok {
				return nil, false
			}
			b, ok := r(in)
			if !ok {
				return nil, false
			}
			var eq bool
			switch x := a.(type) {
			case types.String:
				y, same := b.(types.String)
				eq, ok = x == y, same
			case types.Int:
				y, same := b.(types.Int)
				eq, ok = x == y, same
			case types.Bool:
				y, same := b.(types.Bool)
				eq, ok = x == y, same
			default:
				ok = false
			}
			return types.Bool(eq != neg), ok
		}
	case c.FunctionName() == operators.Add && len(fs) == 2:
		l, r := fs[0], fs[1]
		return func(in *Input) (ref.Val, bool) { // string concatenation only
			x, ok := fastText(l, in)
			if !ok {
				return nil, false
			}
			y, ok := fastText(r, in)
			if !ok {
				return nil, false
			}
			return x + y, true
		}
	}
	return nil
}

// fastOrValue is event.?name.orValue(default).
func fastOrValue(target, def ast.Expr) fastExpr {
	if target.Kind() != ast.CallKind {
		return nil
	}
	t := target.AsCall()
	if t.FunctionName() != operators.OptSelect || t.IsMemberFunction() || len(t.Args()) != 2 {
		return nil
	}
	obj, field := t.Args()[0], t.Args()[1]
	if obj.Kind() != ast.IdentKind || obj.AsIdent() != "event" || field.Kind() != ast.LiteralKind {
		return nil
	}
	if _, ok := field.AsLiteral().(types.String); !ok {
		return nil
	}
	key := field.AsLiteral()
	d := fastNode(def)
	if d == nil {
		return nil
	}
	return func(in *Input) (ref.Val, bool) {
		v, found := in.Find(key)
		if !found {
			return d(in)
		}
		return fastValue(v, true)
	}
}

// fastText evaluates f, declining unless it is a string.
func fastText(f fastExpr, in *Input) (types.String, bool) {
	v, ok := f(in)
	if !ok {
		return "", false
	}
	s, ok := v.(types.String)
	return s, ok
}

func fastBool(f fastExpr, in *Input) (bool, bool) {
	v, ok := f(in)
	if !ok {
		return false, false
	}
	b, ok := v.(types.Bool)
	return bool(b), ok
}
