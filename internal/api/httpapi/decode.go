package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/counterd/counterd/internal/engine"
)

// readBody reads the whole request body, at most opts.MaxBodyBytes.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	return ReadBody(w, r, h.opts.MaxBodyBytes)
}

// ReadBody reads r's whole body, at most max bytes: a longer body is
// body_too_large (413), a failed read invalid_json. Every front end of the
// HTTP API reads bodies with it.
func ReadBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, fmt.Errorf("%w: at most %d bytes", errBodyTooLarge, mbe.Limit)
		}
		return nil, fmt.Errorf("%w: reading body: %v", errInvalidJSON, err)
	}
	return b, nil
}

// decodeBody reads the body and decodes it strictly into v (see
// decodeStrict). An empty body is refused: a request that changes
// something says so with at least "{}", so that a body-less POST (a
// browser form, a link prefetch) never increments by the default delta.
func (h *Handler) decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	b, err := h.readBody(w, r)
	if err != nil {
		return err
	}
	if len(trimJSONSpace(b)) == 0 {
		return fmt.Errorf("%w: empty body: send a JSON object (\"{}\" for the defaults)", errInvalidJSON)
	}
	return decodeStrict(b, v)
}

// DecodeStrict decodes the JSON object b into v, as every route of the
// HTTP API decodes its body: unknown fields, trailing data and malformed
// JSON are invalid_json; values of the wrong type and a body that is not
// an object are invalid_argument; an empty body decodes as {}. An error
// that a field's own UnmarshalJSON returns is returned as it is, for the
// caller to classify.
func DecodeStrict(b []byte, v any) error { return decodeStrict(b, v) }

func decodeStrict(b []byte, v any) error {
	b = trimJSONSpace(b)
	if len(b) == 0 {
		b = []byte("{}")
	}
	if b[0] != '{' {
		if json.Valid(b) {
			return invalidArgf("body must be a JSON object")
		}
		return fmt.Errorf("%w: body is not a JSON object", errInvalidJSON)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if rest := trimJSONSpace(b[dec.InputOffset():]); len(rest) > 0 {
		return fmt.Errorf("%w: trailing data after the JSON object", errInvalidJSON)
	}
	return nil
}

// decodeError classifies an encoding/json error.
func decodeError(err error) error {
	var ae *argError
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			field = "body"
		}
		return invalidArgf("%s: expected %s, got JSON %s", field, te.Type, te.Value)
	case errors.As(err, &se), errors.Is(err, io.ErrUnexpectedEOF), strings.HasPrefix(err.Error(), "json: "):
		// Syntax errors, unexpected EOF and unknown fields.
		return fmt.Errorf("%w: %s", errInvalidJSON, strings.TrimPrefix(err.Error(), "json: "))
	default:
		// A field's UnmarshalJSON refused its value (a caller's type,
		// such as a rate-limit policy): the caller classifies it.
		return err
	}
}

// trimJSONSpace trims JSON whitespace (space, tab, CR, LF) at both ends.
func trimJSONSpace(b []byte) []byte {
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

// argError is a field-level validation error raised while decoding.
type argError struct{ msg string }

func (e *argError) Error() string { return engine.ErrInvalidArgument.Error() + ": " + e.msg }
func (e *argError) Unwrap() error { return engine.ErrInvalidArgument }

// isJSONInteger reports whether the JSON literal b is an integer number
// (no fraction, no exponent). b is known to be valid JSON.
func isJSONInteger(b []byte) bool {
	if len(b) == 0 || !(b[0] == '-' || (b[0] >= '0' && b[0] <= '9')) {
		return false
	}
	return bytes.IndexAny(b, ".eE") < 0
}

// jsonInt is an int64 field that accepts only JSON integer literals in
// range: 1.5, "1", 1e3, null and 1e30 are invalid_argument.
type jsonInt struct {
	V   int64
	Set bool
}

func (n *jsonInt) UnmarshalJSON(b []byte) error {
	if !isJSONInteger(b) {
		return &argError{fmt.Sprintf("expected an integer, got %s", truncate(string(b), 40))}
	}
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return &argError{fmt.Sprintf("integer %s out of int64 range", truncate(string(b), 40))}
	}
	n.V, n.Set = v, true
	return nil
}

