// Package event is the pipeline's event: its JSON form on the collector
// and on a stream, the limits it is checked against, and typed errors.
//
// An event is a JSON object with an "id" (1..255 printable bytes, the
// deduplication key), a "type" (1..255 printable bytes), a "ts" (RFC 3339
// text or Unix milliseconds) and any other members, its attributes. A
// batch is a JSON array of events or newline-delimited JSON (one event a
// line). On a stream an event is stored as compact JSON with "ts" in Unix
// milliseconds (Encode); the consumer reads it back with Decode, which
// applies the same checks, so a record someone else wrote to the topic is
// refused the same way.
package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/counterd/counterd/internal/contract"
)

// Sentinel errors; every error this package returns wraps one of them.
var (
	// ErrInvalid: an event breaks the format (missing id, bad ts, ...).
	ErrInvalid = errors.New("event: invalid event")
	// ErrTooLarge: a batch or an event exceeds Limits.
	ErrTooLarge = errors.New("event: too large")
)

// Limits bound what a batch may carry. Zero fields take DefaultLimits.
type Limits struct {
	MaxEvents     int // events in one batch (default 10000)
	MaxEventBytes int // bytes of one event's JSON (default 64 KiB)
	MaxAttrs      int // attributes of one event, id/type/ts excluded (default 64)
}

// DefaultLimits returns the documented defaults.
func DefaultLimits() Limits {
	return Limits{MaxEvents: 10000, MaxEventBytes: 64 << 10, MaxAttrs: 64}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxEvents <= 0 {
		l.MaxEvents = d.MaxEvents
	}
	if l.MaxEventBytes <= 0 {
		l.MaxEventBytes = d.MaxEventBytes
	}
	if l.MaxAttrs <= 0 {
		l.MaxAttrs = d.MaxAttrs
	}
	return l
}

// MaxFieldLen is the longest id or type, in bytes.
const MaxFieldLen = contract.MaxIDLen

// Event is one decoded event. Its attributes stay raw JSON, slices of
// the bytes it was decoded from (which must not change while the event is
// used), and are decoded when read (Attr).
type Event struct {
	ID    string
	Type  string
	TS    int64 // Unix milliseconds
	attrs []Attr
}

// Attr is one attribute: its name (unescaped) and its JSON value as sent.
type Attr struct {
	Name  []byte
	Value []byte
}

// NewEvent returns an event with attributes given as Go values (tests,
// tools); they must encode as JSON.
func NewEvent(id, typ string, ts int64, attrs map[string]any) Event {
	e := Event{ID: id, Type: typ, TS: ts}
	for k, v := range attrs {
		b, err := json.Marshal(v)
		if err != nil {
			panic(fmt.Sprintf("event: attribute %q does not encode: %v", k, err))
		}
		e.attrs = append(e.attrs, Attr{Name: []byte(k), Value: b})
	}
	return e
}

// Decode decodes the attribute's value like Event.Attr.
func (a *Attr) Decode() any { return decodeValue(a.Value) }

// Text returns the attribute's value when it is a JSON string, unescaped.
func (a *Attr) Text() (string, bool) {
	if len(a.Value) == 0 || a.Value[0] != '"' {
		return "", false
	}
	return unquote(a.Value, plainString(a.Value)), true
}

// PlainText returns the attribute's value when it is a JSON string of
// printable ASCII without escapes: its bytes between the quotes, which
// are its text (Text) without a copy; ok false for any other value.
func (a *Attr) PlainText() ([]byte, bool) {
	if len(a.Value) == 0 || a.Value[0] != '"' || !plainString(a.Value) {
		return nil, false
	}
	return a.Value[1 : len(a.Value)-1], true
}

// Attrs returns the attributes, in the order sent, each name once.
func (e *Event) Attrs() []Attr { return e.attrs }

// Attr decodes attribute name: string, bool, nil, int64 (a whole number
// that fits), float64 (other numbers), []any or map[string]any.
func (e *Event) Attr(name string) (any, bool) {
	for i := range e.attrs {
		if string(e.attrs[i].Name) == name {
			return e.attrs[i].Decode(), true
		}
	}
	return nil, false
}

// Time returns TS as a time.Time in UTC.
func (e *Event) Time() time.Time { return time.UnixMilli(e.TS).UTC() }

// Error is the error of event Index of a batch; it unwraps to ErrInvalid
// or ErrTooLarge.
type Error struct {
	Index int
	Err   error
}

