package rules

import (
	"reflect"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/interpreter"

	"github.com/counterd/counterd/internal/pipeline/event"
)

// Input is an event as rules see it: the CEL activation whose one
// variable, event, is a map of "id", "type", "ts" and the attributes. It
// is its own value of event: a traits.Mapper whose Find decodes an
// attribute the first time an expression reads it. What CEL asks of a map
// beyond lookups (iteration, size, equality, conversion) goes to the whole
// map, built on first use. Not safe for concurrent use; Reset reuses it
// for the next event.
type Input struct {
	e       *event.Event
	id, typ ref.Val   // e.ID and e.Type as CEL values; nil: not yet
	vals    []ref.Val // decoded attributes by index in e.Attrs(); nil: not yet
	full    traits.Mapper
}

var (
	_ interpreter.Activation = (*Input)(nil)
	_ traits.Mapper          = (*Input)(nil)
)

// Reset makes in the input of e.
func (in *Input) Reset(e *event.Event) {
	in.e = e
	in.id, in.typ, in.full = nil, nil, nil
	n := len(e.Attrs())
	if cap(in.vals) < n {
		in.vals = make([]ref.Val, n)
	}
	in.vals = in.vals[:n]
	clear(in.vals)
}

// ResolveName implements interpreter.Activation: the one variable, event.
func (in *Input) ResolveName(name string) (any, bool) {
	if name == "event" {
		return in, true
	}
	return nil, false
}

// Parent implements interpreter.Activation.
func (in *Input) Parent() interpreter.Activation { return nil }

// Find implements traits.Mapper.
func (in *Input) Find(key ref.Val) (ref.Val, bool) {
	k, ok := key.(types.String)
	if !ok {
		return in.whole().Find(key)
	}
	switch k {
	case "id":
		if in.id == nil {
			in.id = types.String(in.e.ID)
		}
		return in.id, true
	case "type":
		if in.typ == nil {
			in.typ = types.String(in.e.Type)
		}
		return in.typ, true
	case "ts":
		return types.Int(in.e.TS), true
	}
	attrs := in.e.Attrs()
	for i := range attrs {
		a := &attrs[i]
		if string(a.Name) != string(k) {
			continue
		}
		if in.vals[i] == nil {
			if s, ok := a.Text(); ok {
				in.vals[i] = types.String(s)
			} else {
				in.vals[i] = types.DefaultTypeAdapter.NativeToValue(a.Decode())
			}
		}
		return in.vals[i], true
	}
	return nil, false
}

// Get implements traits.Indexer.
func (in *Input) Get(key ref.Val) ref.Val {
	if v, ok := in.Find(key); ok {
		return v
	}
	return types.NewErr("no such key: %v", key)
}

// Contains implements traits.Container.
func (in *Input) Contains(key ref.Val) ref.Val {
	_, ok := in.Find(key)
	return types.Bool(ok)
}

// whole is the event as a plain CEL map.
func (in *Input) whole() traits.Mapper {
	if in.full == nil {
		m := make(map[string]any, len(in.e.Attrs())+3)
		for _, a := range in.e.Attrs() {
			m[string(a.Name)], _ = in.e.Attr(string(a.Name))
		}
		m["id"], m["type"], m["ts"] = in.e.ID, in.e.Type, in.e.TS
		in.full = types.NewStringInterfaceMap(types.DefaultTypeAdapter, m).(traits.Mapper)
	}
	return in.full
}

func (in *Input) Iterator() traits.Iterator { return in.whole().Iterator() }
func (in *Input) Size() ref.Val             { return in.whole().Size() }
func (in *Input) Equal(o ref.Val) ref.Val   { return in.whole().Equal(o) }
func (in *Input) Type() ref.Type            { return types.MapType }
func (in *Input) Value() any                { return in.whole().Value() }

func (in *Input) ConvertToNative(t reflect.Type) (any, error) {
	return in.whole().ConvertToNative(t)
}

func (in *Input) ConvertToType(t ref.Type) ref.Val {
	if t == types.MapType {
		return in
	}
	return in.whole().ConvertToType(t)
}
