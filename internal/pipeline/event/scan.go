package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The decoder: one pass over an event's bytes that checks the JSON
// grammar as strictly as encoding/json (RFC 8259, at most 10000 levels
// of nesting, nothing but whitespace after the value), keeps id, type
// and ts, and leaves every attribute as its raw JSON, decoded only when
// a rule reads it (Event.Attr). Strings that hold escapes or non-ASCII
// bytes are unescaped by encoding/json itself, so names and values come
// out exactly as encoding/json would decode them (invalid UTF-8 and lone
// surrogates become U+FFFD). FuzzDecodeEquivalence checks the decoder
// against encoding/json.

// errSyntax is the one syntax error; callers wrap it with ErrInvalid.
var errSyntax = errors.New("not a JSON object")

// maxDepth is encoding/json's nesting limit.
const maxDepth = 10000

// scanner walks one JSON text. Its methods return the position after
// what they read, or -1 on a syntax error.
type scanner struct {
	b     []byte
	depth int
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func (s *scanner) ws(i int) int {
	for i < len(s.b) && isSpace(s.b[i]) {
		i++
	}
	return i
}

// plainByte[c] is whether byte c stands for itself in a plain string
// (printable ASCII but the quote and the backslash).
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str reads the string starting at the quote at i; plain reports that it
// holds no escape and only ASCII, so its bytes are its value.
func (s *scanner) str(i int) (end int, plain bool) {
	b := s.b
	if i >= len(b) || b[i] != '"' {
		return -1, false
	}
	// The common case, a plain string, one table look-up a byte.
	for i++; i < len(b) && plainByte[b[i]]; i++ {
	}
	if i < len(b) && b[i] == '"' {
		return i + 1, true
	}
	plain = true
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"':
			return i + 1, plain
		case c == '\\':
			plain = false
			if i+1 >= len(b) {
				return -1, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return -1, false
				}
				for _, h := range b[i+2 : i+6] {
					if !isHex(h) {
						return -1, false
					}
				}
				i += 6
			default:
				return -1, false
			}
		case c < 0x20:
			return -1, false
		default:
			if c >= 0x80 {
				plain = false
			}
			i++
		}
	}
	return -1, false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// num reads a number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) num(i int) int {
	b := s.b
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && isDigit(b[i]):
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return -1
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return -1
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	return i
}

func (s *scanner) lit(i int, word string) int {
	if len(s.b)-i < len(word) || string(s.b[i:i+len(word)]) != word {
		return -1
	}
	return i + len(word)
}

// value skips the value at i (no leading whitespace).
func (s *scanner) value(i int) int {
	if i >= len(s.b) {
		return -1
	}
	switch c := s.b[i]; {
	case c == '"':
		end, _ := s.str(i)
		return end
	case c == '{' || c == '[':
		return s.container(i)
	case c == 't':
		return s.lit(i, "true")
	case c == 'f':
		return s.lit(i, "false")
	case c == 'n':
		return s.lit(i, "null")
	case c == '-' || isDigit(c):
		return s.num(i)
	}
	return -1
}

// container skips the object or array at i.
func (s *scanner) container(i int) int {
	s.depth++
	if s.depth > maxDepth {
		return -1
	}
	defer func() { s.depth-- }()
	obj := s.b[i] == '{'
	closer := byte(']')
	if obj {
		closer = '}'
	}
	i = s.ws(i + 1)
	if i < len(s.b) && s.b[i] == closer {
		return i + 1
	}
	for {
		if obj {
			if i, _ = s.str(i); i < 0 {
				return -1
			}
			if i = s.ws(i); i >= len(s.b) || s.b[i] != ':' {
				return -1
			}
			i = s.ws(i + 1)
		}
		if i = s.value(i); i < 0 {
			return -1
		}
		if i = s.ws(i); i >= len(s.b) {
			return -1
		}
		switch s.b[i] {
		case ',':
			i = s.ws(i + 1)
		case closer:
			return i + 1
		default:
			return -1
		}
	}
}

// unquote returns the value of the string literal q (with its quotes).
func unquote(q []byte, plain bool) string {
	if plain {
		return string(q[1 : len(q)-1])
	}
	var s string
	if err := json.Unmarshal(q, &s); err != nil {
		// The scanner accepted q, so encoding/json does.
		panic(fmt.Sprintf("event: scanned string %q does not decode: %v", q, err))
	}
	return s
}

