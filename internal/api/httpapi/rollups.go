package httpapi

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/rollup"
)

// Rollup routes (docs/time.md): series and unique counts of one counter,
// and the rollup specs of namespaces or ids.

// seriesAnswer is the answer of GET /counters/{id}/series.
type seriesAnswer struct {
	ID          string       `json:"id"`
	Granularity string       `json:"granularity"`
	Source      string       `json:"source"`
	From        string       `json:"from"`
	To          string       `json:"to"`
	Total       int64        `json:"total"`
	Buckets     []bucketJSON `json:"buckets"`
}

// defaultSeriesBuckets is how many buckets a series without from covers.
const defaultSeriesBuckets = 60

func (h *Handler) series(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return invalidArgf("query: %v", err)
	}
	g := rollup.Hour
	if s := q.Get("granularity"); s != "" {
		if g, err = rollup.ParseGranularity(s); err != nil {
			return invalidArgf("granularity: %q is not minute, hour, day or month", truncate(s, 40))
		}
	}
	now := h.eng.Now()
	to := now
	if s := q.Get("to"); s != "" {
		if to, err = parseTime("to", s, now); err != nil {
			return err
		}
	}
	var from time.Time
	if s := q.Get("from"); s != "" {
		if from, err = parseTime("from", s, now); err != nil {
			return err
		}
	} else {
		// The last defaultSeriesBuckets buckets up to to.
		b := g.Bucket(to.UnixNano())
		from = time.Unix(0, g.Start(b-defaultSeriesBuckets+1))
		to = time.Unix(0, g.Start(b+1))
	}
	s, err := h.eng.Series(r.Context(), id, g, from, to)
	if err != nil {
		return err
	}
	out := seriesAnswer{
		ID: id, Granularity: s.Granularity.String(), Source: s.Source.String(),
		From: formatTime(s.From), To: formatTime(s.To), Total: s.Total,
		Buckets: make([]bucketJSON, len(s.Values)),
	}
	for i, v := range s.Values {
		out.Buckets[i] = bucketJSON{Start: formatTime(s.Start(i)), Count: v}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// parseTime reads a query time: RFC 3339, integer Unix seconds, "now", or
// a negative offset from now ("-24h", "-30d").
func parseTime(name, s string, now time.Time) (time.Time, error) {
	switch {
	case s == "now":
		return now, nil
	case strings.HasPrefix(s, "-"):
		d, err := rollup.ParseRetention(s[1:])
		if err != nil {
			return time.Time{}, invalidArgf("%s: %q is not an offset like -24h or -30d", name, truncate(s, 40))
		}
		return now.Add(-d), nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < -1<<40 || n > 1<<40 {
			return time.Time{}, invalidArgf("%s: %d Unix seconds out of range", name, n)
		}
		return time.Unix(n, 0), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, invalidArgf("%s: %q is not RFC 3339, Unix seconds, now or -duration", name, truncate(s, 40))
	}
	return t, nil
}

// uniquesAnswer is the answer of GET /counters/{id}/uniques.
type uniquesAnswer struct {
	ID        string  `json:"id"`
	Last      string  `json:"last"`
	From      string  `json:"from"`
	To        string  `json:"to"`
	Value     uint64  `json:"value"`
	StdError  float64 `json:"std_error"`
	Low       uint64  `json:"low"`
	High      uint64  `json:"high"`
	Precision uint8   `json:"precision"`
	Sketches  int     `json:"sketches"`
}

func (h *Handler) uniques(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return invalidArgf("query: %v", err)
	}
	last := q.Get("last")
	if last == "" {
		last = "1d"
	}
	unit, n, err := parseLast(last)
	if err != nil {
		return err
	}
	est, err := h.eng.Uniques(r.Context(), id, unit, n)
	if err != nil {
		return err
	}
	lo, hi := est.Bounds(1.96)
	writeJSON(w, http.StatusOK, uniquesAnswer{
		ID: id, Last: last, From: formatTime(est.From), To: formatTime(est.To),
		Value: est.Value, StdError: est.StdError, Low: lo, High: hi,
		Precision: est.Precision, Sketches: est.Merged,
	})
	return nil
}

