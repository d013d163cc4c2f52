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
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
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
const MaxFieldLen = 255

// Event is one decoded event. Attrs holds the other members as
// encoding/json decodes them with UseNumber (json.Number for numbers).
type Event struct {
	ID    string
	Type  string
	TS    int64 // Unix milliseconds
	Attrs map[string]any
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
	l = l.withDefaults()
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) == 0 {
		return nil, nil, fmt.Errorf("%w: empty batch", ErrInvalid)
	}
	var raws []json.RawMessage
	if trimmed[0] == '[' {
		dec := json.NewDecoder(bytes.NewReader(trimmed))
		if err := dec.Decode(&raws); err != nil {
			return nil, nil, fmt.Errorf("%w: batch is not a JSON array of objects: %v", ErrInvalid, err)
		}
		if _, err := dec.Token(); err != io.EOF {
			return nil, nil, fmt.Errorf("%w: data after the JSON array", ErrInvalid)
		}
		if len(raws) > l.MaxEvents {
			return nil, nil, fmt.Errorf("%w: %d events, at most %d", ErrTooLarge, len(raws), l.MaxEvents)
		}
	} else {
		sc := bufio.NewScanner(bytes.NewReader(trimmed))
		sc.Buffer(nil, l.MaxEventBytes+1)
		for sc.Scan() {
			line := bytes.TrimSpace(sc.Bytes())
			if len(line) == 0 {
				continue
			}
			if len(raws) == l.MaxEvents {
				return nil, nil, fmt.Errorf("%w: more than %d events", ErrTooLarge, l.MaxEvents)
			}
			raws = append(raws, json.RawMessage(bytes.Clone(line))) // the scanner reuses its buffer
		}
		if err := sc.Err(); err != nil {
			if errors.Is(err, bufio.ErrTooLong) {
				return nil, nil, &Error{Index: len(raws), Err: fmt.Errorf("%w: event longer than %d bytes", ErrTooLarge, l.MaxEventBytes)}
			}
			return nil, nil, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	if len(raws) == 0 {
		return nil, nil, fmt.Errorf("%w: empty batch", ErrInvalid)
	}
	out := make([]Event, len(raws))
	enc := make([][]byte, len(raws))
	for i, raw := range raws {
		if err := decode(raw, l, &out[i]); err != nil {
			return nil, nil, &Error{Index: i, Err: err}
		}
		if bytes.ContainsAny(raw, "\r\n") { // only whitespace between tokens: strings cannot hold them raw
			var b bytes.Buffer
			_ = json.Compact(&b, raw) // decode accepted it
			raw = b.Bytes()
		}
		enc[i] = raw
	}
	return out, enc, nil
}

// Decode parses one event as stored on a stream (or sent alone).
func Decode(data []byte, l Limits) (Event, error) {
	var e Event
	err := decode(data, l.withDefaults(), &e)
	return e, err
}

func decode(raw []byte, l Limits, e *Event) error {
	if len(raw) > l.MaxEventBytes {
		return fmt.Errorf("%w: event of %d bytes, at most %d", ErrTooLarge, len(raw), l.MaxEventBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil || m == nil {
		return fmt.Errorf("%w: not a JSON object", ErrInvalid)
	}
	if dec.More() {
		return fmt.Errorf("%w: data after the JSON object", ErrInvalid)
	}
	var err error
	if e.ID, err = text(m, "id"); err != nil {
		return err
	}
	if e.Type, err = text(m, "type"); err != nil {
		return err
	}
	if e.TS, err = timestamp(m["ts"]); err != nil {
		return err
	}
	delete(m, "id")
	delete(m, "type")
	delete(m, "ts")
	if len(m) > l.MaxAttrs {
		return fmt.Errorf("%w: %d attributes, at most %d", ErrTooLarge, len(m), l.MaxAttrs)
	}
	e.Attrs = m
	return nil
}

func text(m map[string]any, name string) (string, error) {
	v, ok := m[name]
	if !ok {
		return "", fmt.Errorf("%w: no %q", ErrInvalid, name)
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%w: %q is not a string", ErrInvalid, name)
	}
	if err := ValidateText(s); err != nil {
		return "", fmt.Errorf("%w: %q %v", ErrInvalid, name, err)
	}
	return s, nil
}

// ValidateText checks an id or type: 1..255 bytes of printable UTF-8.
func ValidateText(s string) error {
	if s == "" || len(s) > MaxFieldLen {
		return fmt.Errorf("must be 1..%d bytes", MaxFieldLen)
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
// milliseconds. Decode(Encode(e)) equals e.
func Encode(e *Event) []byte {
	m := make(map[string]any, len(e.Attrs)+3)
	for k, v := range e.Attrs {
		m[k] = v
	}
	m["id"], m["type"], m["ts"] = e.ID, e.Type, e.TS
	b, err := json.Marshal(m)
	if err != nil {
		// Attrs came from encoding/json, so they encode.
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
	return bytes.Split(msg, []byte{'\n'})
}
