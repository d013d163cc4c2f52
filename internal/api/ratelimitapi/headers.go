package ratelimitapi

import (
	"net/http"
	"strconv"
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
	// The values are built in one buffer and made one string, cut for
	// each header.
	var polBuf, rlBuf [128]byte
	pol, rl := polBuf[:0], rlBuf[:0]
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
		if len(pol) > 0 {
			pol = append(pol, ", "...)
			rl = append(rl, ", "...)
		}
		pol = appendSFString(pol, name)
		pol = append(pol, ";q="...)
		pol = strconv.AppendInt(pol, hits[i].Limit.Limit, 10)
		pol = append(pol, ";w="...)
		pol = strconv.AppendInt(pol, max(1, ceilSeconds(hits[i].Limit.Period)), 10)
		rl = appendSFString(rl, name)
		rl = append(rl, ";r="...)
		rl = strconv.AppendInt(rl, s.Remaining, 10)
		rl = append(rl, ";t="...)
		rl = strconv.AppendInt(rl, ceilSeconds(window(s)), 10)
	}
	var allBuf [320]byte
	var ends [6]int
	all := append(allBuf[:0], pol...)
	ends[0] = len(all)
	all = append(all, rl...)
	ends[1] = len(all)
	all = strconv.AppendInt(all, agg.Limit, 10)
	ends[2] = len(all)
	all = strconv.AppendInt(all, agg.Remaining, 10)
	ends[3] = len(all)
	all = strconv.AppendInt(all, ceilUnix(now.Add(window(agg))), 10)
	ends[4] = len(all)
	n := 5
	if !agg.Allowed {
		all = strconv.AppendInt(all, retryAfterSeconds(agg), 10)
		ends[5] = len(all)
		n = 6
	}
	v := string(all)
	names := [6]string{HeaderRateLimitPolicy, HeaderRateLimit, HeaderXRateLimitLimit, HeaderXRateLimitRemain, HeaderXRateLimitReset, HeaderRetryAfter}
	from := 0
	for i := 0; i < n; i++ {
		add(names[i], v[from:ends[i]])
		from = ends[i]
	}
}

// canonicalHeaders are the canonical forms of the header names
// (http.CanonicalHeaderKey's), for headerAdder.
var canonicalHeaders = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{HeaderRateLimitPolicy, HeaderRateLimit, HeaderXRateLimitLimit, HeaderXRateLimitRemain, HeaderXRateLimitReset, HeaderRetryAfter} {
		m[k] = http.CanonicalHeaderKey(k)
	}
	return m
}()

// headerAdder returns hdr.Add for appendHeaders' names, which allocates
// once for the values rather than for each name and value.
func headerAdder(hdr http.Header) func(name, value string) {
	var vals []string
	return func(name, value string) {
		k, ok := canonicalHeaders[name]
		if !ok {
			k = http.CanonicalHeaderKey(name)
		}
		if old, ok := hdr[k]; ok {
			hdr[k] = append(old, value)
			return
		}
		if vals == nil {
			vals = make([]string, 0, 6)
		}
		vals = append(vals, value)
		hdr[k] = vals[len(vals)-1 : len(vals) : len(vals)]
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

// appendSFString appends s as a Structured Field string: quoted, with "
// and \ escaped and other bytes outside printable ASCII replaced by '?'.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
