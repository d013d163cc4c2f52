package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/httpjson"
)

// readBody reads the whole request body, at most opts.MaxBodyBytes.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	return httpjson.ReadBody(w, r, h.opts.MaxBodyBytes)
}

// decodeBody reads the body and decodes it strictly into v (see
// httpjson.DecodeStrict). An empty body is refused: a request that changes
// something says so with at least "{}", so that a body-less POST (a
// browser form, a link prefetch) never increments by the default delta.
func (h *Handler) decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	b, err := h.readBody(w, r)
	if err != nil {
		return err
	}
	if len(httpjson.TrimSpace(b)) == 0 {
		return fmt.Errorf("%w: empty body: send a JSON object (\"{}\" for the defaults)", httpjson.ErrInvalidJSON)
	}
	return httpjson.DecodeStrict(b, v)
}

// argError is a field-level validation error raised while decoding.
type argError struct{ msg string }

func (e *argError) Error() string { return contract.ErrInvalidArgument.Error() + ": " + e.msg }
func (e *argError) Unwrap() error { return contract.ErrInvalidArgument }

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

// jsonTime is an explicit event time ("ts" of increment, decrement and
// pfadd): RFC 3339 text or whole Unix milliseconds, as events' ts
// (engine.ParseEventTime).
type jsonTime struct {
	At  int64 // unix ns
	Set bool
}

func (t *jsonTime) UnmarshalJSON(b []byte) error {
	text := string(b)
	if len(b) > 0 && b[0] == '"' {
		if err := json.Unmarshal(b, &text); err != nil {
			return &argError{"ts: " + err.Error()}
		}
	} else if !isJSONInteger(b) {
		return &argError{fmt.Sprintf("ts: expected RFC 3339 text or whole Unix milliseconds, got %s", truncate(string(b), 40))}
	}
	at, err := engine.ParseEventTime(text)
	if err != nil {
		return &argError{"ts: " + strings.TrimPrefix(err.Error(), contract.ErrInvalidArgument.Error()+": ")}
	}
	t.At, t.Set = at, true
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
	if err := contract.ValidateID(id); err != nil {
		return "", err
	}
	return id, nil
}

// MaxIdempotencyKeyLen is the longest Idempotency-Key accepted.
const MaxIdempotencyKeyLen = 255

// writeOptions reads the Idempotency-Key header and the durability override
// (?durability= or Counterd-Durability) of a mutation.
func writeOptions(r *http.Request) (contract.WriteOptions, error) {
	var wo contract.WriteOptions
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
		d, err := contract.ParseDurability(ds[0])
		if err != nil {
			return wo, err
		}
		wo.Durability = d
	}
	return wo, nil
}

// ReadBody reads r's whole body, at most max bytes, as every front end of
// the HTTP API does (httpjson.ReadBody).
func ReadBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, error) {
	return httpjson.ReadBody(w, r, max)
}
