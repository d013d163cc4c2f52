package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/httpjson"
)

// writeJSON writes v as the JSON answer with status (httpjson.WriteJSON);
// an encoding failure is kept for the log.
func writeJSON(w http.ResponseWriter, status int, v any) {
	if err := httpjson.WriteJSON(w, status, v); err != nil {
		if sw, ok := w.(*statusWriter); ok {
			sw.err = err
		}
	}
}

// timeFormat is RFC 3339 in UTC with milliseconds.
const timeFormat = "2006-01-02T15:04:05.000Z07:00"

func formatTime(t time.Time) string { return t.UTC().Format(timeFormat) }

// Answers. Field order follows docs/http-api.md; the increment answer
// starts with the seed's {"value", "status"}.

type addAnswer struct {
	Value   int64  `json:"value"`
	Status  string `json:"status"`
	ID      string `json:"id"`
	Version uint64 `json:"version"`
	Kind    string `json:"kind"`
}

// floatAddAnswer is addAnswer for a float counter (value: floatValue).
type floatAddAnswer struct {
	Value   any    `json:"value"`
	Status  string `json:"status"`
	ID      string `json:"id"`
	Version uint64 `json:"version"`
	Kind    string `json:"kind"`
}

// floatValue is how a float counter's value goes into JSON: its exact
// decimal text (Redis INCRBYFLOAT's) as a JSON number, or, beyond the
// float64 range (long doubles reach 1e4932), as a JSON string holding it,
// since most JSON decoders would fail or answer infinity.
func floatValue(text string) any {
	if _, err := strconv.ParseFloat(text, 64); err != nil {
		return text
	}
	return json.Number(text)
}

type setAnswer struct {
	ID      string `json:"id"`
	Value   int64  `json:"value"`
	Version uint64 `json:"version"`
	Status  string `json:"status"`
}

type deletedAnswer struct {
	ID      string `json:"id"`
	Deleted bool   `json:"deleted"`
	Status  string `json:"status"`
}

type changedAnswer struct {
	ID      string `json:"id"`
	Changed bool   `json:"changed"`
	Status  string `json:"status"`
}

type pfaddAnswer struct {
	ID      string `json:"id"`
	Changed bool   `json:"changed"`
	Value   int64  `json:"value"`
	Status  string `json:"status"`
}

type valueAnswer struct {
	ID     string `json:"id"`
	Value  int64  `json:"value"`
	Status string `json:"status"`
}

type hincrAnswer struct {
	ID     string         `json:"id"`
	Fields map[string]any `json:"fields"` // int64, or floatValue for a float field
	Status string         `json:"status"`
}

type batchAnswer struct {
	Results []any  `json:"results"`
	Status  string `json:"status"`
}

type ttlAnswer struct {
	ID    string `json:"id"`
	TTLMs int64  `json:"ttl_ms"`
}

type pfcountAnswer struct {
	ID       string  `json:"id,omitempty"`
	Value    uint64  `json:"value"`
	StdError float64 `json:"std_error"`
}

type fieldsAnswer struct {
	ID     string         `json:"id"`
	Fields map[string]any `json:"fields"`
}

type hgetAnswer struct {
	ID     string `json:"id"`
	Field  string `json:"field"`
	Value  any    `json:"value"` // int64, or floatValue for a float field
	Exists bool   `json:"exists"`
}

type aggregateAnswer struct {
	Prefix string `json:"prefix"`
	Value  int64  `json:"value"`
	Count  int    `json:"count"`
}

type listAnswer struct {
	IDs    []string `json:"ids"`
	Cursor uint64   `json:"cursor"`
}

// whoamiAnswer is GET /whoami.
type whoamiAnswer struct {
	Auth   bool        `json:"auth"`
	User   string      `json:"user"`
	Grants []grantJSON `json:"grants"`
	ID     *string     `json:"id,omitempty"`
	Perm   *string     `json:"perm,omitempty"` // on ID: none, read, write or admin
}

type grantJSON struct {
	Pattern string `json:"pattern"`
	Perm    string `json:"perm"`
}

// sortedListAnswer is GET /counters without a cursor: ids in byte order,
// and the after of the next page ("" when this page is the last).
type sortedListAnswer struct {
	IDs  []string `json:"ids"`
	Next string   `json:"next"`
}

type statusAnswer struct {
	Status string `json:"status"`
}

// resultBody encodes the Result of the mutation named name (a route or
// batch op name). Single routes and batch results share it, and it is a
// pure function of the Result, so an idempotent replay answers the same
// bytes.
func resultBody(name string, res contract.Result) any {
	switch name {
	case "set":
		return setAnswer{ID: res.ID, Value: res.Value, Version: res.Version, Status: "ok"}
	case "delete", "hdel":
		return deletedAnswer{ID: res.ID, Deleted: res.Changed, Status: "ok"}
	case "expire", "persist":
		return changedAnswer{ID: res.ID, Changed: res.Changed, Status: "ok"}
	case "pfadd":
		return pfaddAnswer{ID: res.ID, Changed: res.Changed, Value: res.Value, Status: "ok"}
	case "pfmerge":
		return valueAnswer{ID: res.ID, Value: res.Value, Status: "ok"}
	case "hincr":
		return hincrAnswer{ID: res.ID, Fields: fieldMap(res.Fields), Status: "ok"}
	default: // increment, decrement
		if res.Kind == contract.KindFloat {
			return floatAddAnswer{Value: floatValue(res.Float), Status: "ok", ID: res.ID, Version: res.Version, Kind: res.Kind.String()}
		}
		return addAnswer{Value: res.Value, Status: "ok", ID: res.ID, Version: res.Version, Kind: res.Kind.String()}
	}
}

