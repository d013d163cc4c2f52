package rollup

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/counterd/counterd/internal/counter"
)

// Errors. Every error of this package wraps one of them.
var (
	ErrInvalid = errors.New("rollup: invalid argument")
	ErrCorrupt = errors.New("rollup: corrupt stored value")
)

// Granularity is the width of a bucket: a UTC minute, hour, day or
// calendar month.
type Granularity uint8

const (
	Minute Granularity = iota
	Hour
	Day
	Month
	numGranularities
)

var granularityNames = [...]string{"minute", "hour", "day", "month"}

func (g Granularity) String() string {
	if g < numGranularities {
		return granularityNames[g]
	}
	return fmt.Sprintf("granularity(%d)", g)
}

// ParseGranularity parses "minute", "hour", "day" or "month".
func ParseGranularity(s string) (Granularity, error) {
	for i, n := range granularityNames {
		if n == s {
			return Granularity(i), nil
		}
	}
	return 0, fmt.Errorf("%w: granularity must be minute, hour, day or month, not %q", ErrInvalid, s)
}

// Sketch precision bounds and default: p = 14 is a relative standard error
// of 1.04/sqrt(2^14) = 0.81% in 12 KiB (dense, as stored).
const (
	MinPrecision     uint8 = 10
	MaxPrecision     uint8 = 16
	DefaultPrecision uint8 = 14
)

// Query bounds of unique counts.
const (
	MaxUniqueDays  = 400    // last=Nd: N in 1..400
	MaxUniqueHours = 7 * 24 // last=Nh: N in 1..168, and the longest UniqueHours retention
	DayLevels      = 8      // day-sketch unions over aligned 2^1..2^8 days
	HourLevels     = 5      // hour-sketch unions over aligned 2^1..2^5 hours
	maxRetention   = 100 * 365 * 24 * time.Hour
)

// Spec says which rollups a counter keeps. A retention of 0 means "not
// kept"; otherwise data is kept for at least that long (whole stored chunks
// are dropped once all their buckets are older; reads never show buckets
// older than the retention).
//
// The zero Spec keeps nothing. Specs are values; the engine shares them
// through pointers it never modifies.
type Spec struct {
	Minute time.Duration // retention of minute buckets (DefaultSpec: 48h)
	Hour   time.Duration // retention of hour buckets (DefaultSpec: 90 days)
	Day    time.Duration // retention of day buckets (DefaultSpec: 400 days)
	Month  time.Duration // retention of month buckets (DefaultSpec: 3660 days)

	// UniqueHours and UniqueDays are the retention of the per-hour and
	// per-day sketches of hll counters (DefaultSpec: 48h and 400 days).
	UniqueHours time.Duration
	UniqueDays  time.Duration
	// Precision of the sketches, MinPrecision..MaxPrecision; 0 means
	// DefaultPrecision (14: 0.81% standard error).
	Precision uint8
}

// DefaultSpec returns the documented defaults.
func DefaultSpec() Spec {
	const day = 24 * time.Hour
	return Spec{
		Minute:      48 * time.Hour,
		Hour:        90 * day,
		Day:         400 * day,
		Month:       3660 * day,
		UniqueHours: 48 * time.Hour,
		UniqueDays:  400 * day,
		Precision:   DefaultPrecision,
	}
}

// Retention returns the retention of g's buckets (0: not kept).
func (s *Spec) Retention(g Granularity) time.Duration {
	switch g {
	case Minute:
		return s.Minute
	case Hour:
		return s.Hour
	case Day:
		return s.Day
	case Month:
		return s.Month
	}
	return 0
}

// SketchRetention returns the retention of the sketches of unit (Hour or
// Day; 0 for any other).
func (s *Spec) SketchRetention(unit Granularity) time.Duration {
	switch unit {
	case Hour:
		return s.UniqueHours
	case Day:
		return s.UniqueDays
	}
	return 0
}

// Uniques reports whether s keeps any sketches.
func (s *Spec) Uniques() bool { return s.UniqueHours > 0 || s.UniqueDays > 0 }

// precision returns the sketch precision, defaulted.
func (s *Spec) precision() uint8 {
	if s.Precision == 0 {
		return DefaultPrecision
	}
	return s.Precision
}

