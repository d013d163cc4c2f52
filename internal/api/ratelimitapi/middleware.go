package ratelimitapi

import (
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/counterd/counterd/internal/api/httpapi"
	"github.com/counterd/counterd/internal/ratelimit"
)

// Middleware limits the requests of next by the key keyFunc returns:
// against limits (cost 1 each), or, with no limits, against the policies
// matching the key (each policy's Cost). Every limited response carries
// RateLimit, RateLimit-Policy and X-RateLimit-* headers; a denied request
// is answered 429 with Retry-After and a JSON error of code
// "rate_limited", and next is not called. An allowed LeakyBucket request
// waits its Delay before next runs (it gives up if the client goes away).
//
// Requests pass unlimited, without headers, when keyFunc returns "", when
// no policy matches the key, and when the check fails (a closed limiter,
// or a Router whose key owner is unavailable with FallbackError): the
// middleware fails open. It panics if a limit is invalid.
//
// c decides: a *Limiter, or a *Router to decide on the key's owner in a
// cluster. Policies are c.Local()'s.
func Middleware(c ratelimit.Checker, keyFunc func(*http.Request) string, limits ...ratelimit.Limit) func(http.Handler) http.Handler {
	l := c.Local()
	for _, lim := range limits {
		if err := lim.Validate(); err != nil {
			panic("ratelimit: Middleware: " + err.Error())
		}
	}
	limits = append([]ratelimit.Limit(nil), limits...)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key := keyFunc(r)
			if key == "" {
				next.ServeHTTP(w, r)
				return
			}
			var hbuf [8]ratelimit.Hit
			var sbuf [8]ratelimit.Status
			hits := hbuf[:0]
			var err error
			if len(limits) > 0 {
				for _, lim := range limits {
					hits = append(hits, ratelimit.Hit{Key: key, Limit: lim, Cost: 1})
				}
			} else if hits, err = l.AppendPolicyHits(hits, key, nil, ratelimit.PolicyCost); err != nil {
				next.ServeHTTP(w, r)
				return
			}
			sts := sbuf[:0]
			if len(hits) > len(sbuf) {
				sts = make([]ratelimit.Status, len(hits))
			}
			sts = sts[:len(hits)]
			agg, err := c.CheckMultiContext(r.Context(), hits, sts)
			if err != nil {
				next.ServeHTTP(w, r)
				return
			}
			appendHeaders(w.Header().Set, l.Now(), hits, sts, agg)
			if !agg.Allowed {
				httpapi.WriteErrorCode(w, http.StatusTooManyRequests, "rate_limited",
					rateLimitedMessagePrefix+strconv.FormatInt(retryAfterSeconds(agg), 10)+"s")
				return
			}
			if agg.Delay > 0 {
				t := time.NewTimer(agg.Delay)
				select {
				case <-t.C:
				case <-r.Context().Done():
					t.Stop()
					return
				}
			}
			next.ServeHTTP(w, r)
		})
	}
}

// KeyByRemoteIP returns a keyFunc for Middleware: prefix + the client's IP
// (r.RemoteAddr without the port). Behind a proxy, use a keyFunc that
// reads the header the proxy sets instead.
func KeyByRemoteIP(prefix string) func(*http.Request) string {
	return func(r *http.Request) string {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		return prefix + host
	}
}

// KeyByHeader returns a keyFunc for Middleware: prefix + the value of the
// header, or "" (not limited) when the request has none.
func KeyByHeader(prefix, header string) func(*http.Request) string {
	return func(r *http.Request) string {
		v := r.Header.Get(header)
		if v == "" {
			return ""
		}
		return prefix + v
	}
}
