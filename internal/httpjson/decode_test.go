package httpjson

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/counterd/counterd/internal/contract"
)

// positive is a field with its own validation: a JSON integer > 0.
type positive int64

var errNotPositive = fmt.Errorf("%w: p: expected a positive integer", contract.ErrInvalidArgument)

func (p *positive) UnmarshalJSON(b []byte) error {
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || v <= 0 {
		return errNotPositive
	}
	*p = positive(v)
	return nil
}

// target is what the tests decode into.
type target struct {
	A int64  `json:"a"`
	S string `json:"s"`
	B bool   `json:"b"`
	L []int  `json:"l"`
	N *struct {
		X uint8 `json:"x"`
	} `json:"n"`
	P positive `json:"p,omitempty"`
}

var targetFields = []string{"a", "s", "b", "l", "n", "p"}

func TestDecodeStrict(t *testing.T) {
	for _, c := range []struct {
		body string
		code string // "" for success
		msg  string // the error's text, when code is set
	}{
		{``, "", ""},
		{" \r\n\t", "", ""},
		{`{}`, "", ""},
		{` {"a": 1, "s": "x", "p": 3} `, "", ""},
		{`{"A": 1}`, "", ""}, // encoding/json matches names without case
		{`{"a": 1} {}`, CodeInvalidJSON, "invalid JSON: trailing data after the JSON object"},
		{`{"z": 1}`, CodeInvalidJSON, `invalid JSON: unknown field "z"`},
		{`{"n": {"y": 1}}`, CodeInvalidJSON, `invalid JSON: unknown field "y"`},
		{`{"a": 1`, CodeInvalidJSON, "invalid JSON: unexpected EOF"},
		{`nope`, CodeInvalidJSON, "invalid JSON: body is not a JSON object"},
		{`[1]`, CodeInvalidArgument, "engine: invalid argument: body must be a JSON object"},
		{`null`, CodeInvalidArgument, "engine: invalid argument: body must be a JSON object"},
		{`{"a": "1"}`, CodeInvalidArgument, "engine: invalid argument: a: expected int64, got JSON string"},
		{`{"n": {"x": 300}}`, CodeInvalidArgument, "engine: invalid argument: n.x: expected uint8, got JSON number 300"},
		{`{"p": 0}`, CodeInvalidArgument, errNotPositive.Error()},
	} {
		var v target
		err := DecodeStrict([]byte(c.body), &v)
		if c.code == "" {
			if err != nil {
				t.Errorf("%q: %v", c.body, err)
			}
			continue
		}
		if code, _ := Classify(err); err == nil || code != c.code || err.Error() != c.msg {
			t.Errorf("%q: %v (code %s), want %s %q", c.body, err, code, c.code, c.msg)
		}
	}
	// A field's own error is returned as it is.
	var v target
	if err := DecodeStrict([]byte(`{"p": -1}`), &v); err != errNotPositive {
		t.Errorf("field error: %v, want the field's own %v", err, errNotPositive)
	}
}

// FuzzDecodeStrict checks DecodeStrict against encoding/json on any body:
// it never fails with anything but a 400 (invalid_json or
// invalid_argument); what it accepts is empty or a valid JSON object with
// known fields only, decodes to what json.Unmarshal decodes, and encodes
// back to a body it accepts with the same value; what is not valid JSON it
// refuses.
func FuzzDecodeStrict(f *testing.F) {
	for _, s := range []string{
		``, `{}`, ` {"a": 1, "s": "x", "b": true, "l": [1, 2], "n": {"x": 7}, "p": 9} `,
		`{"a": 1} {}`, `{"z": 1}`, `{"a": "1"}`, `[1]`, `null`, `{"p": 0}`, `{"a": 1e3}`,
		`{"A": 1, "a": 2}`, `{"n": null, "l": null}`, `{"s": "\u00e9\ud83d\ude00"}`, `{"a": 9223372036854775808}`,
		"{\"\u212a\": 1}", `{"a":1}}`, `{`, `"x"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var v target
		err := DecodeStrict(b, &v)
		trimmed := TrimSpace(b)
		if err != nil {
			if _, status := Classify(err); status != http.StatusBadRequest {
				t.Fatalf("%q: %v answers %d, want 400", b, err, status)
			}
			return
		}
		if len(trimmed) > 0 {
			if trimmed[0] != '{' || !json.Valid(trimmed) {
				t.Fatalf("%q accepted: not a JSON object", b)
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(trimmed, &m); err != nil {
				t.Fatalf("%q accepted, but not an object to encoding/json: %v", b, err)
			}
			for k := range m {
				known := false
				for _, f := range targetFields {
					known = known || strings.EqualFold(k, f)
				}
				if !known {
					t.Fatalf("%q accepted with the unknown field %q", b, k)
				}
			}
			var loose target
			if err := json.Unmarshal(trimmed, &loose); err != nil || !reflect.DeepEqual(loose, v) {
				t.Fatalf("%q: DecodeStrict %+v, json.Unmarshal %+v (%v)", b, v, loose, err)
			}
		} else if !reflect.DeepEqual(v, target{}) {
			t.Fatalf("%q: empty body decoded to %+v", b, v)
		}
		again, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var back target
		if err := DecodeStrict(again, &back); err != nil || !reflect.DeepEqual(back, v) {
			t.Fatalf("%q: re-encoded %s decodes to %+v (%v), want %+v", b, again, back, err, v)
		}
	})
}

// TestDecodeStrictRefusesInvalidJSON: a body that is not valid JSON is
// never accepted (the fuzz target checks the converse).
func TestDecodeStrictRefusesInvalidJSON(t *testing.T) {
	for _, s := range []string{`{`, `{"a":1}}`, `{"a":1,}`, `{'a':1}`, `{"a":01}`, "{\"s\":\"\x01\"}", `{} x`} {
		var v target
		if err := DecodeStrict([]byte(s), &v); err == nil || json.Valid([]byte(s)) {
			t.Errorf("%q: accepted (%v) or valid JSON", s, err)
		}
	}
}

func TestReadBody(t *testing.T) {
	w := httptest.NewRecorder()
	r := httptest.NewRequest("POST", "/", strings.NewReader(`{"a":1}`))
	if b, err := ReadBody(w, r, 7); err != nil || string(b) != `{"a":1}` {
		t.Errorf("ReadBody at the limit: %q %v", b, err)
	}
	r = httptest.NewRequest("POST", "/", strings.NewReader(`{"a":12}`))
	if _, err := ReadBody(w, r, 7); !errors.Is(err, ErrBodyTooLarge) || err.Error() != "request body too large: at most 7 bytes" {
		t.Errorf("ReadBody over the limit: %v", err)
	}
}
