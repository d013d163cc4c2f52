package client

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
)

// Kind is the kind of a counter, fixed by its first write.
type Kind string

// The kinds of counters.
const (
	KindNone    Kind = "none"    // the counter does not exist
	KindCounter Kind = "counter" // exact int64 with version and TTL
	KindSharded Kind = "sharded" // N sub-counters summed on read
	KindPN      Kind = "pn"      // PN-counter CRDT
	KindHLL     Kind = "hll"     // HyperLogLog unique count
	KindWindow  Kind = "window"  // time buckets over a sliding or fixed window
	KindHash    Kind = "hash"    // named int64 fields
	KindFloat   Kind = "float"   // decimal value added like Redis INCRBYFLOAT
)

// Result is the answer to a mutation.
type Result struct {
	ID      string `json:"id"`
	Kind    Kind   `json:"kind,omitempty"`
	Value   int64  `json:"value"`           // new value; the estimate for hll
	Float   string `json:"float,omitempty"` // float: the new value's exact decimal text
	Version uint64 `json:"version"`         // new version
	// Changed reports whether the mutation changed state: false for a
	// Delete of a missing counter or a PFAdd that altered no register.
	Changed bool `json:"changed"`
	// Fields holds, for HIncr, the new values of the integer fields it
	// touched; FloatFields the exact text of the float ones (HIncrFloat).
	Fields      map[string]int64  `json:"fields,omitempty"`
	FloatFields map[string]string `json:"float_fields,omitempty"`
	// Replayed is set when the server answered from its idempotency table:
	// an earlier attempt with the same key had already been applied.
	Replayed bool `json:"replayed,omitempty"`
}

// Counter is a consistent read of one counter. Which of the kind-specific
// fields are set depends on Kind.
type Counter struct {
	ID        string    `json:"id"`
	Kind      Kind      `json:"kind"`
	Exists    bool      `json:"exists"`
	Value     int64     `json:"value"`           // value, sum, estimate or window sum; 0 for hash and float
	Float     string    `json:"float,omitempty"` // float: the value's exact decimal text
	Version   uint64    `json:"version"`
	UpdatedAt time.Time `json:"updated_at"` // zero when the counter does not exist
	ExpiresAt time.Time `json:"expires_at"` // zero without a TTL

	Shards    []int64          `json:"shards,omitempty"`    // sharded
	Replicas  []Replica        `json:"replicas,omitempty"`  // pn
	StdError  float64          `json:"std_error,omitempty"` // hll: relative standard error of Value
	Precision int              `json:"precision,omitempty"` // hll
	Fields    map[string]int64 `json:"fields,omitempty"`    // hash: integer fields
	// FloatFields are a hash's float fields, as exact decimal text.
	FloatFields map[string]string `json:"float_fields,omitempty"`
	Window      *WindowSpec       `json:"window,omitempty"`  // window
	Buckets     []Bucket          `json:"buckets,omitempty"` // window: oldest first
}

// Replica is one replica's slots of a pn counter.
type Replica struct {
	Replica string `json:"replica"`
	P       uint64 `json:"p"` // sum of increments
	N       uint64 `json:"n"` // sum of decrements
}

// WindowSpec describes a window counter: buckets of Granularity covering the
// last Window (sliding), or a Window that restarts at every multiple of
// Window (Fixed).
type WindowSpec struct {
	Granularity time.Duration `json:"granularity"`
	Window      time.Duration `json:"window"`
	Fixed       bool          `json:"fixed"`
}

// Bucket is one time bucket of a window counter.
type Bucket struct {
	Start time.Time `json:"start"`
	Count int64     `json:"count"`
}

// Window is the state of a window counter.
type Window struct {
	ID     string `json:"id"`
	Exists bool   `json:"exists"`
	Value  int64  `json:"value"` // sum of the buckets inside the window
	WindowSpec
	Buckets []Bucket `json:"buckets"` // oldest first
}

// Estimate is a HyperLogLog count.
type Estimate struct {
	Value    int64   `json:"value"`
	StdError float64 `json:"std_error"` // relative standard error of Value
}

// Aggregate is the sum over the counters whose id starts with Prefix.
type Aggregate struct {
	Prefix string `json:"prefix"`
	Value  int64  `json:"value"` // sum of the additive counters
	Count  int    `json:"count"` // number of counters summed
}

// NoTTL and NoCounter are what TTL returns for a counter without a time to
// live and for a missing counter (like Redis TTL's -1 and -2).
const (
	NoTTL     time.Duration = -1
	NoCounter time.Duration = -2
)

// Wire formats. They decode leniently (durations as "1s" or milliseconds,
// times as RFC 3339 or Unix milliseconds) so that small differences between
// server versions do not break the client.

type wireResult struct {
	ID      string     `json:"id"`
	Kind    string     `json:"kind"`
	Value   wireNumber `json:"value"`
	Version uint64     `json:"version"`
	Changed *bool      `json:"changed"`
	Deleted *bool      `json:"deleted"`
	Fields  wireFields `json:"fields"`
}

// wireFields are hash fields: integers, and floats as their text (a JSON
// number, or a string beyond the float64 range).
type wireFields map[string]wireNumber

// split returns the integer fields and the float ones (nil when none).
func (w wireFields) split() (ints map[string]int64, floats map[string]string) {
	if w == nil {
		return nil, nil
	}
	ints = make(map[string]int64, len(w))
	for name, n := range w {
		if n.isInt {
			ints[name] = n.int
			continue
		}
		if floats == nil {
			floats = map[string]string{}
		}
		floats[name] = n.text
	}
	return ints, floats
}

