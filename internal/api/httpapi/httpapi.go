// Package httpapi is counterd's HTTP/JSON front end (docs/http-api.md).
//
// It is a thin adapter: every handler decodes and validates its request,
// builds an contract.Op (or calls an engine read), and encodes the answer. All
// counter semantics live in the engine; engine errors are mapped to wire
// errors in one place (errors.go).
package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/httpjson"
	"github.com/counterd/counterd/internal/quota"
)

// Defaults for Options.
const (
	DefaultMaxBodyBytes = 1 << 20 // 1 MiB
	DefaultMaxBatch     = 1000
)

// Options configure a Handler. The zero value is usable.
type Options struct {
	// MaxBodyBytes is the largest request body accepted; larger bodies get
	// 413 body_too_large. <= 0 means DefaultMaxBodyBytes (1 MiB).
	MaxBodyBytes int64
	// MaxBatch is the largest number of ops in POST /batch (and ids in
	// POST /pfcount); more get 413 batch_too_large. <= 0 means
	// DefaultMaxBatch (1000). The engine applies its own limit as well.
	MaxBatch int
	// Registerer receives the HTTP and engine metrics and Gatherer serves
	// them at GET /metrics. If Registerer is nil a private registry (with
	// the Go and process collectors) is used for both. If only Gatherer is
	// nil, Registerer is used when it is also a Gatherer (a
	// *prometheus.Registry is), else prometheus.DefaultGatherer.
	Registerer prometheus.Registerer
	Gatherer   prometheus.Gatherer
	// Logger receives a Debug record per request and an Error record per
	// 5xx answer. nil means slog.Default().
	Logger *slog.Logger
	// Authorize, when set, runs before each route's handler with the route
	// as "METHOD pattern" (see Routes); an error is answered like any
	// other (an auth.ErrForbidden is 403 forbidden). It reuses this
	// Handler's routing, so access control costs no second route match.
	// Default nil: no check.
	Authorize func(r *http.Request, route string) error
	// Ready backs GET /readyz: nil error answers 200, else 503. nil means
	// the engine's Ready method.
	Ready func() error
	// Global, when set, answers GET /counters/{id}?scope=global and
	// GlobalAggregate GET /counters/{prefix}*/aggregate?scope=global (a
	// region's value plus every peer region's, internal/region): the
	// returned value is encoded as the JSON answer. Unset: scope=global
	// is 400 invalid_argument (no --peer-regions).
	Global          func(ctx context.Context, id string) (any, error)
	GlobalAggregate func(ctx context.Context, prefix string) (any, error)
	// Quotas backs GET /quotas: the usage of every quota (--quotas).
	// nil: the engine's when it is an contract.QuotaBackend, else no
	// quotas.
	Quotas func(ctx context.Context) ([]quota.Usage, error)
	// EventMaxSkew bounds how far ahead of the clock an increment's or
	// pfadd's explicit "ts" may be (--events-max-skew; <= 0:
	// engine.DefaultMaxSkew). Later ones are 400 invalid_argument.
	EventMaxSkew time.Duration
}

// Handler serves the counterd HTTP API. Create it with New.
type Handler struct {
	eng     contract.Backend
	opts    Options
	log     *slog.Logger
	ready   func() error
	mux     *http.ServeMux
	metrics *metrics
	noRoute http.Handler // 404 or 405
	emptyID http.Handler // /counters//...
}

var _ http.Handler = (*Handler)(nil)