// fieldMap turns hash fields into a JSON object (never null): integer
// fields as numbers, float fields as floatValue writes a float counter.
func fieldMap(fs []counter.Field) map[string]any {
	m := make(map[string]any, len(fs))
	for _, f := range fs {
		name, v := fieldValue(f)
		m[name] = v
	}
	return m
}

type replicaJSON struct {
	Replica string `json:"replica"`
	P       uint64 `json:"p"`
	N       uint64 `json:"n"`
}

type bucketJSON struct {
	Start string `json:"start"`
	Count int64  `json:"count"`
}

// viewJSON is the answer of GET /counters/{id}. Kind-specific members are
// pointers so that they appear exactly for their kind.
type viewJSON struct {
	ID          string          `json:"id"`
	Kind        string          `json:"kind"`
	Value       any             `json:"value"` // int64, or floatValue for a float counter
	Version     uint64          `json:"version"`
	UpdatedAt   *string         `json:"updated_at"`
	Exists      bool            `json:"exists"`
	ExpiresAt   *string         `json:"expires_at,omitempty"`
	Shards      *[]int64        `json:"shards,omitempty"`
	Replicas    *[]replicaJSON  `json:"replicas,omitempty"`
	StdError    *float64        `json:"std_error,omitempty"`
	Precision   *uint8          `json:"precision,omitempty"`
	Fields      *map[string]any `json:"fields,omitempty"`
	Granularity *string         `json:"granularity,omitempty"`
	Window      *string         `json:"window,omitempty"`
	Fixed       *bool           `json:"fixed,omitempty"`
	Buckets     *[]bucketJSON   `json:"buckets,omitempty"`
}

func viewBody(id string, v contract.View) viewJSON {
	out := viewJSON{ID: id, Kind: v.Kind.String(), Value: v.Value, Version: v.Version, Exists: v.Exists}
	if !v.Exists {
		out.Kind = contract.KindNone.String()
		out.Value, out.Version = int64(0), 0
		return out
	}
	if v.Kind == contract.KindFloat {
		out.Value = floatValue(v.Float)
	}
	if !v.UpdatedAt.IsZero() {
		s := formatTime(v.UpdatedAt)
		out.UpdatedAt = &s
	}
	if !v.ExpiresAt.IsZero() {
		s := formatTime(v.ExpiresAt)
		out.ExpiresAt = &s
	}
	switch v.Kind {
	case contract.KindSharded:
		shards := append([]int64{}, v.Shards...)
		out.Shards = &shards
	case contract.KindPN:
		reps := make([]replicaJSON, 0, len(v.Replicas))
		for _, s := range v.Replicas {
			reps = append(reps, replicaOf(s))
		}
		out.Replicas = &reps
	case contract.KindHLL:
		se, p := v.StdError, v.Precision
		out.StdError, out.Precision = &se, &p
	case contract.KindHash:
		m := fieldMap(v.Fields)
		out.Fields = &m
	case contract.KindWindow:
		wb := windowBody(id, v)
		out.Granularity, out.Window, out.Fixed, out.Buckets = &wb.Granularity, &wb.Window, &wb.Fixed, &wb.Buckets
	}
	return out
}

// windowAnswer is the answer of GET /counters/{id}/window.
type windowAnswer struct {
	ID          string       `json:"id"`
	Value       int64        `json:"value"`
	Granularity string       `json:"granularity"`
	Window      string       `json:"window"`
	Fixed       bool         `json:"fixed"`
	Buckets     []bucketJSON `json:"buckets"`
	Exists      bool         `json:"exists"`
}

func windowBody(id string, v contract.View) windowAnswer {
	g, span, fixed := windowSpecOf(v.Window)
	out := windowAnswer{
		ID:          id,
		Value:       v.Value,
		Granularity: g.String(),
		Window:      span.String(),
		Fixed:       fixed,
		Buckets:     make([]bucketJSON, 0, len(v.Buckets)),
		Exists:      v.Exists,
	}
	if !v.Exists {
		out.Value = 0
	}
	for _, b := range v.Buckets {
		out.Buckets = append(out.Buckets, bucketOf(b))
	}
	return out
}

// WriteJSON writes v as a JSON answer with status, as every route of the
// HTTP API does (Content-Type application/json, nosniff).
func WriteJSON(w http.ResponseWriter, status int, v any) { writeJSON(w, status, v) }
