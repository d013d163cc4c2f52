package server

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/counterd/counterd/internal/auth"
)

// countAuthFailures exports counterd_auth_failures_total{front_end,reason}
// and makes store count into it; nothing without --auth (nil store), where
// nothing is refused.
func countAuthFailures(store *auth.Store, reg prometheus.Registerer) {
	if store == nil {
		return
	}
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "counterd_auth_failures_total",
		Help: "Requests refused by authentication or authorization, by front end (http, resp, grpc) and reason (no_token, bad_token, forbidden).",
	}, []string{"front_end", "reason"})
	reg.MustRegister(vec)
	for _, fe := range []string{"http", "resp", "grpc"} {
		for _, r := range auth.Reasons {
			vec.WithLabelValues(fe, r) // export zeros, so rate() works from the start
		}
	}
	store.SetOnFailure(func(fe, reason string) { vec.WithLabelValues(fe, reason).Inc() })
}

// forbiddenCounter counts a 403 written by anything behind the auth
// middleware (the API's route and per-id checks, rate-limit keys, a
// forwarded check without a peer certificate) as one HTTP "forbidden".
type forbiddenCounter struct {
	http.ResponseWriter
	store   *auth.Store
	counted bool
}

func (w *forbiddenCounter) WriteHeader(code int) {
	if code == http.StatusForbidden && !w.counted {
		w.counted = true
		w.store.Failed("http", auth.ReasonForbidden)
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *forbiddenCounter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
