package event

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"pgregory.net/rapid"
)

func TestParseBatch(t *testing.T) {
	f := func(name, in string, want int, wantErr error, wantIndex int) {
		t.Run(name, func(t *testing.T) {
			evs, err := ParseBatch([]byte(in), Limits{MaxEvents: 3, MaxEventBytes: 200, MaxAttrs: 2})
			if wantErr != nil {
				if !errors.Is(err, wantErr) {
					t.Fatalf("err = %v, want %v", err, wantErr)
				}
				var ee *Error
				if wantIndex >= 0 && (!errors.As(err, &ee) || ee.Index != wantIndex) {
					t.Fatalf("err = %v, want index %d", err, wantIndex)
				}
				return
			}
			if err != nil || len(evs) != want {
				t.Fatalf("got %d events, %v; want %d", len(evs), err, want)
			}
		})
	}
	f("array", `[{"id":"a","type":"t","ts":1},{"id":"b","type":"t","ts":"2026-01-02T03:04:05Z"}]`, 2, nil, 0)
	f("ndjson", "{\"id\":\"a\",\"type\":\"t\",\"ts\":1}\n\n{\"id\":\"b\",\"type\":\"t\",\"ts\":2,\"x\":{\"y\":[1]}}\n", 2, nil, 0)
	f("empty", " \n", 0, ErrInvalid, -1)
	f("empty array", "[]", 0, ErrInvalid, -1)
	f("too many", `[{"id":"a","type":"t","ts":1},{"id":"a","type":"t","ts":1},{"id":"a","type":"t","ts":1},{"id":"a","type":"t","ts":1}]`, 0, ErrTooLarge, -1)
	f("no id", `[{"type":"t","ts":1}]`, 0, ErrInvalid, 0)
	f("numeric id", `[{"id":1,"type":"t","ts":1}]`, 0, ErrInvalid, 0)
	f("control in id", `[{"id":"a\u0001","type":"t","ts":1}]`, 0, ErrInvalid, 0)
	f("no type", "{\"id\":\"a\",\"type\":\"t\",\"ts\":1}\n{\"id\":\"a\",\"ts\":1}", 0, ErrInvalid, 1)
	f("bad ts", `[{"id":"a","type":"t","ts":"yesterday"}]`, 0, ErrInvalid, 0)
	f("fractional ts", `[{"id":"a","type":"t","ts":1.5}]`, 0, ErrInvalid, 0)
	f("negative ts", `[{"id":"a","type":"t","ts":-1}]`, 0, ErrInvalid, 0)
	f("too many attrs", `[{"id":"a","type":"t","ts":1,"x":1,"y":2,"z":3}]`, 0, ErrTooLarge, 0)
	f("event too big", `[{"id":"a","type":"t","ts":1,"x":"`+strings.Repeat("x", 300)+`"}]`, 0, ErrTooLarge, 0)
	f("ndjson line too big", `{"id":"a","type":"t","ts":1,"x":"`+strings.Repeat("x", 300)+`"}`, 0, ErrTooLarge, 0)
	f("not an object", `[1]`, 0, ErrInvalid, -1)
	f("trailing data", `[{"id":"a","type":"t","ts":1}] x`, 0, ErrInvalid, -1)
	f("two objects on a line", `{"id":"a","type":"t","ts":1} {"id":"b","type":"t","ts":1}`, 0, ErrInvalid, 0)
}