// unquoteBytes is unquote for names: no copy when plain.
func unquoteBytes(q []byte, plain bool) []byte {
	if plain {
		return q[1 : len(q)-1]
	}
	return []byte(unquote(q, false))
}

// decodeInto parses raw, one event, into e (reusing e's attribute slice).
// The checks and their order are those of decoding with encoding/json:
// size, syntax, id, type, ts, then the number of attributes.
func decodeInto(raw []byte, l Limits, e *Event) error {
	_, err := decodePrefixed(raw, l, e, "")
	return err
}

// decodePrefixed is decodeInto that also returns prefix + e.ID, in one
// allocation with e.ID when prefix is not empty (e.ID is its suffix).
func decodePrefixed(raw []byte, l Limits, e *Event, prefix string) (string, error) {
	if len(raw) > l.MaxEventBytes {
		return "", fmt.Errorf("%w: event of %d bytes, at most %d", ErrTooLarge, len(raw), l.MaxEventBytes)
	}
	attrs := e.attrs[:0]
	if attrs == nil {
		attrs = make([]Attr, 0, 8)
	}
	// The type of the event e held: a stream's events have a few types,
	// so the next one usually has the same and takes this string instead
	// of a copy of its own.
	prevType := e.Type
	*e = Event{}
	s := scanner{b: raw, depth: 1}
	i := s.ws(0)
	if i >= len(raw) || raw[i] != '{' {
		return "", fmt.Errorf("%w: not a JSON object", ErrInvalid)
	}
	var idQ, typeQ, tsV []byte
	var idPlain, typePlain bool
	tooMany := false
	i = s.ws(i + 1)
	if i < len(raw) && raw[i] == '}' {
		i++
	} else {
		for {
			kEnd, kPlain := s.str(i)
			if kEnd < 0 {
				return "", fmt.Errorf("%w: %v", ErrInvalid, errSyntax)
			}
			key := raw[i:kEnd]
			if i = s.ws(kEnd); i >= len(raw) || raw[i] != ':' {
				return "", fmt.Errorf("%w: %v", ErrInvalid, errSyntax)
			}
			vStart := s.ws(i + 1)
			var vEnd int
			vPlain := false // a string without escapes, of ASCII
			if vStart < len(raw) && raw[vStart] == '"' {
				vEnd, vPlain = s.str(vStart)
			} else {
				vEnd = s.value(vStart)
			}
			if vEnd < 0 {
				return "", fmt.Errorf("%w: %v", ErrInvalid, errSyntax)
			}
			val := raw[vStart:vEnd]
			name := unquoteBytes(key, kPlain)
			switch string(name) {
			case "id":
				idQ, idPlain = val, vPlain
			case "type":
				typeQ, typePlain = val, vPlain
			case "ts":
				tsV = val
			default:
				if !tooMany {
					attrs = setAttr(attrs, name, val)
					tooMany = len(attrs) > l.MaxAttrs
				}
			}
			if i = s.ws(vEnd); i >= len(raw) {
				return "", fmt.Errorf("%w: %v", ErrInvalid, errSyntax)
			}
			if raw[i] == '}' {
				i++
				break
			}
			if raw[i] != ',' {
				return "", fmt.Errorf("%w: %v", ErrInvalid, errSyntax)
			}
			i = s.ws(i + 1)
		}
	}
	if s.ws(i) != len(raw) {
		return "", fmt.Errorf("%w: data after the JSON object", ErrInvalid)
	}
	full, id, err := idField(idQ, idPlain, prefix)
	if err != nil {
		return "", err
	}
	e.ID = id
	if e.Type, err = textField("type", typeQ, typePlain, prevType); err != nil {
		return "", err
	}
	if e.TS, err = tsField(tsV); err != nil {
		return "", err
	}
	if tooMany {
		return "", fmt.Errorf("%w: more than %d attributes", ErrTooLarge, l.MaxAttrs)
	}
	e.attrs = attrs
	return full, nil
}

// plainString reports whether the scanned string literal q has no escape
// and only ASCII.
func plainString(q []byte) bool {
	for _, c := range q[1 : len(q)-1] {
		if c == '\\' || c >= 0x80 {
			return false
		}
	}
	return true
}

