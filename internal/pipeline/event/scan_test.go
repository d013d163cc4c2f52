package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"unsafe"
)

// refDecode is the reference: the event decoded with encoding/json (the
// decoder this package used before its own scanner), numbers turned into
// int64 or float64 as rules see them.
func refDecode(raw []byte, l Limits) (id, typ string, ts int64, attrs map[string]any, err error) {
	l = l.withDefaults()
	if len(raw) > l.MaxEventBytes {
		return "", "", 0, nil, ErrTooLarge
	}
	if !json.Valid(raw) {
		return "", "", 0, nil, ErrInvalid
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil || m == nil {
		return "", "", 0, nil, ErrInvalid
	}
	text := func(name string) (string, error) {
		s, ok := m[name].(string)
		if !ok || ValidateText(s) != nil {
			return "", ErrInvalid
		}
		return s, nil
	}
	if id, err = text("id"); err != nil {
		return
	}
	if typ, err = text("type"); err != nil {
		return
	}
	if ts, err = timestamp(m["ts"]); err != nil {
		return "", "", 0, nil, ErrInvalid
	}
	delete(m, "id")
	delete(m, "type")
	delete(m, "ts")
	if len(m) > l.MaxAttrs {
		return "", "", 0, nil, ErrTooLarge
	}
	return id, typ, ts, numbers(m).(map[string]any), nil
}

// checkEquivalent decodes raw with both decoders and fails on any
// difference: the error class, id, type, ts and every attribute.
func checkEquivalent(t *testing.T, raw []byte, l Limits) {
	t.Helper()
	id, typ, ts, attrs, rerr := refDecode(raw, l)
	e, err := Decode(raw, l)
	switch {
	case rerr != nil || err != nil:
		if rerr == nil || err == nil || !errors.Is(err, rerr) {
			t.Fatalf("%q: error %v, encoding/json says %v", raw, err, rerr)
		}
		return
	case e.ID != id || e.Type != typ || e.TS != ts || len(e.Attrs()) != len(attrs):
		t.Fatalf("%q: %q %q %d %d attrs, encoding/json says %q %q %d %d", raw, e.ID, e.Type, e.TS, len(e.Attrs()), id, typ, ts, len(attrs))
	}
	for k, want := range attrs {
		got, ok := e.Attr(k)
		if !ok || !sameValue(got, want) {
			t.Fatalf("%q: attribute %q = %#v, encoding/json says %#v", raw, k, got, want)
		}
	}
	back, err := Decode(Encode(&e), l)
	if err != nil || string(Encode(&back)) != string(Encode(&e)) {
		t.Fatalf("%q: Encode form %s does not decode to the same event (%v)", raw, Encode(&e), err)
	}
}

// checkReuse: decoding raw into an Event that held prev (DecodeInto, as
// the consumer reuses one) gives what decoding raw afresh gives: the same
// fields or the same error.
func checkReuse(t *testing.T, prev, raw []byte, l Limits) {
	t.Helper()
	var e Event
	_ = DecodeInto(&e, prev, l)
	err := DecodeInto(&e, raw, l)
	want, werr := Decode(raw, l)
	switch {
	case (err == nil) != (werr == nil) || err != nil && err.Error() != werr.Error():
		t.Fatalf("%q after %q: error %v, afresh %v", raw, prev, err, werr)
	case err == nil && (e.ID != want.ID || e.Type != want.Type || e.TS != want.TS || string(Encode(&e)) != string(Encode(&want))):
		t.Fatalf("%q after %q: %s, afresh %s", raw, prev, Encode(&e), Encode(&want))
	}
	// DecodeIntoPrefixed: the same, and the prefixed id.
	var p Event
	_, _ = DecodeIntoPrefixed(&p, prev, l, "_events:")
	full, perr := DecodeIntoPrefixed(&p, raw, l, "_events:")
	switch {
	case (perr == nil) != (werr == nil) || perr != nil && perr.Error() != werr.Error():
		t.Fatalf("%q after %q: DecodeIntoPrefixed error %v, afresh %v", raw, prev, perr, werr)
	case perr == nil && (full != "_events:"+want.ID || string(Encode(&p)) != string(Encode(&want))):
		t.Fatalf("%q after %q: DecodeIntoPrefixed %q %s, afresh %s", raw, prev, full, Encode(&p), Encode(&want))
	}
}

// TestDecodePrefixedOneCopy: the prefixed id of an event costs no
// allocation beyond decoding the event (the id is its suffix), for the
// consumer's marker of each event.
func TestDecodePrefixedOneCopy(t *testing.T) {
	raw := []byte(`{"id":"0123456789abcdef0123","type":"impression","ts":1,"post":"p1"}`)
	var e Event
	if err := DecodeInto(&e, raw, Limits{}); err != nil {
		t.Fatal(err)
	}
	plain := testing.AllocsPerRun(100, func() { _ = DecodeInto(&e, raw, Limits{}) })
	var full string
	prefixed := testing.AllocsPerRun(100, func() { full, _ = DecodeIntoPrefixed(&e, raw, Limits{}, "_events:") })
	if prefixed != plain {
		t.Errorf("DecodeIntoPrefixed: %v allocations, DecodeInto %v", prefixed, plain)
	}
	if full != "_events:0123456789abcdef0123" || e.ID != "0123456789abcdef0123" {
		t.Fatalf("prefixed %q, id %q", full, e.ID)
	}
	if unsafe.StringData(e.ID) != unsafe.StringData(full[len("_events:"):]) {
		t.Error("the id is not the prefixed id's suffix")
	}
}

func sameValue(a, b any) bool {
	if fa, ok := a.(float64); ok {
		fb, ok := b.(float64)
		return ok && (fa == fb || math.IsNaN(fa) && math.IsNaN(fb))
	}
	return reflect.DeepEqual(a, b)
}

func TestDecodeEquivalence(t *testing.T) {
	l := Limits{MaxAttrs: 3}
	for _, in := range []string{
		`{"id":"a","type":"t","ts":1}`,
		` {"id":"a","type":"t","ts":1} `,
		`{"id":"a","type":"t","ts":1}}`, // encoding/json's Decoder.More took this once; now refused
		`{"id":"a","type":"t","ts":1}]`,
		`{"id":"a","type":"t","ts":1,}`,
		`{"id":"a","type":"t","ts":01}`,
		`{"id":"a","type":"t","ts":1.0}`,
		`{"id":"a","type":"t","ts":1e3}`,
		`{"id":"a","type":"t","ts":-0}`,
		`{"id":"a","type":"t","ts":null}`,
		`{"id":"a","type":"t","ts":true}`,
		`{"id":"a","type":"t","ts":"2026-01-02T03:04:05.5Z"}`,
		`{"id":"\u0061","type":"t","ts":1}`,
		`{"\u0069d":"a","type":"t","ts":1}`,
		`{"id":"a","id":"b","type":"t","ts":1}`,
		`{"id":"a\ud800","type":"t","ts":1}`,
		"{\"id\":\"a\xff\",\"type\":\"t\",\"ts\":1}",
		"{\"id\":\"a\x7f\",\"type\":\"t\",\"ts\":1}",
		"{\"id\":\"a\tb\",\"type\":\"t\",\"ts\":1}",
		`{"id":"a","type":"t","ts":1,"x":1,"x":2,"y":[1,{"z":null}],"w":{"a":1.5e400}}`,
		`{"id":"a","type":"t","ts":1,"a":1,"b":2,"c":3,"d":4}`,
		`{"id":"a","type":"t","ts":1,"a":1,"b":2,"c":3,"a":4}`,
		`{"id":"a","type":"t","ts":1,"n":9223372036854775808,"m":-9223372036854775808,"f":1E2}`,
		`{"id":"a","type":"t","ts":1,"s":"\u00e9\n\"\\\/"}`,
		`{"id":1,"type":"t","ts":1}`,
		`{"type":"t","ts":1}`,
		`{"id":"a","type":"t","ts":1,"x":tru}`,
		`{"id":"a","type":"t","ts":1,"x":"\x"}`,
		`{"id":"a","type":"t","ts":1,"x":-}`,
		`{"id":"a","type":"t","ts":1,"x":1.}`,
		`[]`, `null`, ``, `"a"`, `{}`,
		`{"id":"a","type":"t","ts":1,"d":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `}`,
		`{"id":"a","type":"t","ts":1,"d":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`,
	} {
		checkEquivalent(t, []byte(in), l)
		for _, prev := range []string{`{"id":"p","type":"t","ts":2}`, `{"id":"p","type":"t\u0000","ts":2}`, `{"id":"p","type":"tt","ts":2}`, in} {
			checkReuse(t, []byte(prev), []byte(in), l)
		}
	}
}

// TestDecodeReusesType: an event of the type the reused Event held takes
// that string, unless it was not valid text (set by hand).
func TestDecodeReusesType(t *testing.T) {
	e, err := Decode([]byte(`{"id":"a","type":"impression","ts":1}`), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	typ := e.Type
	if err := DecodeInto(&e, []byte(`{"id":"b","type":"impression","ts":2}`), Limits{}); err != nil || e.ID != "b" {
		t.Fatal(e, err)
	}
	if unsafe.StringData(e.Type) != unsafe.StringData(typ) {
		t.Error("the type was copied again")
	}
	e.Type = "a\x7f"
	if err := DecodeInto(&e, []byte("{\"id\":\"c\",\"type\":\"a\x7f\",\"ts\":3}"), Limits{}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "control") {
		t.Fatalf("err = %v, want a control character refused", err)
	}
}

// FuzzDecodeEquivalence: the scanner and encoding/json agree on every
// input: the same events with the same attribute values, or errors of the
// same class.
func FuzzDecodeEquivalence(f *testing.F) {
	f.Add([]byte(`{"id":"a","type":"t","ts":1,"x":[1,2.5,"s",{"k":null}],"b":true}`))
	f.Add([]byte(`{"id":"\u00e9","type":"t","ts":"2026-01-02T03:04:05+01:00","n":1e400}`))
	f.Add([]byte(`{"id":"a","id":"b","type":"t","ts":1,"x":1,"x":2}`))
	f.Add([]byte("{\"id\":\"a\xff\",\"type\":\"t\\u0000\",\"ts\":-0}"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		checkEquivalent(t, raw, Limits{MaxEventBytes: 4096, MaxAttrs: 4})
	})
}

// FuzzDecodeReuse: decoding into an Event reused from an earlier event
// (the consumer's way) is decoding afresh.
func FuzzDecodeReuse(f *testing.F) {
	f.Add([]byte(`{"id":"a","type":"t","ts":1}`), []byte(`{"id":"b","type":"t","ts":2,"x":1}`))
	f.Add([]byte(`{"id":"a","type":"t","ts":1}`), []byte(`{"id":"b","type":"t\u007f","ts":2}`))
	f.Add([]byte(`{"id":"a","type":"tt","ts":1}`), []byte(`{"id":"b","type":"t","ts":2}`))
	f.Add([]byte(`{"id":"a","type":"t","ts":1,"x":1}`), []byte(`{"id":"b","type":1,"ts":2}`))
	f.Fuzz(func(t *testing.T, prev, raw []byte) {
		checkReuse(t, prev, raw, Limits{MaxEventBytes: 4096, MaxAttrs: 4})
	})
}

// TestParseBatchSplits: the array form and NDJSON give the same events,
// and a syntax error anywhere in an array refuses the batch without an
// index, before the limits and the events' own checks.
func TestParseBatchSplits(t *testing.T) {
	var lines []string
	for i := range 20 {
		lines = append(lines, fmt.Sprintf(`{"id":"e%d","type":"t","ts":%d,"x":{"y":[%d, "z"]}}`, i, i, i))
	}
	a, araw, err := ParseBatchRaw([]byte("[\n"+strings.Join(lines, ",\n  ")+"\n]"), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	n, nraw, err := ParseBatchRaw([]byte(strings.Join(lines, "\r\n")), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range a {
		if string(Encode(&a[i])) != string(Encode(&n[i])) || string(araw[i]) != string(nraw[i]) {
			t.Fatalf("event %d: %s / %s", i, araw[i], nraw[i])
		}
		if v, _ := a[i].Attr("x"); !reflect.DeepEqual(v, map[string]any{"y": []any{int64(i), "z"}}) {
			t.Fatalf("event %d: x = %#v", i, v)
		}
	}
	_, _, err = ParseBatchRaw([]byte(`[{"id":1},{"id":"b","type":"t","ts":1},{"x":]`), Limits{MaxEvents: 1})
	var ee *Error
	if !errors.Is(err, ErrInvalid) || errors.As(err, &ee) {
		t.Fatalf("err = %v, want a batch syntax error", err)
	}
}

func TestAttrNumbers(t *testing.T) {
	e, err := Decode([]byte(`{"id":"a","type":"t","ts":1,"i":-12,"f":2.5,"big":123456789012345678901,"e":1e2}`), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]any{"i": int64(-12), "f": 2.5, "big": 123456789012345678901.0, "e": 100.0} {
		if got, _ := e.Attr(name); got != want {
			t.Errorf("%s = %#v, want %#v", name, got, want)
		}
	}
	if _, ok := e.Attr("nope"); ok {
		t.Error("missing attribute found")
	}
}