// parseLast parses "Nd" (days) or "Nh" (hours).
func parseLast(s string) (rollup.Granularity, int, error) {
	unit := rollup.Day
	num, ok := strings.CutSuffix(s, "d")
	if !ok {
		if num, ok = strings.CutSuffix(s, "h"); !ok {
			return 0, 0, invalidArgf("last: %q is not a number of days or hours like 7d or 24h", truncate(s, 40))
		}
		unit = rollup.Hour
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 1 || n > math.MaxInt32 || strings.HasPrefix(num, "+") {
		return 0, 0, invalidArgf("last: %q is not a number of days or hours like 7d or 24h", truncate(s, 40))
	}
	return unit, n, nil
}

// rollupJSON is a rollup spec on the wire: retentions as Go durations or
// whole days ("30d"); "0" means not kept.
type rollupJSON struct {
	Minute      *string `json:"minute"`
	Hour        *string `json:"hour"`
	Day         *string `json:"day"`
	Month       *string `json:"month"`
	UniqueHours *string `json:"unique_hours"`
	UniqueDays  *string `json:"unique_days"`
	Precision   jsonInt `json:"precision"`
}

// spec returns the spec q describes; absent members take their
// rollup.DefaultSpec value.
func (q *rollupJSON) spec() (rollup.Spec, error) {
	s := rollup.DefaultSpec()
	for _, f := range []struct {
		name string
		in   *string
		out  *time.Duration
	}{
		{"minute", q.Minute, &s.Minute}, {"hour", q.Hour, &s.Hour}, {"day", q.Day, &s.Day},
		{"month", q.Month, &s.Month}, {"unique_hours", q.UniqueHours, &s.UniqueHours},
		{"unique_days", q.UniqueDays, &s.UniqueDays},
	} {
		if f.in == nil {
			continue
		}
		d, err := rollup.ParseRetention(*f.in)
		if err != nil {
			return s, invalidArgf("%s: %q is not a retention like 48h or 30d", f.name, truncate(*f.in, 40))
		}
		*f.out = d
	}
	if q.Precision.Set {
		if q.Precision.V < int64(rollup.MinPrecision) || q.Precision.V > int64(rollup.MaxPrecision) {
			return s, invalidArgf("precision: %d is not in %d..%d", q.Precision.V, rollup.MinPrecision, rollup.MaxPrecision)
		}
		s.Precision = uint8(q.Precision.V)
	}
	if err := s.Validate(); err != nil {
		return s, fmt.Errorf("%w: %v", contract.ErrInvalidArgument, err)
	}
	return s, nil
}

// rollupOut is a spec in answers: every member present.
type rollupOut struct {
	Minute      string  `json:"minute"`
	Hour        string  `json:"hour"`
	Day         string  `json:"day"`
	Month       string  `json:"month"`
	UniqueHours string  `json:"unique_hours"`
	UniqueDays  string  `json:"unique_days"`
	Precision   uint8   `json:"precision"`
	StdError    float64 `json:"std_error"`
}

func rollupBody(s rollup.Spec) rollupOut {
	f := rollup.FormatRetention
	p := s.Precision
	if p == 0 {
		p = rollup.DefaultPrecision
	}
	return rollupOut{
		Minute: f(s.Minute), Hour: f(s.Hour), Day: f(s.Day), Month: f(s.Month),
		UniqueHours: f(s.UniqueHours), UniqueDays: f(s.UniqueDays),
		Precision: p, StdError: s.StdError(),
	}
}

type rollupAnswer struct {
	Key    string    `json:"key"`
	Rollup rollupOut `json:"rollup"`
	Status string    `json:"status,omitempty"`
}

type rollupsAnswer struct {
	Rollups map[string]rollupOut `json:"rollups"`
}

type rollupDeletedAnswer struct {
	Key     string `json:"key"`
	Deleted bool   `json:"deleted"`
	Status  string `json:"status"`
}

func rollupKey(r *http.Request) (string, error) {
	key := r.PathValue("key")
	if err := engine.ValidateRollupKey(key); err != nil {
		return "", err
	}
	return key, nil
}

func (h *Handler) rollupList(w http.ResponseWriter, r *http.Request) error {
	all, err := h.eng.Rollups(r.Context())
	if err != nil {
		return err
	}
	out := rollupsAnswer{Rollups: map[string]rollupOut{}}
	for k, s := range all {
		out.Rollups[k] = rollupBody(s)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *Handler) rollupGet(w http.ResponseWriter, r *http.Request) error {
	key, err := rollupKey(r)
	if err != nil {
		return err
	}
	s, ok, err := h.eng.Rollup(r.Context(), key)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: no rollups configured for %q", contract.ErrNotFound, key)
	}
	writeJSON(w, http.StatusOK, rollupAnswer{Key: key, Rollup: rollupBody(s)})
	return nil
}

func (h *Handler) rollupPut(w http.ResponseWriter, r *http.Request) error {
	key, err := rollupKey(r)
	if err != nil {
		return err
	}
	var q rollupJSON
	if err := h.decodeBody(w, r, &q); err != nil {
		return err
	}
	s, err := q.spec()
	if err != nil {
		return err
	}
	if err := h.eng.SetRollup(r.Context(), key, s); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, rollupAnswer{Key: key, Rollup: rollupBody(s), Status: "ok"})
	return nil
}

func (h *Handler) rollupDelete(w http.ResponseWriter, r *http.Request) error {
	key, err := rollupKey(r)
	if err != nil {
		return err
	}
	ok, err := h.eng.DeleteRollup(r.Context(), key)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, rollupDeletedAnswer{Key: key, Deleted: ok, Status: "ok"})
	return nil
}