// setAttr sets name to val, the last value of a name winning (as
// encoding/json does for a map).
func setAttr(attrs []Attr, name, val []byte) []Attr {
	for i := range attrs {
		if string(attrs[i].Name) == string(name) {
			attrs[i].Value = val
			return attrs
		}
	}
	return append(attrs, Attr{Name: name, Value: val})
}

// textField is the text of the JSON string q (plain: without escapes),
// checked (ValidateText); prev when q holds its bytes (a stream's events
// share a few types: the string of the one before is reused).
func textField(name string, q []byte, plain bool, prev string) (string, error) {
	if q == nil {
		return "", fmt.Errorf("%w: no %q", ErrInvalid, name)
	}
	if q[0] != '"' {
		return "", fmt.Errorf("%w: %q is not a string", ErrInvalid, name)
	}
	s := prev // the same bytes, so the same text: no copy
	if !plain || prev == "" || string(q[1:len(q)-1]) != prev {
		s = unquote(q, plain)
	}
	return s, checkText(name, s)
}

func checkText(name, s string) error {
	if err := ValidateText(s); err != nil {
		return fmt.Errorf("%w: %q %v", ErrInvalid, name, err)
	}
	return nil
}

// idField is textField of the id q, returning prefix + the id too: a
// plain id is copied once, after prefix, and the id is the copy's suffix.
func idField(q []byte, plain bool, prefix string) (full, id string, err error) {
	if prefix == "" || !plain || q == nil || q[0] != '"' {
		if id, err = textField("id", q, plain, ""); err != nil {
			return "", "", err
		}
		return prefix + id, id, nil
	}
	var b strings.Builder
	b.Grow(len(prefix) + len(q) - 2)
	b.WriteString(prefix)
	b.Write(q[1 : len(q)-1])
	full = b.String()
	id = full[len(prefix):]
	if err := checkText("id", id); err != nil {
		return "", "", err
	}
	return full, id, nil
}

func tsField(v []byte) (int64, error) {
	switch {
	case v == nil || string(v) == "null":
		return timestamp(nil)
	case v[0] == '"':
		return timestamp(unquote(v, plainString(v)))
	case len(v) <= 15 && allDigits(v):
		// Unix milliseconds as digits (the stream's form): what
		// strconv.ParseInt reads, without boxing a string.
		var n int64
		for _, c := range v {
			n = n*10 + int64(c-'0')
		}
		if n > maxMillis {
			return 0, fmt.Errorf("%w: \"ts\" out of range", ErrInvalid)
		}
		return n, nil
	case v[0] == '-' || isDigit(v[0]):
		return timestamp(json.Number(v))
	}
	return timestamp(false)
}

func allDigits(v []byte) bool {
	for _, c := range v {
		if !isDigit(c) {
			return false
		}
	}
	return len(v) > 0
}

// decodeValue decodes a raw JSON value (checked by the scanner) into the
// form rules see: string, bool, nil, int64 for a whole number that fits,
// float64 for other numbers (±Inf beyond float64's range), []any and
// map[string]any.
func decodeValue(v []byte) any {
	switch c := v[0]; {
	case c == '"':
		return unquote(v, plainString(v))
	case c == 't':
		return true
	case c == 'f':
		return false
	case c == 'n':
		return nil
	case c == '-' || isDigit(c):
		return number(v)
	}
	var x any
	d := json.NewDecoder(bytes.NewReader(v))
	d.UseNumber()
	if err := d.Decode(&x); err != nil {
		panic(fmt.Sprintf("event: scanned value %q does not decode: %v", v, err))
	}
	return numbers(x)
}

func number(v []byte) any {
	if n, err := strconv.ParseInt(string(v), 10, 64); err == nil {
		return n
	}
	f, _ := strconv.ParseFloat(string(v), 64) // out of range: ±Inf
	return f
}

// numbers turns the json.Numbers of a decoded container into int64 or
// float64.
func numbers(x any) any {
	switch t := x.(type) {
	case json.Number:
		return number([]byte(t))
	case map[string]any:
		for k, v := range t {
			t[k] = numbers(v)
		}
	case []any:
		for i, v := range t {
			t[i] = numbers(v)
		}
	}
	return x
}
