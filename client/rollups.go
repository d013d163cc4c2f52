package client

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"time"
)

// Rollup granularities: the bucket sizes of Series (docs/time.md). Buckets
// are aligned to UTC; a month bucket is a calendar month.
const (
	GranularityMinute = "minute"
	GranularityHour   = "hour" // the server's default
	GranularityDay    = "day"
	GranularityMonth  = "month"
)

// Series is the rollup of an additive counter over a time range: every
// bucket of [From, To), zeros included, oldest first.
type Series struct {
	ID          string `json:"id"`
	Granularity string `json:"granularity"` // the bucket size asked for
	// Source is the stored granularity the buckets were summed from: the
	// coarsest kept one at or below Granularity that covers the range.
	Source  string    `json:"source"`
	From    time.Time `json:"from"` // start of the first bucket
	To      time.Time `json:"to"`   // end of the last bucket (exclusive)
	Total   int64     `json:"total"`
	Buckets []Bucket  `json:"buckets"`
}

// Values returns the counts of s's buckets, oldest first.
func (s *Series) Values() []int64 {
	vs := make([]int64, len(s.Buckets))
	for i, b := range s.Buckets {
		vs[i] = b.Count
	}
	return vs
}

// Uniques is the estimated number of distinct items an hll counter saw in
// its last N days or hours, from its per-day or per-hour sketches.
type Uniques struct {
	ID    string    `json:"id"`
	Last  string    `json:"last"` // as asked, such as "7d" or "24h"
	From  time.Time `json:"from"` // start of the first day or hour
	To    time.Time `json:"to"`   // end of the current day or hour (exclusive)
	Value uint64    `json:"value"`
	// StdError is the relative standard error of Value, 1.04/sqrt(2^Precision).
	StdError float64 `json:"std_error"`
	// Low and High are Value ∓ 1.96 standard errors: a 95% interval.
	Low       uint64 `json:"low"`
	High      uint64 `json:"high"`
	Precision uint8  `json:"precision"`
	Sketches  int    `json:"sketches"` // how many sketches the server merged
}

// RollupSpec says which rollups the counters of a namespace (the id up to
// its first ":") or of one id keep. Each retention is a Go duration ("48h")
// or a number of whole days ("30d"); "0" means not kept.
//
// In SetRollup an empty retention or a zero Precision takes the server's
// default (minute 2d, hour 90d, day 400d, month 3660d, unique_hours 2d,
// unique_days 400d, precision 14). The specs the server answers with have
// every field set.
type RollupSpec struct {
	Minute      string `json:"minute,omitempty"`       // minute buckets
	Hour        string `json:"hour,omitempty"`         // hour buckets
	Day         string `json:"day,omitempty"`          // day buckets
	Month       string `json:"month,omitempty"`        // calendar-month buckets
	UniqueHours string `json:"unique_hours,omitempty"` // hll: per-hour sketches, at most 168h
	UniqueDays  string `json:"unique_days,omitempty"`  // hll: per-day sketches, at most 400d
	// Precision of the hll sketches, 10..16.
	Precision uint8 `json:"precision,omitempty"`
	// StdError is the relative standard error of unique counts at
	// Precision. The server sets it in answers; SetRollup ignores it.
	StdError float64 `json:"std_error,omitempty"`
}

// wireSeries is the answer of GET /counters/{id}/series.
type wireSeries struct {
	ID          string       `json:"id"`
	Granularity string       `json:"granularity"`
	Source      string       `json:"source"`
	From        wireTime     `json:"from"`
	To          wireTime     `json:"to"`
	Total       int64        `json:"total"`
	Buckets     []wireBucket `json:"buckets"`
}

// wireUniques is the answer of GET /counters/{id}/uniques.
type wireUniques struct {
	ID        string   `json:"id"`
	Last      string   `json:"last"`
	From      wireTime `json:"from"`
	To        wireTime `json:"to"`
	Value     uint64   `json:"value"`
	StdError  float64  `json:"std_error"`
	Low       uint64   `json:"low"`
	High      uint64   `json:"high"`
	Precision uint8    `json:"precision"`
	Sketches  int      `json:"sketches"`
}

// rollupRequest is the body of PUT /rollups/{key}: absent members take the
// server's defaults. The server rejects unknown members, so std_error is
// not sent.
type rollupRequest struct {
	Minute      string `json:"minute,omitempty"`
	Hour        string `json:"hour,omitempty"`
	Day         string `json:"day,omitempty"`
	Month       string `json:"month,omitempty"`
	UniqueHours string `json:"unique_hours,omitempty"`
	UniqueDays  string `json:"unique_days,omitempty"`
	Precision   uint8  `json:"precision,omitempty"`
}

// rollupAnswer is the answer of GET and PUT /rollups/{key}.
type rollupAnswer struct {
	Key    string      `json:"key"`
	Rollup *RollupSpec `json:"rollup"`
}

func rollupPath(key string) string { return "/rollups/" + escape(key) }

