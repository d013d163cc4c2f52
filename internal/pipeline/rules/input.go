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
	// strs holds the string attributes the fast path read (findString),
	// by index in e.Attrs(), not boxed into a ref.Val; kinds says which
	// of them are known (strUnknown, strText, strOther).
	strs  []string
	kinds []uint8
	// dirty: vals, strs or kinds hold something, up to their capacities,
	// that Reset must clear (an event whose rules read no attribute but
	// through appendString leaves them clear: not cleared again).
	dirty bool
	full  traits.Mapper

	// buf is where counter ids are built (fastAppend) and ids the ids
	// each rule built lately, by Rule.idx (Rule.counterID: at most
	// idCacheSlots a rule); both outlive Reset.
	buf []byte
	ids []*idCache
	// items is the rest of the slab pfadd items are made in (appendItem).
	items []smallItem
}

const (
	strUnknown uint8 = iota // not decoded yet
	strText                 // a string, in strs
	strOther                // not a string
)

var (
	_ interpreter.Activation = (*Input)(nil)
	_ traits.Mapper          = (*Input)(nil)
)

// Reset makes in the input of e.
func (in *Input) Reset(e *event.Event) {
	in.e = e
	in.id, in.typ, in.full = nil, nil, nil
	if in.dirty {
		clear(in.vals[:cap(in.vals)])
		clear(in.kinds[:cap(in.kinds)])
		clear(in.strs[:cap(in.strs)])
		in.dirty = false
	}
	n := len(e.Attrs())
	if cap(in.vals) < n {
		in.vals = make([]ref.Val, n)
	}
	in.vals = in.vals[:n]
	if cap(in.kinds) < n {
		in.kinds, in.strs = make([]uint8, n), make([]string, n)
	}
	in.kinds, in.strs = in.kinds[:n], in.strs[:n]
}

// findString is Find for the string fast path: the value of key when it
// is a string, without boxing it into a ref.Val; found false when the
// event has no such key, str false when its value is not a string.
func (in *Input) findString(key string) (s string, found, str bool) {
	switch key {
	case "id":
		return in.e.ID, true, true
	case "type":
		return in.e.Type, true, true
	case "ts":
		return "", true, false
	}
	attrs := in.e.Attrs()
	for i := range attrs {
		a := &attrs[i]
		if string(a.Name) != key {
			continue
		}
		switch in.kinds[i] {
		case strText:
			return in.strs[i], true, true
		case strOther:
			return "", true, false
		}
		if v := in.vals[i]; v != nil {
			s, ok := v.(types.String)
			return string(s), true, ok
		}
		in.dirty = true
		if t, ok := a.Text(); ok {
			in.kinds[i], in.strs[i] = strText, t
			return t, true, true
		}
		in.kinds[i] = strOther
		return "", true, false
	}
	return "", false, false
}

// appendString is findString appending the value to buf: the bytes of a
// plain string attribute (event.Attr.PlainText) go in without a copy of
// their own; found and a string, or ok false.
func (in *Input) appendString(buf []byte, key string) ([]byte, bool) {
	switch key {
	case "id", "type", "ts":
	default:
		attrs := in.e.Attrs()
		for i := range attrs {
			a := &attrs[i]
			if string(a.Name) != key {
				continue
			}
			if in.kinds[i] == strUnknown && in.vals[i] == nil {
				if b, ok := a.PlainText(); ok {
					return append(buf, b...), true
				}
			}
			break
		}
	}
	s, found, ok := in.findString(key)
	return append(buf, s...), found && ok
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
			in.dirty = true
			if in.kinds[i] == strText {
				in.vals[i] = types.String(in.strs[i])
			} else if s, ok := a.Text(); ok {
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
