package httpapi

// The only file that reads or builds internal/counter values, so that a
// change of their field names touches one place.

import (
	"time"

	"github.com/counterd/counterd/internal/counter"
)

func newWindowSpec(granularity, span time.Duration, fixed bool) counter.WindowSpec {
	return counter.WindowSpec{Granularity: granularity, Span: span, Fixed: fixed}
}

func windowSpecOf(w counter.WindowSpec) (granularity, span time.Duration, fixed bool) {
	return w.Granularity, w.Span, w.Fixed
}

func newFieldDelta(name string, delta int64) counter.FieldDelta {
	return counter.FieldDelta{Name: name, Delta: delta}
}

// newFloatFieldDelta is a float increment of a hash field (HINCRBYFLOAT).
func newFloatFieldDelta(name, text string) counter.FieldDelta {
	return counter.FieldDelta{Name: name, Float: text}
}

// fieldValue is a field's JSON value: its int64, or floatValue of its text.
func fieldValue(f counter.Field) (name string, value any) {
	if f.Float != "" {
		return f.Name, floatValue(f.Float)
	}
	return f.Name, f.Value
}

func replicaOf(s counter.PNSlot) replicaJSON {
	return replicaJSON{Replica: s.Replica, P: s.P, N: s.N}
}

func bucketOf(b counter.Bucket) bucketJSON {
	return bucketJSON{Start: formatTime(b.Start), Count: b.Count}
}