// queryTime formats t for the series query: RFC 3339 in UTC.
func queryTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// Series returns the rollup of the additive counter id in buckets of
// granularity (GranularityMinute, GranularityHour, GranularityDay or
// GranularityMonth; "" is the server's default, hour) over [from, to),
// which the server aligns outward to whole buckets. A zero to is the
// server's now; a zero from is 60 buckets before to. At most 100,000
// buckets per call.
//
// The counter's id or namespace must have rollups (SetRollup), or Series
// fails with ErrNotFound; a missing counter in such a namespace reads as
// zeros. A hash or hll counter fails with ErrWrongKind, a bad range or a
// granularity with nothing kept at or below it with ErrInvalidArgument.
func (c *Client) Series(ctx context.Context, id, granularity string, from, to time.Time) (*Series, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	q := url.Values{}
	if granularity != "" {
		q.Set("granularity", granularity)
	}
	if !from.IsZero() {
		q.Set("from", queryTime(from))
	}
	if !to.IsZero() {
		q.Set("to", queryTime(to))
	}
	var w wireSeries
	if _, err := c.do(ctx, &request{method: http.MethodGet, path: counterPath(id, "series"), query: q}, &w); err != nil {
		return nil, err
	}
	s := &Series{
		ID:          w.ID,
		Granularity: w.Granularity,
		Source:      w.Source,
		From:        time.Time(w.From),
		To:          time.Time(w.To),
		Total:       w.Total,
		Buckets:     buckets(w.Buckets),
	}
	if s.ID == "" {
		s.ID = id
	}
	if s.Buckets == nil {
		s.Buckets = []Bucket{}
	}
	return s, nil
}

// Uniques returns the estimated number of distinct items the hll counter
// id saw in the last N UTC days including today (last "Nd", N in 1..400)
// or the last N hours including the current one ("Nh", N in 1..168); ""
// is the server's default, "1d". N may not exceed the retention of the
// sketches (RollupSpec.UniqueDays or UniqueHours).
//
// It fails with ErrNotFound when no rollup spec keeps sketches of that
// unit for id, ErrWrongKind when id is not an hll counter, and
// ErrInvalidArgument for a bad last.
func (c *Client) Uniques(ctx context.Context, id, last string) (*Uniques, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	q := url.Values{}
	if last != "" {
		q.Set("last", last)
	}
	var w wireUniques
	if _, err := c.do(ctx, &request{method: http.MethodGet, path: counterPath(id, "uniques"), query: q}, &w); err != nil {
		return nil, err
	}
	u := &Uniques{
		ID: w.ID, Last: w.Last, From: time.Time(w.From), To: time.Time(w.To),
		Value: w.Value, StdError: w.StdError, Low: w.Low, High: w.High,
		Precision: w.Precision, Sketches: w.Sketches,
	}
	if u.ID == "" {
		u.ID = id
	}
	return u, nil
}

// SetRollup makes spec the rollups of key: a namespace (the counters whose
// id starts with key+":", and the id key itself) or one id, which then
// overrides its namespace. Empty fields of spec take the server's
// defaults; the spec in force, with every field set, is returned. The
// server stores the spec durably and applies it at once to existing
// counters: newly kept granularities start empty (history is not rebuilt),
// dropped ones are deleted. A bad retention or precision fails with
// ErrInvalidArgument.
//
// SetRollup is idempotent, so it is retried like a read.
func (c *Client) SetRollup(ctx context.Context, key string, spec RollupSpec) (*RollupSpec, error) {
	if err := checkID(key); err != nil {
		return nil, err
	}
	body := rollupRequest{
		Minute: spec.Minute, Hour: spec.Hour, Day: spec.Day, Month: spec.Month,
		UniqueHours: spec.UniqueHours, UniqueDays: spec.UniqueDays, Precision: spec.Precision,
	}
	return c.rollup(ctx, &request{method: http.MethodPut, path: rollupPath(key), body: body})
}

// GetRollup returns the rollup spec in force for key (set with SetRollup
// or configured on the server), or an error that matches ErrNotFound when
// there is none. key is matched exactly: an id covered through its
// namespace has no spec of its own.
func (c *Client) GetRollup(ctx context.Context, key string) (*RollupSpec, error) {
	if err := checkID(key); err != nil {
		return nil, err
	}
	return c.rollup(ctx, &request{method: http.MethodGet, path: rollupPath(key)})
}

func (c *Client) rollup(ctx context.Context, r *request) (*RollupSpec, error) {
	var w rollupAnswer
	if _, err := c.do(ctx, r, &w); err != nil {
		return nil, err
	}
	if w.Rollup == nil {
		return nil, errors.New("client: " + r.method + " " + r.path + ": answer without a rollup")
	}
	return w.Rollup, nil
}

// DeleteRollup removes the runtime rollup spec of key and reports whether
// there was one. Counters no spec covers any more lose their stored
// rollups, unless a spec from the server's configuration (which
// DeleteRollup leaves in place, reporting false) still covers them. A
// retry after a lost answer reports false.
func (c *Client) DeleteRollup(ctx context.Context, key string) (bool, error) {
	if err := checkID(key); err != nil {
		return false, err
	}
	var w struct {
		Deleted bool `json:"deleted"`
	}
	_, err := c.do(ctx, &request{method: http.MethodDelete, path: rollupPath(key)}, &w)
	return w.Deleted && err == nil, err
}

// ListRollups returns every rollup spec in force (static and runtime), by
// namespace or id.
func (c *Client) ListRollups(ctx context.Context) (map[string]RollupSpec, error) {
	var w struct {
		Rollups map[string]RollupSpec `json:"rollups"`
	}
	if _, err := c.do(ctx, &request{method: http.MethodGet, path: "/rollups"}, &w); err != nil {
		return nil, err
	}
	if w.Rollups == nil {
		w.Rollups = map[string]RollupSpec{}
	}
	return w.Rollups, nil
}
