package ratelimitapi

import (
	"strconv"
	"strings"
	"time"

	"github.com/counterd/counterd/internal/ratelimit"
)

// Header names. RateLimit and RateLimit-Policy follow
// draft-ietf-httpapi-ratelimit-headers-11; X-RateLimit-* are the legacy
// headers of seed 003 (X-RateLimit-Reset is a Unix time in seconds).
const (
	HeaderRateLimit          = "RateLimit"
	HeaderRateLimitPolicy    = "RateLimit-Policy"
	HeaderXRateLimitLimit    = "X-RateLimit-Limit"
	HeaderXRateLimitRemain   = "X-RateLimit-Remaining"
	HeaderXRateLimitReset    = "X-RateLimit-Reset"
	HeaderRetryAfter         = "Retry-After"
	rateLimitedMessagePrefix = "rate limited, retry after "
)

// appendHeaders calls add for each rate limit header of a check: hits and
// sts (one status per hit) and the binding status agg, at now.
//
//	RateLimit-Policy: "name";q=<limit>;w=<period in s, rounded up>, ...
//	RateLimit:        "name";r=<remaining>;t=<s until reset, or until retry when denied>, ...
//	X-RateLimit-Limit, X-RateLimit-Remaining: of the binding limit
//	X-RateLimit-Reset: Unix seconds when the binding limit resets (or, denied, may be retried)
//	Retry-After: seconds, rounded up, only when denied
//
// A name listed several times (one policy on several keys) appears once
// in each field, with the lowest remaining.
func appendHeaders(add func(name, value string), now time.Time, hits []ratelimit.Hit, sts []ratelimit.Status, agg ratelimit.Status) {
	var pol, rl strings.Builder
	for i := range hits {
		name := hits[i].Limit.DisplayName()
		if j := firstWithName(hits, i, name); j != i {
			continue
		}
		s := sts[i]
		for j := i + 1; j < len(hits); j++ {
			if sts[j].Remaining < s.Remaining && hits[j].Limit.DisplayName() == name {
				s = sts[j]
			}
		}
		if pol.Len() > 0 {
			pol.WriteString(", ")
			rl.WriteString(", ")
		}
		writeSFString(&pol, name)
		pol.WriteString(";q=")
		pol.WriteString(strconv.FormatInt(hits[i].Limit.Limit, 10))
		pol.WriteString(";w=")
		pol.WriteString(strconv.FormatInt(max(1, ceilSeconds(hits[i].Limit.Period)), 10))
		writeSFString(&rl, name)
		rl.WriteString(";r=")
		rl.WriteString(strconv.FormatInt(s.Remaining, 10))
		rl.WriteString(";t=")
		rl.WriteString(strconv.FormatInt(ceilSeconds(window(s)), 10))
	}
	add(HeaderRateLimitPolicy, pol.String())
	add(HeaderRateLimit, rl.String())
	add(HeaderXRateLimitLimit, strconv.FormatInt(agg.Limit, 10))
	add(HeaderXRateLimitRemain, strconv.FormatInt(agg.Remaining, 10))
	add(HeaderXRateLimitReset, strconv.FormatInt(ceilUnix(now.Add(window(agg))), 10))
	if !agg.Allowed {
		add(HeaderRetryAfter, strconv.FormatInt(retryAfterSeconds(agg), 10))
	}
}

func firstWithName(hits []ratelimit.Hit, i int, name string) int {
	for j := 0; j < i; j++ {
		if hits[j].Limit.DisplayName() == name {
			return j
		}
	}
	return i
}

// window is the draft's effective window: until reset, or, when denied,
// until the hit may be retried (so Retry-After is not before it ends).
func window(s ratelimit.Status) time.Duration {
	if !s.Allowed {
		return s.RetryAfter
	}
	return s.Reset
}

func retryAfterSeconds(s ratelimit.Status) int64 { return max(1, ceilSeconds(s.RetryAfter)) }

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

func ceilUnix(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}

// writeSFString writes s as a Structured Field string: quoted, with " and
// \ escaped and other bytes outside printable ASCII replaced by '?'.
func writeSFString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}
