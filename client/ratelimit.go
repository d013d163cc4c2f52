package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"
)

// Limit is one rate limit of a check (docs/ratelimit.md).
type Limit struct {
	Name      string        // optional label, echoed in the decision
	Algorithm string        // fixed_window, sliding_window, sliding_log, token_bucket, leaky_bucket ("" = server default)
	Limit     int64         // hits allowed per Period
	Period    time.Duration // window or refill period
	Burst     int64         // token/leaky bucket capacity (0 = Limit)
}

// LimitDecision is the answer of a rate-limit check. Allowed is false when
// any limit refused the hit; nothing was consumed then.
type LimitDecision struct {
	Allowed      bool   `json:"allowed"`
	Key          string `json:"key"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	ResetMS      int64  `json:"reset_ms"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	Limits       []struct {
		Name      string `json:"name"`
		Algorithm string `json:"algorithm"`
		Limit     int64  `json:"limit"`
		Period    string `json:"period"`
		Allowed   bool   `json:"allowed"`
		Remaining int64  `json:"remaining"`
	} `json:"limits"`
}

// CheckLimit checks and consumes cost hits (0: only look) on key against
// every limit atomically: all consume or none does. A denial is not an
// error: the decision says Allowed false and when to retry. The check is
// not retried (a retry would consume again).
func (c *Client) CheckLimit(ctx context.Context, key string, cost int64, limits ...Limit) (*LimitDecision, error) {
	type limitJSON struct {
		Name      string `json:"name,omitempty"`
		Algorithm string `json:"algorithm,omitempty"`
		Limit     int64  `json:"limit"`
		PeriodMS  int64  `json:"period_ms"`
		Burst     int64  `json:"burst,omitempty"`
	}
	body := struct {
		Key    string      `json:"key"`
		Cost   int64       `json:"cost"`
		Limits []limitJSON `json:"limits"`
	}{Key: key, Cost: cost}
	for _, l := range limits {
		body.Limits = append(body.Limits, limitJSON{l.Name, l.Algorithm, l.Limit, l.Period.Milliseconds(), l.Burst})
	}
	var d LimitDecision
	_, err := c.do(ctx, &request{method: http.MethodPost, path: "/ratelimit/check", body: body, once: true, key: key}, &d)
	var ae *Error
	if errors.As(err, &ae) && ae.Status == http.StatusTooManyRequests {
		if json.Unmarshal(ae.Body, &d) == nil {
			return &d, nil
		}
	}
	if err != nil {
		return nil, err
	}
	return &d, nil
}
