package contract

import (
	"encoding/binary"

	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/idem"
)

// AppendIdem appends r's form in an idempotency record (idem.Outcome).
// Replayed is not stored.
func (r Result) AppendIdem(b []byte) []byte {
	b = idem.AppendString(b, r.ID)
	b = append(b, byte(r.Kind), B2u8(r.Changed))
	b = binary.AppendVarint(b, r.Value)
	b = idem.AppendString(b, r.Float)
	b = binary.AppendUvarint(b, r.Version)
	if r.Fields == nil {
		return append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(r.Fields))+1)
	for _, f := range r.Fields {
		b = idem.AppendString(b, f.Name)
		b = binary.AppendVarint(b, f.Value)
		b = idem.AppendString(b, f.Float)
	}
	return b
}

// ReadIdem reads a result written by AppendIdem (idem.Outcome).
func (Result) ReadIdem(d *idem.Reader) Result {
	r := Result{ID: d.String(), Kind: Kind(d.Byte()), Changed: d.Bool()}
	r.Value = d.Varint()
	r.Float = d.String()
	r.Version = d.Uvarint()
	if n, ok := d.Len(3); ok {
		r.Fields = make([]counter.Field, n)
		for i := range r.Fields {
			r.Fields[i] = counter.Field{Name: d.String(), Value: d.Varint(), Float: d.String()}
		}
	}
	return r
}

// AsReplayed returns r marked Replayed (idem.Outcome).
func (r Result) AsReplayed() Result {
	r.Replayed = true
	return r
}

func B2u8(v bool) byte {
	if v {
		return 1
	}
	return 0
}