// New returns a Handler serving the API over eng.
func New(eng contract.Backend, opts Options) *Handler {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = DefaultMaxBatch
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Registerer == nil {
		reg := prometheus.NewRegistry()
		reg.MustRegister(
			collectors.NewGoCollector(),
			collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		)
		opts.Registerer = reg
		if opts.Gatherer == nil {
			opts.Gatherer = reg
		}
	}
	if opts.Gatherer == nil {
		if g, ok := opts.Registerer.(prometheus.Gatherer); ok {
			opts.Gatherer = g
		} else {
			opts.Gatherer = prometheus.DefaultGatherer
		}
	}
	h := &Handler{
		eng:   eng,
		opts:  opts,
		log:   opts.Logger,
		ready: opts.Ready,
		mux:   http.NewServeMux(),
	}
	if h.ready == nil {
		h.ready = eng.Ready
	}
	if qb, ok := eng.(contract.QuotaBackend); ok && h.opts.Quotas == nil {
		h.opts.Quotas = qb.Quotas
	}
	h.metrics = newMetrics(opts.Registerer, eng, opts.Gatherer, h.log)
	if h.opts.Quotas != nil {
		register[prometheus.Collector](opts.Registerer, &quotaCollector{usage: h.opts.Quotas}, h.log)
	}
	for _, rt := range routeTable() {
		key, fn := rt.Method+" "+rt.Pattern, rt.Handle
		if authz := opts.Authorize; authz != nil {
			next := fn
			fn = func(h *Handler, w http.ResponseWriter, r *http.Request) error {
				if err := authz(r, key); err != nil {
					return err
				}
				return next(h, w, r)
			}
		}
		h.mux.Handle(key, h.instrument(rt.Name, fn))
	}
	h.noRoute = h.instrument("unmatched", (*Handler).unmatched)
	h.emptyID = h.instrument("unmatched", func(*Handler, http.ResponseWriter, *http.Request) error {
		return fmt.Errorf("%w: empty", contract.ErrInvalidID)
	})
	return h
}

// handlerFunc is a route's body. It writes a success answer itself and
// returns a non-nil error for every failure; the error is then written by
// writeError, the only place engine errors become wire errors.
type handlerFunc func(h *Handler, w http.ResponseWriter, r *http.Request) error

// route is one entry of the routing table. The same table registers the
// ServeMux and is checked against openapi.json by the tests.
type route struct {
	Method  string
	Pattern string // ServeMux path pattern with {wildcards}
	Name    string // metrics label "op" and log attribute
	Handle  handlerFunc
}

// routeTable returns every route, in the order of docs/http-api.md.
func routeTable() []route {
	return []route{
		{"POST", "/counters/{id}/increment", "increment", (*Handler).increment},
		{"POST", "/counters/{id}/decrement", "decrement", (*Handler).decrement},
		{"GET", "/counters/{id}", "get", (*Handler).get},
		{"PUT", "/counters/{id}", "set", (*Handler).set},
		{"DELETE", "/counters/{id}", "delete", (*Handler).delete},
		{"PUT", "/counters/{id}/ttl", "expire", (*Handler).expire},
		{"DELETE", "/counters/{id}/ttl", "persist", (*Handler).persist},
		{"GET", "/counters/{id}/ttl", "ttl", (*Handler).ttl},
		{"POST", "/counters/{id}/pfadd", "pfadd", (*Handler).pfadd},
		{"GET", "/counters/{id}/pfcount", "pfcount", (*Handler).pfcount},
		{"POST", "/pfcount", "pfcount_union", (*Handler).pfcountUnion},
		{"POST", "/counters/{id}/pfmerge", "pfmerge", (*Handler).pfmerge},
		{"POST", "/counters/{id}/hincr", "hincr", (*Handler).hincr},
		{"GET", "/counters/{id}/fields", "fields", (*Handler).fields},
		{"GET", "/counters/{id}/fields/{field}", "hget", (*Handler).hget},
		{"DELETE", "/counters/{id}/fields/{field}", "hdel", (*Handler).hdel},
		{"GET", "/counters/{id}/window", "window", (*Handler).window},
		{"GET", "/counters/{id}/series", "series", (*Handler).series},
		{"GET", "/counters/{id}/uniques", "uniques", (*Handler).uniques},
		{"GET", "/counters/{id}/aggregate", "aggregate", (*Handler).aggregate},
		{"GET", "/counters", "list", (*Handler).list},
		{"POST", "/batch", "batch", (*Handler).batch},
		{"GET", "/rollups", "rollups", (*Handler).rollupList},
		{"GET", "/rollups/{key}", "rollup_get", (*Handler).rollupGet},
		{"PUT", "/rollups/{key}", "rollup_set", (*Handler).rollupPut},
		{"DELETE", "/rollups/{key}", "rollup_delete", (*Handler).rollupDelete},
		{"GET", "/quotas", "quotas", (*Handler).quotas},
		{"GET", "/capabilities", "capabilities", (*Handler).capabilities},
		{"GET", "/whoami", "whoami", (*Handler).whoami},
		{"GET", "/healthz", "healthz", (*Handler).healthz},
		{"GET", "/readyz", "readyz", (*Handler).readyz},
		{"GET", "/metrics", "metrics", (*Handler).serveMetrics},
		{"GET", "/openapi.json", "openapi", (*Handler).openapi},
	}
}