func (w *wireResult) result() Result {
	r := Result{
		ID:      w.ID,
		Kind:    Kind(w.Kind),
		Value:   w.Value.int,
		Version: w.Version,
	}
	r.Fields, r.FloatFields = w.Fields.split()
	if r.Kind == KindFloat {
		r.Float = w.Value.text
	}
	switch {
	case w.Changed != nil:
		r.Changed = *w.Changed
	case w.Deleted != nil:
		r.Changed = *w.Deleted
	default:
		r.Changed = true // increment, set, hincr: always a change
	}
	return r
}

type wireCounter struct {
	ID          string       `json:"id"`
	Kind        string       `json:"kind"`
	Exists      bool         `json:"exists"`
	Value       wireNumber   `json:"value"`
	Version     uint64       `json:"version"`
	UpdatedAt   wireTime     `json:"updated_at"`
	ExpiresAt   wireTime     `json:"expires_at"`
	Shards      []int64      `json:"shards"`
	Replicas    []Replica    `json:"replicas"`
	StdError    float64      `json:"std_error"`
	Precision   int          `json:"precision"`
	Fields      wireFields   `json:"fields"`
	Granularity wireDuration `json:"granularity"`
	Window      wireDuration `json:"window"`
	Fixed       bool         `json:"fixed"`
	Buckets     []wireBucket `json:"buckets"`
}

func (w *wireCounter) counter() Counter {
	c := Counter{
		ID:        w.ID,
		Kind:      Kind(w.Kind),
		Exists:    w.Exists,
		Value:     w.Value.int,
		Version:   w.Version,
		UpdatedAt: time.Time(w.UpdatedAt),
		ExpiresAt: time.Time(w.ExpiresAt),
		Shards:    w.Shards,
		Replicas:  w.Replicas,
		StdError:  w.StdError,
		Precision: w.Precision,
		Buckets:   buckets(w.Buckets),
	}
	c.Fields, c.FloatFields = w.Fields.split()
	if c.Kind == KindFloat {
		c.Float = w.Value.text
	}
	if c.Kind == "" && !c.Exists {
		c.Kind = KindNone
	}
	if w.Granularity != 0 || w.Window != 0 {
		c.Window = &WindowSpec{
			Granularity: time.Duration(w.Granularity),
			Window:      time.Duration(w.Window),
			Fixed:       w.Fixed,
		}
	}
	if c.Kind == KindHash && c.Fields == nil {
		c.Fields = map[string]int64{}
	}
	return c
}

type wireWindow struct {
	ID          string       `json:"id"`
	Exists      *bool        `json:"exists"`
	Value       int64        `json:"value"`
	Granularity wireDuration `json:"granularity"`
	Window      wireDuration `json:"window"`
	Fixed       bool         `json:"fixed"`
	Buckets     []wireBucket `json:"buckets"`
}

type wireBucket struct {
	Start wireTime `json:"start"`
	Count int64    `json:"count"`
}

func buckets(ws []wireBucket) []Bucket {
	if ws == nil {
		return nil
	}
	bs := make([]Bucket, len(ws))
	for i, b := range ws {
		bs[i] = Bucket{Start: time.Time(b.Start), Count: b.Count}
	}
	return bs
}

// wireNumber is a "value": an int64, or a float counter's decimal text
// (kept exact, not rounded to a float64), a JSON number or, beyond the
// float64 range, a string.
type wireNumber struct {
	int   int64
	text  string
	isInt bool // text is an int64 (a JSON integer)
}

func (n *wireNumber) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' { // a float beyond the float64 range
		return json.Unmarshal(b, &n.text)
	}
	var num json.Number
	if err := json.Unmarshal(b, &num); err != nil {
		return err
	}
	n.text = num.String()
	if v, err := num.Int64(); err == nil && strconv.FormatInt(v, 10) == n.text {
		n.int, n.isInt = v, true
	}
	return nil
}

// wireText reads a JSON null (null is true), string (quoted is true; its
// text) or bare number (its text), the forms wireDuration and wireTime take.
func wireText(b []byte) (text string, quoted, null bool, err error) {
	if bytes.Equal(b, []byte("null")) {
		return "", false, true, nil
	}
	if len(b) > 0 && b[0] == '"' {
		err = json.Unmarshal(b, &text)
		return text, true, false, err
	}
	return string(b), false, false, nil
}

// wireDuration is a Go duration string ("1s") or a number of milliseconds.
type wireDuration time.Duration

func (d *wireDuration) UnmarshalJSON(b []byte) error {
	s, quoted, null, err := wireText(b)
	switch {
	case err != nil || null:
		return err
	case quoted && s == "":
		*d = 0
	case quoted:
		v, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		*d = wireDuration(v)
	default:
		ms, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("duration %s: %w", b, err)
		}
		if math.Abs(ms) >= math.MaxInt64/float64(time.Millisecond) {
			return fmt.Errorf("duration %s ms: out of range", b)
		}
		*d = wireDuration(ms * float64(time.Millisecond))
	}
	return nil
}

// wireTime is an RFC 3339 time, null, or a number of Unix milliseconds.
type wireTime time.Time

func (t *wireTime) UnmarshalJSON(b []byte) error {
	s, quoted, null, err := wireText(b)
	switch {
	case err != nil || null || (quoted && s == ""):
		return err
	case quoted:
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return err
		}
		*t = wireTime(v)
	default:
		ms, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("time %s: %w", b, err)
		}
		*t = wireTime(time.UnixMilli(ms).UTC())
	}
	return nil
}
