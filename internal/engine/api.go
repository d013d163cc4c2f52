package engine

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/counterd/counterd/internal/contract"
)

// Sentinel errors. Front ends map them to their own wire errors with errors.Is;
// every error the engine returns wraps exactly one of these.
var (
	// ErrTooLate: an op's event time (Op.At) is too old for what it
	// counts in (a window counter's window, every kept rollup's
	// retention). It always comes wrapped with ErrInvalidArgument, so front
	// ends that map that answer an invalid argument.
	ErrTooLate = errors.New("engine: event time too late")
	// ErrTooEarly: an explicit event time is further ahead of the clock
	// than the front end's skew allows (CheckEventTime). Wrapped with
	// ErrInvalidArgument like ErrTooLate.
	ErrTooEarly = errors.New("engine: event time too early")
)

// DefaultMaxSkew is how far ahead of the clock an explicit event time may
// be by default (--events-max-skew).
const DefaultMaxSkew = 5 * time.Minute

// CheckEventTime checks an explicit event time at (unix ns, not 0) sent
// by a client at time now: in 1900..2200 (ValidateAt) and at most maxSkew
// (<= 0: DefaultMaxSkew) ahead of now (ErrTooEarly). Every front end
// (HTTP "ts", RESP AT) calls it before building an Op with At.
func CheckEventTime(at int64, now time.Time, maxSkew time.Duration) error {
	if err := contract.ValidateAt(at); err != nil {
		return err
	}
	if maxSkew <= 0 {
		maxSkew = DefaultMaxSkew
	}
	if lim := now.Add(maxSkew).UnixNano(); at > lim {
		return fmt.Errorf("%w: %w: event time %s is more than %v ahead of the clock (%s)", contract.ErrInvalidArgument, ErrTooEarly,
			time.Unix(0, at).UTC().Format(time.RFC3339Nano), maxSkew, now.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// ParseEventTime parses an explicit event time as front ends take it:
// RFC 3339 text ("2026-11-25T10:00:00Z", fractions allowed) or a whole
// number of Unix milliseconds ("1764064800000", as events' ts). The
// result is unix ns in 1900..2200; anything else is ErrInvalidArgument.
func ParseEventTime(s string) (int64, error) {
	bad := func(why string) (int64, error) {
		if len(s) > 64 {
			s = s[:64] + "..."
		}
		return 0, fmt.Errorf("%w: event time %q: %s", contract.ErrInvalidArgument, s, why)
	}
	if s == "" {
		return bad("empty")
	}
	if c := s[0]; c == '-' || (c >= '0' && c <= '9') && !strings.ContainsAny(s, "T:") {
		ms, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return bad("not RFC 3339 text or whole Unix milliseconds")
		}
		if ms < contract.MinAt/int64(time.Millisecond) || ms >= contract.MaxAt/int64(time.Millisecond) {
			return bad("outside 1900..2200")
		}
		if ms == 0 {
			return bad("the Unix epoch itself (0 means now)")
		}
		return ms * int64(time.Millisecond), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return bad("not RFC 3339 text or whole Unix milliseconds")
	}
	if y := t.UTC().Year(); y < 1900 || y >= 2200 {
		return bad("outside 1900..2200")
	}
	if t.UnixNano() == 0 {
		return bad("the Unix epoch itself (0 means now)")
	}
	return t.UnixNano(), nil
}

// tooLate is the error of an add whose event time is too old.
func tooLate(id string, at int64, what string) error {
	return fmt.Errorf("%w: %w: %q: event time %s is older than %s", contract.ErrInvalidArgument, ErrTooLate, id,
		time.Unix(0, at).UTC().Format(time.RFC3339Nano), what)
}
