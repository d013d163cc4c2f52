package ratelimit

import (
	"bytes"
	"strconv"
	"time"
)

// The JSON of POST /ratelimit/check (docs/ratelimit.md). The HTTP front
// end (internal/api/ratelimitapi) decodes requests and encodes answers
// with these types; a Router encodes requests and decodes answers with
// them when it forwards a check to the key's owner.

// CheckRequest is the body of POST /ratelimit/check.
type CheckRequest struct {
	Key      string      `json:"key"`
	Cost     JSONInt     `json:"cost,omitzero"`
	Policy   string      `json:"policy,omitempty"`
	Policies []string    `json:"policies,omitempty"`
	Limits   []LimitJSON `json:"limits,omitempty"`
}

// LimitJSON is one ad-hoc limit of a CheckRequest.
type LimitJSON struct {
	// Key, when set, is the key of this limit's hit instead of the
	// request's (a multi-key atomic check).
	Key       string  `json:"key,omitempty"`
	Name      string  `json:"name,omitempty"`
	Algorithm string  `json:"algorithm,omitempty"`
	Limit     JSONInt `json:"limit,omitzero"`
	Period    string  `json:"period,omitempty"`
	PeriodMS  JSONInt `json:"period_ms,omitzero"`
	Burst     JSONInt `json:"burst,omitzero"`
	// Cost, when set, is this limit's cost instead of the request's.
	Cost JSONInt `json:"cost,omitzero"`
}

// CheckAnswer is the answer of POST /ratelimit/check, 200 or 429.
type CheckAnswer struct {
	Status       string        `json:"status"` // "ok" or "rate_limited"
	Allowed      bool          `json:"allowed"`
	Key          string        `json:"key"`
	Limit        int64         `json:"limit"`
	Remaining    int64         `json:"remaining"`
	ResetMS      int64         `json:"reset_ms"`
	RetryAfterMS int64         `json:"retry_after_ms"`
	DelayMS      int64         `json:"delay_ms"`
	Limits       []LimitAnswer `json:"limits"`
}

// LimitAnswer is one limit's status in a CheckAnswer.
type LimitAnswer struct {
	Name         string `json:"name"`
	Algorithm    string `json:"algorithm"`
	Limit        int64  `json:"limit"`
	Period       string `json:"period"`
	Burst        int64  `json:"burst,omitempty"`
	Cost         int64  `json:"cost"`
	Allowed      bool   `json:"allowed"`
	Remaining    int64  `json:"remaining"`
	ResetMS      int64  `json:"reset_ms"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	DelayMS      int64  `json:"delay_ms"`
}

// The router's names for the wire types.
type (
	checkRequest = CheckRequest
	limitJSON    = LimitJSON
	checkAnswer  = CheckAnswer
	jsonInt      = JSONInt
)

// NewCheckAnswer is the answer to a check of hits on key, with their
// statuses sts and the binding status agg. Durations are rounded up to
// milliseconds.
func NewCheckAnswer(key string, hits []Hit, sts []Status, agg Status) CheckAnswer {
	ans := CheckAnswer{Status: "ok", Allowed: agg.Allowed, Key: key, Limit: agg.Limit, Remaining: agg.Remaining,
		ResetMS: CeilMillis(agg.Reset), RetryAfterMS: CeilMillis(agg.RetryAfter), DelayMS: CeilMillis(agg.Delay),
		Limits: make([]LimitAnswer, len(hits))}
	for i, hit := range hits {
		s := sts[i]
		ans.Limits[i] = LimitAnswer{Name: hit.Limit.DisplayName(), Algorithm: hit.Limit.Algorithm.String(),
			Limit: hit.Limit.Limit, Period: FormatPeriod(hit.Limit.Period), Burst: hit.Limit.Burst, Cost: hit.Cost,
			Allowed: s.Allowed, Remaining: s.Remaining, ResetMS: CeilMillis(s.Reset),
			RetryAfterMS: CeilMillis(s.RetryAfter), DelayMS: CeilMillis(s.Delay)}
	}
	if !agg.Allowed {
		ans.Status = "rate_limited"
	}
	return ans
}

// ArgError is a field or argument error raised while decoding a request
// (JSON or RL.CHECK's arguments). It wraps ErrInvalidRequest; Msg is the
// message without the sentinel's.
type ArgError struct{ Msg string }

func (e *ArgError) Error() string { return ErrInvalidRequest.Error() + ": " + e.Msg }
func (e *ArgError) Unwrap() error { return ErrInvalidRequest }

// JSONInt is an int64 field that accepts only JSON integer literals in
// range: 1.5, "1", 1e3 and null are an *ArgError.
type JSONInt struct {
	V   int64
	Set bool
}

// UnmarshalJSON reads an integer literal.
func (n *JSONInt) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || !(b[0] == '-' || b[0] >= '0' && b[0] <= '9') || bytes.ContainsAny(b, ".eE") {
		return &ArgError{"expected an integer, got " + truncate(string(b), 40)}
	}
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return &ArgError{"integer " + truncate(string(b), 40) + " out of range"}
	}
	n.V, n.Set = v, true
	return nil
}

// MarshalJSON writes the integer (omit unset ones with omitzero).
func (n JSONInt) MarshalJSON() ([]byte, error) { return strconv.AppendInt(nil, n.V, 10), nil }

// CeilMillis is d in milliseconds, rounded up; 0 when d <= 0.
func CeilMillis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// ValidateKey checks a rate-limit key (errors wrap ErrInvalidKey), as
// every check does.
func ValidateKey(key string) error { return validateKey(key) }

// Truncate shortens s to n bytes for an error message ("..." marks a cut).
func Truncate(s string, n int) string { return truncate(s, n) }