// jsonDelta is the delta of an increment: an int64 as strict as jsonInt,
// or, for kind float, any JSON number or a string holding one, kept as
// text so that 0.1 is added exactly as Redis INCRBYFLOAT adds "0.1".
type jsonDelta struct {
	jsonInt
	Text string // the number's text; set with Set
	Str  bool   // given as a JSON string
}

func (d *jsonDelta) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		if err := json.Unmarshal(b, &d.Text); err != nil {
			return &argError{"delta: bad string"}
		}
		d.Str, d.Set = true, true
		return nil
	}
	if len(b) == 0 || !(b[0] == '-' || (b[0] >= '0' && b[0] <= '9')) {
		return &argError{fmt.Sprintf("expected a number, got %s", truncate(string(b), 40))}
	}
	d.Text, d.Set = string(b), true
	if isJSONInteger(b) {
		d.V, _ = strconv.ParseInt(string(b), 10, 64)
	}
	return nil
}

// integer returns the delta as an int64, or jsonInt's error.
func (d *jsonDelta) integer() (int64, error) {
	if d.Str || !isJSONInteger([]byte(d.Text)) {
		return 0, &argError{fmt.Sprintf("expected an integer, got %s", truncate(d.Text, 40))}
	}
	var n jsonInt
	if err := n.UnmarshalJSON([]byte(d.Text)); err != nil {
		return 0, err
	}
	return n.V, nil
}

// jsonUint is a uint64 field with the same strictness as jsonInt.
type jsonUint struct {
	V   uint64
	Set bool
}

func (n *jsonUint) UnmarshalJSON(b []byte) error {
	if !isJSONInteger(b) {
		return &argError{fmt.Sprintf("expected an integer, got %s", truncate(string(b), 40))}
	}
	v, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		return &argError{fmt.Sprintf("integer %s out of uint64 range", truncate(string(b), 40))}
	}
	n.V, n.Set = v, true
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// MaxTTL is the longest time to live accepted (about 100 years): the
// engine stores expiry as Unix nanoseconds, so now+TTL must fit an int64.
const MaxTTL = 100 * 365 * 24 * time.Hour

// ttlFromMillis converts a *_ms field to a duration in min ms..MaxTTL.
func ttlFromMillis(name string, ms int64, min int64) (time.Duration, error) {
	if ms < min || ms > int64(MaxTTL/time.Millisecond) {
		return 0, invalidArgf("%s: %d out of range %d..%d", name, ms, min, int64(MaxTTL/time.Millisecond))
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// parseDuration parses a Go duration string that must be positive.
func parseDuration(name, s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, invalidArgf("%s: %q is not a positive duration", name, s)
	}
	return d, nil
}

// pathID returns the validated path wildcard {id}.
func pathID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if err := engine.ValidateID(id); err != nil {
		return "", err
	}
	return id, nil
}

// MaxIdempotencyKeyLen is the longest Idempotency-Key accepted.
const MaxIdempotencyKeyLen = 255

// writeOptions reads the Idempotency-Key header and the durability override
// (?durability= or Counterd-Durability) of a mutation.
func writeOptions(r *http.Request) (engine.WriteOptions, error) {
	var wo engine.WriteOptions
	if vals, ok := r.Header["Idempotency-Key"]; ok {
		if len(vals) != 1 {
			return wo, invalidArgf("Idempotency-Key given %d times", len(vals))
		}
		key := vals[0]
		if len(key) == 0 || len(key) > MaxIdempotencyKeyLen {
			return wo, invalidArgf("Idempotency-Key must be 1..%d bytes, got %d", MaxIdempotencyKeyLen, len(key))
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x20 || key[i] > 0x7e {
				return wo, invalidArgf("Idempotency-Key byte %d is not printable ASCII", i)
			}
		}
		wo.IdempotencyKey = key
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return wo, invalidArgf("query: %v", err)
	}
	var ds []string
	ds = append(ds, q["durability"]...)
	ds = append(ds, r.Header.Values("Counterd-Durability")...)
	for i, s := range ds {
		if i > 0 && s != ds[0] {
			return wo, invalidArgf("conflicting durability %q and %q", ds[0], s)
		}
	}
	if len(ds) > 0 {
		d, err := engine.ParseDurability(ds[0])
		if err != nil {
			return wo, err
		}
		wo.Durability = d
	}
	return wo, nil
}