// Routes lists every route as "METHOD pattern" (the access-control table
// must name each).
func Routes() []string {
	var out []string
	for _, rt := range routeTable() {
		out = append(out, rt.Method+" "+rt.Pattern)
	}
	return out
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// ServeMux redirects paths that are not clean ("/counters//increment")
	// and answers unknown routes in plain text; the contract wants JSON
	// errors, so those cases are answered here.
	p := r.URL.EscapedPath()
	if rest, ok := strings.CutPrefix(p, "/counters/"); ok && (rest == "" || rest[0] == '/') {
		h.emptyID.ServeHTTP(w, r)
		return
	}
	if _, pattern := h.mux.Handler(r); pattern == "" || !isCleanPath(p) {
		h.noRoute.ServeHTTP(w, r)
		return
	}
	h.mux.ServeHTTP(w, r)
}

// isCleanPath reports whether p has no empty, "." or ".." segments, that is
// whether ServeMux would route it instead of redirecting.
func isCleanPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	for seg := range strings.SplitSeq(p[1:], "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// unmatched answers a request no route matches: 405 with Allow when the
// path matches another method, else 404. ServeMux decides which; its
// plain-text answer is discarded.
func (h *Handler) unmatched(w http.ResponseWriter, r *http.Request) error {
	cw := &discardWriter{header: http.Header{}}
	if isCleanPath(r.URL.EscapedPath()) {
		h.mux.ServeHTTP(cw, r)
	}
	if cw.status == http.StatusMethodNotAllowed {
		w.Header().Set("Allow", cw.header.Get("Allow"))
		return fmt.Errorf("%w: %s %s", httpjson.ErrMethodNotAllowed, r.Method, r.URL.EscapedPath())
	}
	return fmt.Errorf("%w: no route for %s %s", httpjson.ErrRouteNotFound, r.Method, r.URL.EscapedPath())
}

// discardWriter keeps the status and header of an answer and drops its body.
type discardWriter struct {
	header http.Header
	status int
}

func (w *discardWriter) Header() http.Header { return w.header }
func (w *discardWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}
func (w *discardWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return len(b), nil
}

// statusWriter records the status and size of an answer.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
	err    error // the error written by writeError, for the log
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// instrument wraps a route body with error writing, panic recovery,
// metrics and logging.
func (h *Handler) instrument(name string, fn handlerFunc) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		start := time.Now()
		w := &statusWriter{ResponseWriter: rw}
		func() {
			defer func() {
				if v := recover(); v != nil {
					if v == http.ErrAbortHandler {
						panic(v)
					}
					err := fmt.Errorf("panic: %v\n%s", v, debug.Stack())
					if w.status == 0 {
						h.writeError(w, err)
					} else {
						w.err = err
					}
				}
			}()
			if err := fn(h, w, r); err != nil {
				h.writeError(w, err)
			}
		}()
		if w.status == 0 {
			w.WriteHeader(http.StatusOK)
		}
		d := time.Since(start)
		h.metrics.observe(name, w.status, d)
		attrs := []any{
			slog.String("op", name),
			slog.String("method", r.Method),
			slog.String("path", r.URL.EscapedPath()),
			slog.Int("status", w.status),
			slog.Duration("duration", d),
			slog.Int64("bytes", w.bytes),
			slog.String("remote", r.RemoteAddr),
		}
		// A read-only node (full disk) logged that once; its 507s and
		// /readyz 503s are not logged per request.
		if w.status >= 500 && !errors.Is(w.err, contract.ErrInsufficientStorage) {
			if w.err != nil {
				attrs = append(attrs, slog.Any("err", w.err))
			}
			h.log.ErrorContext(r.Context(), "http request failed", attrs...)
			return
		}
		if w.err != nil {
			attrs = append(attrs, slog.String("err", w.err.Error()))
		}
		h.log.DebugContext(r.Context(), "http request", attrs...)
	})
}