func TestEncodeRoundTrip(t *testing.T) {
	evs, err := ParseBatch([]byte(`[{"id":"a","type":"t","ts":"2026-01-02T03:04:05.123+01:00","n":12345678901234,"f":1.5,"s":"<&>","o":{"k":[true,null]}}]`), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	e := evs[0]
	if e.TS != 1767319445123 {
		t.Fatalf("ts = %d", e.TS)
	}
	back, err := Decode(Encode(&e), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if string(Encode(&back)) != string(Encode(&e)) {
		t.Fatalf("round trip changed the event: %s vs %s", Encode(&back), Encode(&e))
	}
}

// FuzzParseBatch: any input parses or fails with a typed error; what
// parses re-encodes to events that decode to the same encoding.
func FuzzParseBatch(f *testing.F) {
	f.Add([]byte(`[{"id":"a","type":"t","ts":1}]`))
	f.Add([]byte("{\"id\":\"a\",\"type\":\"t\",\"ts\":\"2026-01-02T03:04:05Z\",\"x\":[1,2.5,\"s\"]}\n{\"id\":\"b\",\"type\":\"u\",\"ts\":0}"))
	f.Add([]byte(`[{"id":"\u00e9","type":"t","ts":253402300799999,"n":1e400}]`))
	f.Add([]byte("{\"id\":\"a\",\"type\":\"t\",\"ts\":1}\n{\"id\":\"b\",\"type\":\"t\",\"ts\":2}\n"))
	f.Add([]byte(" {\"id\":\"a\",\"type\":\"t\",\"ts\":1}\n\n{\"id\":\"b\",\"type\":\"t\",\"ts\":2} \n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		l := Limits{MaxEvents: 50, MaxEventBytes: 4096, MaxAttrs: 16}
		evs, raws, err := ParseBatchRaw(data, l)
		b, cerr := CheckBatch(data, l)
		if (err == nil) != (cerr == nil) || err != nil && err.Error() != cerr.Error() {
			t.Fatalf("ParseBatchRaw: %v, CheckBatch: %v", err, cerr)
		}
		checkPartial(t, data, l, b, err)
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		// CheckBatch forwards the same events; its messages, taken from
		// the input as is when they can be, are those Frame builds.
		if !slices.EqualFunc(b.Events, raws, bytes.Equal) {
			t.Fatalf("CheckBatch events %q, ParseBatchRaw %q", b.Events, raws)
		}
		for _, max := range []int{1, 64, 1 << 20} {
			if got, want := b.Frame(max), Frame(raws, max); !slices.EqualFunc(got, want, bytes.Equal) {
				t.Fatalf("Batch.Frame(%d) = %q, Frame = %q", max, got, want)
			}
		}
		if len(evs) == 0 || len(evs) > l.MaxEvents {
			t.Fatalf("%d events", len(evs))
		}
		for i := range evs {
			if bytes.ContainsAny(raws[i], "\r\n") {
				t.Fatalf("event %d: raw form %q has a newline", i, raws[i])
			}
			fromRaw, err := Decode(raws[i], l)
			if err != nil || string(Encode(&fromRaw)) != string(Encode(&evs[i])) {
				t.Fatalf("event %d: raw form %q decodes to %v (%v)", i, raws[i], fromRaw, err)
			}
			enc := Encode(&evs[i])
			back, err := Decode(enc, Limits{MaxAttrs: 16})
			if err != nil {
				t.Fatalf("event %d: %s does not decode: %v", i, enc, err)
			}
			if again := Encode(&back); string(again) != string(enc) {
				t.Fatalf("event %d: %s re-encodes as %s", i, enc, again)
			}
		}
	})
}

// TestFrame: messages hold whole events, at most maxBytes unless one event
// alone is larger, and Unframe gives back every event in order.
func TestFrame(t *testing.T) {
	var enc [][]byte
	for i := range 50 {
		e := NewEvent(strings.Repeat("i", 1+i%7), "t", int64(i), map[string]any{"x": strings.Repeat("y", i*3)})
		enc = append(enc, Encode(&e))
	}
	for _, max := range []int{1, 100, 1000, 1 << 20} {
		var back [][]byte
		for _, m := range Frame(enc, max) {
			if parts := Unframe(m); len(m) > max && len(parts) != 1 {
				t.Fatalf("max %d: message of %d bytes holds %d events", max, len(m), len(parts))
			}
			back = append(back, Unframe(m)...)
			n := 0
			EachFramed(m, func(i int, _ []byte) {
				if i != n {
					t.Fatalf("EachFramed index %d after %d events", i, n)
				}
				n++
			})
			if split := bytes.Split(m, []byte{'\n'}); !slices.EqualFunc(Unframe(m), split, bytes.Equal) || Framed(m) != n || n != len(split) {
				t.Fatalf("Unframe %q, Framed %d, EachFramed %d events; split %q", Unframe(m), Framed(m), n, split)
			}
		}
		if len(back) != len(enc) {
			t.Fatalf("max %d: %d events back, want %d", max, len(back), len(enc))
		}
		for i := range enc {
			if string(back[i]) != string(enc[i]) {
				t.Fatalf("max %d: event %d is %s, want %s", max, i, back[i], enc[i])
			}
		}
	}
}

// checkPartial: CheckBatchPartial of data agrees with CheckBatch (whole
// is CheckBatch's batch, err its error): a whole batch is the same batch
// with nothing refused; otherwise the good and the refused events are
// every event exactly once, in order, each good one decoding alone and
// each refused one failing alone with the error given.
func checkPartial(t *testing.T, data []byte, l Limits, whole *Batch, err error) {
	t.Helper()
	p, perr := CheckBatchPartial(data, l)
	if err == nil {
		if perr != nil || p.Index != nil || len(p.Rejected) != 0 || !slices.EqualFunc(p.Events, whole.Events, bytes.Equal) {
			t.Fatalf("CheckBatchPartial of a good batch: %+v, %v", p, perr)
		}
		return
	}
	if perr != nil {
		if !errors.Is(perr, ErrInvalid) && !errors.Is(perr, ErrTooLarge) {
			t.Fatalf("untyped error %v", perr)
		}
		return
	}
	if len(p.Rejected) == 0 || len(p.Events) == 0 || len(p.Index) != len(p.Events) {
		t.Fatalf("partial batch of a bad batch: %d events, %d indexes, %d refused", len(p.Events), len(p.Index), len(p.Rejected))
	}
	next, gi, ri := 0, 0, 0
	for gi < len(p.Events) || ri < len(p.Rejected) {
		switch {
		case gi < len(p.Events) && p.Index[gi] == next:
			if _, err := Decode(p.Events[gi], l); err != nil {
				t.Fatalf("kept event %d does not decode: %v", next, err)
			}
			gi++
		case ri < len(p.Rejected) && p.Rejected[ri].Index == next:
			r := p.Rejected[ri]
			if r.Err == nil || r.Err.Index != next || len(r.Raw) > MaxRejectedBytes ||
				!errors.Is(r.Err, ErrInvalid) && !errors.Is(r.Err, ErrTooLarge) {
				t.Fatalf("refused event %d: %+v", next, r)
			}
			if len(r.Raw) < MaxRejectedBytes {
				if _, err := Decode(r.Raw, l); err == nil {
					t.Fatalf("refused event %d (%q) decodes alone", next, r.Raw)
				}
			}
			ri++
		default:
			t.Fatalf("event %d is neither kept nor refused (index %v)", next, p.Index)
		}
		next++
	}
}

// TestCheckBatchPartial: good events are kept with their index, bad ones
// refused with theirs, and a batch of bad events only is refused whole.
func TestCheckBatchPartial(t *testing.T) {
	l := Limits{MaxEventBytes: 64}
	b, err := CheckBatchPartial([]byte(`{"id":"a","type":"t","ts":1}
{"id":"b","ts":2}
{"id":"c","type":"t","ts":3,"pad":"`+strings.Repeat("x", 80)+`"}
{"id":"d","type":"t","ts":4}
not json`), l)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(b.Index, []int{0, 3}) || len(b.Events) != 2 || string(b.Events[1]) != `{"id":"d","type":"t","ts":4}` {
		t.Fatalf("kept %q at %v", b.Events, b.Index)
	}
	var got []string
	for _, r := range b.Rejected {
		got = append(got, fmt.Sprint(r.Index, errors.Is(r.Err, ErrTooLarge)))
	}
	if !slices.Equal(got, []string{"1 false", "2 true", "4 false"}) {
		t.Fatalf("refused %v", got)
	}
	if string(b.Frame(1 << 20)[0]) != `{"id":"a","type":"t","ts":1}`+"\n"+`{"id":"d","type":"t","ts":4}` {
		t.Fatalf("frame %q", b.Frame(1<<20))
	}
	var ee *Error
	if _, err := CheckBatchPartial([]byte(`[{"id":"a"},{"type":"t"}]`), l); !errors.As(err, &ee) || ee.Index != 0 {
		t.Fatalf("every event bad: %v, want the first event's error", err)
	}
}

// TestValidateTextFastPath: ValidateText, with its shortcut for printable
// ASCII, accepts exactly the 1..MaxFieldLen-byte UTF-8 strings without a
// C0 or C1 control character or DEL, on strings mostly of printable ASCII
// with a few bytes of anything (controls, high bytes, broken UTF-8).
func TestValidateTextFastPath(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := rapid.SliceOfN(rapid.OneOf(rapid.ByteRange(0x20, 0x7e), rapid.Byte(),
			rapid.SampledFrom([]byte{0, 0x1f, 0x7f, 0x80, 0x9f, 0xa0, 0xc2, 0xe2, 0xff})), 0, MaxFieldLen+2).Draw(t, "b")
		if rapid.Bool().Draw(t, "utf8") {
			b = append(b, string(rapid.Rune().Draw(t, "r"))...)
		}
		s := string(b)
		want := s != "" && len(s) <= MaxFieldLen && utf8.ValidString(s) && strings.IndexFunc(s, func(r rune) bool {
			return unicode.IsControl(r) // Cc: U+0000..U+001F, U+007F..U+009F
		}) < 0
		if got := ValidateText(s) == nil; got != want {
			t.Fatalf("ValidateText(%q) accepts: %v, want %v", s, got, want)
		}
	})
}