func (e *Error) Error() string { return fmt.Sprintf("event %d: %v", e.Index, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// ParseBatch reads a batch: a JSON array of events, or newline-delimited
// JSON. The whole batch is refused on the first bad event (an *Error
// naming it), so a batch is appended all or nothing.
func ParseBatch(data []byte, l Limits) ([]Event, error) {
	evs, _, err := ParseBatchRaw(data, l)
	return evs, err
}

// ParseBatchRaw is ParseBatch that also returns each event's JSON as
// sent, compacted (no newline, so it frames like Encode's form; Decode
// reads it back to the same event). The collector forwards it instead of
// encoding the event again.
func ParseBatchRaw(data []byte, l Limits) ([]Event, [][]byte, error) {
	b, evs, err := parseBatch(data, l, true, false)
	if err != nil {
		return nil, nil, err
	}
	return evs, b.Events, nil
}

// Batch is a checked batch in the form the collector forwards.
type Batch struct {
	// Events are each event's JSON as sent, compacted (ParseBatchRaw's
	// second result).
	Events [][]byte
	// Index, after CheckBatchPartial refused some events, is each of
	// Events' place in the batch as sent; nil when Events are all of it.
	Index []int
	// Rejected are the events CheckBatchPartial refused, in batch order.
	Rejected []Rejected
	// joined is Events joined by '\n' when the batch was sent as exactly
	// that (compact NDJSON, one event a line): a slice of the input,
	// which Frame forwards without copying. Otherwise nil.
	joined []byte
}

// CheckBatch checks a batch like ParseBatch and returns its forwarded
// form; the decoded events are not kept. The Batch points into data.
func CheckBatch(data []byte, l Limits) (*Batch, error) {
	b, _, err := parseBatch(data, l, false, false)
	return b, err
}

// Rejected is an event that CheckBatchPartial refused on its own.
type Rejected struct {
	Index int    // its place in the batch as sent
	Raw   []byte // its bytes as sent (a slice of the input), at most MaxRejectedBytes
	Err   *Error // wraps ErrInvalid or ErrTooLarge
}

// MaxRejectedBytes bounds the bytes of a refused event kept for its dead
// letter: enough to find it, and never a stream message too large.
const MaxRejectedBytes = 4096

// CheckBatchPartial is CheckBatch that refuses bad events one by one:
// the Batch holds the good ones (Index maps them back) and Rejected the
// others. The whole batch is still refused when it cannot be split into
// events (not a JSON array or NDJSON, empty, too many events) or when no
// event is good (the first event's *Error).
func CheckBatchPartial(data []byte, l Limits) (*Batch, error) {
	b, _, err := parseBatch(data, l, false, true)
	return b, err
}

// Frame returns the stream messages of the batch (Frame of its Events).
func (b *Batch) Frame(maxBytes int) [][]byte {
	if b.joined != nil && len(b.joined) <= maxBytes {
		return [][]byte{b.joined}
	}
	return Frame(b.Events, maxBytes)
}

// parseBatch checks data; keep returns the decoded events too; partial
// sets bad events aside instead of refusing the batch (CheckBatchPartial).
func parseBatch(data []byte, l Limits, keep, partial bool) (*Batch, []Event, error) {
	l = l.withDefaults()
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) == 0 {
		return nil, nil, fmt.Errorf("%w: empty batch", ErrInvalid)
	}
	var raws [][]byte
	var err error
	ndjson := trimmed[0] != '['
	if ndjson {
		raws, err = splitLines(trimmed, l, partial)
	} else {
		raws, err = splitArray(trimmed, l)
	}
	if err != nil {
		return nil, nil, err
	}
	if len(raws) == 0 {
		return nil, nil, fmt.Errorf("%w: empty batch", ErrInvalid)
	}
	var out []Event
	if keep {
		out = make([]Event, len(raws))
	}
	var scratch Event
	var rejected []Rejected
	compacted := false
	joinedLen := len(raws) - 1 // the newlines between the events
	for i, raw := range raws {
		e := &scratch
		if keep {
			e = &out[i]
		}
		if err := decodeInto(raw, l, e); err != nil {
			if !partial {
				return nil, nil, &Error{Index: i, Err: err}
			}
			rejected = append(rejected, Rejected{Index: i, Raw: raw[:min(len(raw), MaxRejectedBytes)], Err: &Error{Index: i, Err: err}})
			raws[i] = nil
			continue
		}
		if bytes.ContainsAny(raw, "\r\n") { // only whitespace between tokens: strings cannot hold them raw
			var b bytes.Buffer
			_ = json.Compact(&b, raw) // decodeInto accepted it
			raws[i] = b.Bytes()
			compacted = true
			if keep {
				// The attributes point into raw; decode the compact form
				// so that they point into what is forwarded.
				_ = decodeInto(raws[i], l, e)
			}
		}
		joinedLen += len(raws[i])
	}
	if len(rejected) > 0 {
		return partialBatch(raws, rejected)
	}
	b := &Batch{Events: raws}
	// The lines are ordered, disjoint slices of trimmed, each ended by a
	// newline but the last: when their bytes and one newline between each
	// two add up to trimmed (less a final newline), nothing else is there.
	if ndjson && !compacted && (len(trimmed) == joinedLen || len(trimmed) == joinedLen+1 && trimmed[joinedLen] == '\n') {
		b.joined = trimmed[:joinedLen]
	}
	return b, out, nil
}

// partialBatch is the Batch of the events of raws not rejected (nil in
// raws), or the first event's error when every one was.
func partialBatch(raws [][]byte, rejected []Rejected) (*Batch, []Event, error) {
	if len(rejected) == len(raws) {
		return nil, nil, rejected[0].Err
	}
	b := &Batch{Rejected: rejected, Events: make([][]byte, 0, len(raws)-len(rejected)), Index: make([]int, 0, len(raws)-len(rejected))}
	for i, raw := range raws {
		if raw != nil {
			b.Events = append(b.Events, raw)
			b.Index = append(b.Index, i)
		}
	}
	return b, nil, nil
}

// splitArray returns the elements of the JSON array data, checking the
// whole array's grammar first (a syntax error anywhere refuses the batch
// without an index) and then the number of elements.
func splitArray(data []byte, l Limits) ([][]byte, error) {
	s := scanner{b: data}
	var raws [][]byte
	i := s.ws(1)
	bad := func() ([][]byte, error) {
		return nil, fmt.Errorf("%w: batch is not a JSON array of objects", ErrInvalid)
	}
	if i < len(data) && data[i] == ']' {
		i++
	} else {
		for {
			end := s.value(i)
			if end < 0 {
				return bad()
			}
			raws = append(raws, data[i:end])
			if i = s.ws(end); i >= len(data) {
				return bad()
			}
			if data[i] == ']' {
				i++
				break
			}
			if data[i] != ',' {
				return bad()
			}
			i = s.ws(i + 1)
		}
	}
	if s.ws(i) != len(data) {
		return nil, fmt.Errorf("%w: data after the JSON array", ErrInvalid)
	}
	if len(raws) > l.MaxEvents {
		return nil, fmt.Errorf("%w: %d events, at most %d", ErrTooLarge, len(raws), l.MaxEvents)
	}
	return raws, nil
}

// splitLines returns the non-blank lines of data (NDJSON), trimmed. A
// line longer than MaxEventBytes is refused before it is parsed (partial:
// left for decodeInto to refuse as that event's error).
func splitLines(data []byte, l Limits, partial bool) ([][]byte, error) {
	var raws [][]byte
	for len(data) > 0 {
		line := data
		if nl := bytes.IndexByte(data, '\n'); nl >= 0 {
			line, data = data[:nl], data[nl+1:]
		} else {
			data = nil
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if len(line) > l.MaxEventBytes && !partial {
			return nil, &Error{Index: len(raws), Err: fmt.Errorf("%w: event longer than %d bytes", ErrTooLarge, l.MaxEventBytes)}
		}
		if len(raws) == l.MaxEvents {
			return nil, fmt.Errorf("%w: more than %d events", ErrTooLarge, l.MaxEvents)
		}
		raws = append(raws, line)
	}
	return raws, nil
}

// Decode parses one event as stored on a stream (or sent alone). The
// event's attributes point into data.
func Decode(data []byte, l Limits) (Event, error) {
	var e Event
	err := decodeInto(data, l.withDefaults(), &e)
	return e, err
}

// DecodeInto is Decode into e, reusing e's attribute storage (the
// consumer decodes every event of a poll into one Event).
func DecodeInto(e *Event, data []byte, l Limits) error {
	return decodeInto(data, l.withDefaults(), e)
}

// DecodeIntoPrefixed is DecodeInto that also returns prefix + e.ID, built
// in one allocation with e.ID (its suffix): the consumer's marker of the
// event without a copy of the id of its own.
func DecodeIntoPrefixed(e *Event, data []byte, l Limits, prefix string) (string, error) {
	return decodePrefixed(data, l.withDefaults(), e, prefix)
}

// ValidateText checks an id or type: 1..255 bytes of printable UTF-8.
func ValidateText(s string) error {
	if s == "" || len(s) > MaxFieldLen {
		return fmt.Errorf("must be 1..%d bytes", MaxFieldLen)
	}
	if contract.ValidateID(s) == nil {
		// The same rule as a counter id's (and the same length limit),
		// checked eight ASCII bytes at a time; only its error text
		// differs, so a failing text is checked again below for it.
		return nil
	}
	if !utf8.ValidString(s) {
		return errors.New("is not UTF-8")
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return errors.New("has a control character")
		}
	}
	return nil
}

// Timestamps must lie in years 1970..9999, where Unix milliseconds and
// RFC 3339 agree.
const maxMillis = 253402300799999

func timestamp(v any) (int64, error) {
	switch t := v.(type) {
	case nil:
		return 0, fmt.Errorf("%w: no \"ts\"", ErrInvalid)
	case string:
		tm, err := time.Parse(time.RFC3339Nano, t)
		if err != nil {
			return 0, fmt.Errorf("%w: \"ts\" %q is not RFC 3339", ErrInvalid, t)
		}
		ms := tm.UnixMilli()
		if ms < 0 || ms > maxMillis {
			return 0, fmt.Errorf("%w: \"ts\" out of range", ErrInvalid)
		}
		return ms, nil
	case json.Number:
		n, err := strconv.ParseInt(string(t), 10, 64)
		if err != nil {
			f, ferr := strconv.ParseFloat(string(t), 64)
			if ferr != nil || f != math.Trunc(f) || f < 0 || f > maxMillis {
				return 0, fmt.Errorf("%w: \"ts\" must be whole Unix milliseconds", ErrInvalid)
			}
			n = int64(f)
		}
		if n < 0 || n > maxMillis {
			return 0, fmt.Errorf("%w: \"ts\" out of range", ErrInvalid)
		}
		return n, nil
	}
	return 0, fmt.Errorf("%w: \"ts\" must be RFC 3339 text or Unix milliseconds", ErrInvalid)
}

// Encode returns the event's stream form: compact JSON with "ts" in Unix
// milliseconds and the attributes as sent, compacted. Decode(Encode(e))
// equals e.
func Encode(e *Event) []byte {
	m := make(map[string]any, len(e.attrs)+3)
	for _, a := range e.attrs {
		m[string(a.Name)] = json.RawMessage(a.Value)
	}
	m["id"], m["type"], m["ts"] = e.ID, e.Type, e.TS
	b, err := json.Marshal(m)
	if err != nil {
		// The attributes passed the scanner, so they are valid JSON.
		panic(fmt.Sprintf("event: decoded event does not encode: %v", err))
	}
	return b
}

// Frame joins encoded events into stream messages of at most maxBytes
// each (an event larger than maxBytes gets a message of its own): the
// events of a message are separated by '\n', which compact JSON never
// contains. Several events a message spare the stream a publish and an
// acknowledgement per event.
func Frame(enc [][]byte, maxBytes int) [][]byte {
	var out [][]byte
	var cur []byte
	for _, e := range enc {
		if len(cur) > 0 && len(cur)+1+len(e) > maxBytes {
			out = append(out, cur)
			cur = nil
		}
		if len(cur) > 0 {
			cur = append(cur, '\n')
		}
		cur = append(cur, e...)
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// Unframe splits a stream message into its events (Frame's inverse).
func Unframe(msg []byte) [][]byte {
	out := make([][]byte, 0, Framed(msg))
	EachFramed(msg, func(_ int, ev []byte) { out = append(out, ev) })
	return out
}

// Framed returns how many events the stream message msg holds.
func Framed(msg []byte) int { return bytes.Count(msg, []byte{'\n'}) + 1 }

// EachFramed calls fn with each event of msg and its index, like ranging
// over Unframe(msg) without building the slice.
func EachFramed(msg []byte, fn func(i int, ev []byte)) {
	for i := 0; ; i++ {
		nl := bytes.IndexByte(msg, '\n')
		if nl < 0 {
			fn(i, msg)
			return
		}
		fn(i, msg[:nl])
		msg = msg[nl+1:]
	}
}