// Validate returns an error wrapping ErrInvalid for a negative or too long
// retention, a retention shorter than one bucket, a sketch retention above
// MaxUniqueHours hours or MaxUniqueDays days, or a precision outside
// MinPrecision..MaxPrecision.
func (s *Spec) Validate() error {
	for g := Minute; g < numGranularities; g++ {
		if err := checkRetention(g.String(), s.Retention(g), g.width()); err != nil {
			return err
		}
	}
	if err := checkRetention("unique_hours", s.UniqueHours, time.Hour); err != nil {
		return err
	}
	if s.UniqueHours > MaxUniqueHours*time.Hour {
		return fmt.Errorf("%w: unique_hours retention %v is above %d hours", ErrInvalid, s.UniqueHours, MaxUniqueHours)
	}
	if err := checkRetention("unique_days", s.UniqueDays, 24*time.Hour); err != nil {
		return err
	}
	if s.UniqueDays > MaxUniqueDays*24*time.Hour {
		return fmt.Errorf("%w: unique_days retention %v is above %d days", ErrInvalid, s.UniqueDays, MaxUniqueDays)
	}
	if s.Precision != 0 && (s.Precision < MinPrecision || s.Precision > MaxPrecision) {
		return fmt.Errorf("%w: precision %d outside %d..%d", ErrInvalid, s.Precision, MinPrecision, MaxPrecision)
	}
	return nil
}

func checkRetention(name string, d, min time.Duration) error {
	switch {
	case d < 0:
		return fmt.Errorf("%w: %s retention %v is negative", ErrInvalid, name, d)
	case d > maxRetention:
		return fmt.Errorf("%w: %s retention %v is above 100 years", ErrInvalid, name, d)
	case d > 0 && d < min:
		return fmt.Errorf("%w: %s retention %v is shorter than one bucket (%v)", ErrInvalid, name, d, min)
	}
	return nil
}

// width returns the nominal width of g's buckets (a month counts 31 days).
func (g Granularity) width() time.Duration {
	switch g {
	case Minute:
		return time.Minute
	case Hour:
		return time.Hour
	case Day:
		return 24 * time.Hour
	}
	return 31 * 24 * time.Hour
}

// ParseRetention parses a retention: a Go duration ("48h", "90m") or a
// whole number of days ("30d"). "0" means not kept.
func ParseRetention(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		v, err := strconv.ParseInt(n, 10, 64)
		if err != nil || v < 0 || v > int64(maxRetention/(24*time.Hour)) {
			return 0, fmt.Errorf("%w: retention %q: want a Go duration or a number of days like \"30d\"", ErrInvalid, s)
		}
		return time.Duration(v) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%w: retention %q: want a Go duration or a number of days like \"30d\"", ErrInvalid, s)
	}
	return d, nil
}

// FormatRetention formats d as ParseRetention reads it: whole days as
// "30d", anything else as a Go duration, 0 as "0".
func FormatRetention(d time.Duration) string {
	const day = 24 * time.Hour
	switch {
	case d == 0:
		return "0"
	case d%day == 0:
		return strconv.FormatInt(int64(d/day), 10) + "d"
	}
	return d.String()
}

const formatSpec byte = 0x61

// MarshalBinary encodes s: format byte 0x61, the six retentions as uvarint
// nanoseconds (minute, hour, day, month, unique hours, unique days), then
// the precision byte.
func (s Spec) MarshalBinary() ([]byte, error) {
	b := []byte{formatSpec}
	for _, d := range []time.Duration{s.Minute, s.Hour, s.Day, s.Month, s.UniqueHours, s.UniqueDays} {
		if d < 0 {
			return nil, fmt.Errorf("%w: negative retention", ErrInvalid)
		}
		b = binary.AppendUvarint(b, uint64(d))
	}
	return append(b, s.Precision), nil
}

// UnmarshalBinary decodes what MarshalBinary wrote and validates it.
func (s *Spec) UnmarshalBinary(data []byte) error {
	if len(data) == 0 || data[0] != formatSpec {
		return fmt.Errorf("%w: spec: bad format byte", ErrCorrupt)
	}
	data = data[1:]
	var out Spec
	for _, p := range []*time.Duration{&out.Minute, &out.Hour, &out.Day, &out.Month, &out.UniqueHours, &out.UniqueDays} {
		v, n := binary.Uvarint(data)
		if n <= 0 || v > uint64(maxRetention) {
			return fmt.Errorf("%w: spec: bad retention", ErrCorrupt)
		}
		*p = time.Duration(v)
		data = data[n:]
	}
	if len(data) != 1 {
		return fmt.Errorf("%w: spec: bad length", ErrCorrupt)
	}
	out.Precision = data[0]
	if err := out.Validate(); err != nil {
		return fmt.Errorf("%w: spec: %v", ErrCorrupt, err)
	}
	*s = out
	return nil
}

// newSketch returns an empty sketch of the spec's precision.
func (s *Spec) newSketch() *counter.HLL {
	h, err := counter.NewHLL(s.precision())
	if err != nil {
		panic("rollup: validated precision rejected: " + err.Error())
	}
	return h
}

// StdError returns the relative standard error of the spec's sketches.
func (s *Spec) StdError() float64 {
	h := s.newSketch()
	return h.StdError()
}
