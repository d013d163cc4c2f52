package ratelimitapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/counterd/counterd/internal/api/httpapi"
	"github.com/counterd/counterd/internal/ratelimit"
)

// HTTPOptions configure NewHTTPHandler. The zero value is valid.
type HTTPOptions struct {
	// MaxBodyBytes bounds request bodies. Default 1 MiB.
	MaxBodyBytes int64
	// ReadOnlyPolicies answers 405 to PUT and DELETE on
	// /ratelimit/policies. Default false: policies are writable.
	ReadOnlyPolicies bool
	// Authorize, when set, is called with every check's limits before
	// anything is charged, forwarded checks included; an error refuses
	// the check (auth errors answer 401 or 403). Default nil: no check.
	Authorize func(ctx context.Context, hits []ratelimit.Hit) error
	// Policies, when set, receives every policy change (PUT and DELETE on
	// /ratelimit/policies) instead of the Checker's Limiter, and must make
	// it visible in Local() before it returns: a *PolicySync, which writes
	// through a shared PolicyStore and then updates the Limiter. Default
	// nil: changes go to Local() only (this process).
	Policies ratelimit.PolicyStore
	// Recent, when set, serves GET /ratelimit/decisions: the last
	// decisions it recorded (wrap the Checker with it). Default nil: the
	// route answers an empty list.
	Recent *ratelimit.Recorder
}

// NewHTTPHandler returns the HTTP API of c (docs/ratelimit.md):
//
//	POST   /ratelimit/check            check a key (200 allowed, 429 denied)
//	GET    /ratelimit/policies         list the policies
//	PUT    /ratelimit/policies         replace all policies (JSON, or YAML with a yaml Content-Type)
//	GET    /ratelimit/policies/{name}  one policy
//	PUT    /ratelimit/policies/{name}  add or replace one policy
//	DELETE /ratelimit/policies/{name}  remove one policy
//	GET    /ratelimit/decisions        the last decisions (HTTPOptions.Recent)
//
// Mount it under "/ratelimit/" (it matches full paths). Errors are
// {"status":"error","error":{"code","message"}} with the codes of
// docs/http-api.md. The handler is safe for concurrent use.
//
// c decides the checks: a *Limiter itself, or a *Router on the node that
// owns the key. A check carrying the ForwardedHeader was forwarded by
// another node's Router and is always decided by c.Local(), never
// forwarded again. Policies are c.Local()'s.
func NewHTTPHandler(c ratelimit.Checker, opts HTTPOptions) http.Handler {
	// Keep HTTPRoutes in step with this mux.
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 1 << 20
	}
	h := &httpHandler{c: c, l: c.Local(), opts: opts}
	mux := http.NewServeMux()
	mux.HandleFunc("/ratelimit/check", h.check)
	mux.HandleFunc("/ratelimit/policies", h.policies)
	mux.HandleFunc("/ratelimit/policies/{name}", h.policy)
	mux.HandleFunc("/ratelimit/decisions", h.decisions)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		httpapi.WriteError(w, httpapi.RouteNotFound(r))
	})
	return mux
}

// HTTPRoutes lists the routes NewHTTPHandler serves, as "METHOD pattern"
// (the access-control table must name each).
func HTTPRoutes() []string {
	return []string{
		"POST /ratelimit/check",
		"GET /ratelimit/policies",
		"PUT /ratelimit/policies",
		"GET /ratelimit/policies/{name}",
		"PUT /ratelimit/policies/{name}",
		"DELETE /ratelimit/policies/{name}",
		"GET /ratelimit/decisions",
	}
}

type httpHandler struct {
	c    ratelimit.Checker
	l    *ratelimit.Limiter // c.Local()
	opts HTTPOptions
}

// decodeBody reads and strictly decodes the request body into v (an
// empty body is {}), or answers the error and returns false.
func (h *httpHandler) decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	b, err := httpapi.ReadBody(w, r, h.opts.MaxBodyBytes)
	if err == nil {
		err = httpapi.DecodeStrict(b, v)
	}
	if err != nil {
		writeError(w, err)
		return false
	}
	return true
}

// limitOf is the Limit of limits[i] of a check request.
func limitOf(j *ratelimit.LimitJSON, i int) (ratelimit.Limit, error) {
	lim := ratelimit.Limit{Name: j.Name, Algorithm: ratelimit.DefaultAlgorithm, Limit: j.Limit.V, Burst: j.Burst.V}
	if j.Name != "" {
		if err := ratelimit.ValidatePolicyName(j.Name); err != nil {
			return lim, errorf(ratelimit.ErrInvalidLimit, "limits[%d]: %v", i, strings.TrimPrefix(err.Error(), ratelimit.ErrInvalidPolicy.Error()+": "))
		}
	}
	if j.Algorithm != "" {
		a, err := ratelimit.ParseAlgorithm(j.Algorithm)
		if err != nil {
			return lim, errorf(ratelimit.ErrInvalidLimit, "limits[%d]: unknown algorithm %q", i, j.Algorithm)
		}
		lim.Algorithm = a
	}
	if !j.Limit.Set {
		return lim, errorf(ratelimit.ErrInvalidLimit, "limits[%d]: limit is required", i)
	}
	switch {
	case j.Period != "" && j.PeriodMS.Set:
		return lim, errorf(ratelimit.ErrInvalidLimit, "limits[%d]: give period or period_ms, not both", i)
	case j.PeriodMS.Set:
		if j.PeriodMS.V <= 0 || j.PeriodMS.V > int64(ratelimit.MaxPeriod/time.Millisecond) {
			return lim, errorf(ratelimit.ErrInvalidLimit, "limits[%d]: period_ms %d out of range", i, j.PeriodMS.V)
		}
		lim.Period = time.Duration(j.PeriodMS.V) * time.Millisecond
	default:
		p, err := ratelimit.ParsePeriod(j.Period)
		if err != nil {
			return lim, errorf(ratelimit.ErrInvalidLimit, "limits[%d]: %v", i, err)
		}
		lim.Period = p
	}
	if err := lim.Validate(); err != nil {
		return lim, errorf(ratelimit.ErrInvalidLimit, "limits[%d]: %s", i, strings.TrimPrefix(err.Error(), ratelimit.ErrInvalidLimit.Error()+": "))
	}
	return lim, nil
}

func (h *httpHandler) check(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		httpapi.MethodNotAllowed(w, r, "POST")
		return
	}
	var req ratelimit.CheckRequest
	b, err := h.readCheckBody(w, r)
	if err == nil {
		err = decodeCheck(b, &req)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	hits, err := h.hits(&req)
	if err != nil {
		writeError(w, err)
		return
	}
	if h.opts.Authorize != nil {
		if err := h.opts.Authorize(r.Context(), hits); err != nil {
			writeError(w, err)
			return
		}
	}
	sts := make([]ratelimit.Status, len(hits))
	c := h.c
	if r.Header.Get(ratelimit.ForwardedHeader) != "" {
		c = h.l // one hop: a forwarded check is decided here
	}
	agg, err := c.CheckMultiContext(r.Context(), hits, sts)
	if err != nil {
		writeError(w, err)
		return
	}
	appendHeaders(headerAdder(w.Header()), h.l.Now(), hits, sts, agg)
	ans := ratelimit.NewCheckAnswer(req.Key, hits, sts, agg)
	status := http.StatusOK
	if !agg.Allowed {
		status = http.StatusTooManyRequests
	}
	writeCheckAnswer(w, status, &ans)
}

var answerBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// The values of the answer's constant headers, shared (Header.Set's).
var (
	hdrJSON    = []string{"application/json"}
	hdrNoSniff = []string{"nosniff"}
)

// writeCheckAnswer is httpapi.WriteJSON(w, status, ans) with the answer
// encoded by appendCheckAnswer.
func writeCheckAnswer(w http.ResponseWriter, status int, ans *ratelimit.CheckAnswer) {
	bp := answerBufs.Get().(*[]byte)
	b := append(appendCheckAnswer((*bp)[:0], ans), '\n')
	hdr := w.Header()
	hdr["Content-Type"] = hdrJSON[:1:1]
	hdr["X-Content-Type-Options"] = hdrNoSniff[:1:1]
	w.WriteHeader(status)
	_, _ = w.Write(b)
	if cap(b) <= 64<<10 {
		*bp = b
		answerBufs.Put(bp)
	}
}

// readCheckBody is httpapi.ReadBody, without a copy when the body is
// one already in memory (an event loop's: BodyBytes).
func (h *httpHandler) readCheckBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if rb, ok := r.Body.(interface {
		Len() int
		BodyBytes() []byte
	}); ok && int64(rb.Len()) <= h.opts.MaxBodyBytes {
		return rb.BodyBytes(), nil
	}
	return httpapi.ReadBody(w, r, h.opts.MaxBodyBytes)
}

// hits turns a check request into the hits to check.
func (h *httpHandler) hits(req *ratelimit.CheckRequest) ([]ratelimit.Hit, error) {
	if err := ratelimit.ValidateKey(req.Key); err != nil {
		return nil, err
	}
	cost := int64(ratelimit.PolicyCost)
	if req.Cost.Set {
		if req.Cost.V < 0 {
			return nil, errorf(ratelimit.ErrInvalidCost, "cost %d is negative", req.Cost.V)
		}
		cost = req.Cost.V
	}
	names := req.Policies
	if req.Policy != "" {
		names = append([]string{req.Policy}, names...)
	}
	if len(names)+len(req.Limits) > ratelimit.MaxHits {
		return nil, errorf(ratelimit.ErrTooManyLimits, "%d limits, at most %d", len(names)+len(req.Limits), ratelimit.MaxHits)
	}
	var hits []ratelimit.Hit
	var err error
	if len(names) > 0 || len(req.Limits) == 0 {
		if hits, err = h.l.AppendPolicyHits(hits, req.Key, names, cost); err != nil {
			return nil, err
		}
	}
	for i := range req.Limits {
		lim, err := limitOf(&req.Limits[i], i)
		if err != nil {
			return nil, err
		}
		hit := ratelimit.Hit{Key: req.Key, Limit: lim, Cost: cost}
		if hit.Cost == ratelimit.PolicyCost {
			hit.Cost = 1
		}
		if l := &req.Limits[i]; l.Key != "" {
			if err := ratelimit.ValidateKey(l.Key); err != nil {
				return nil, fmt.Errorf("limits[%d]: %w", i, err)
			}
			hit.Key = l.Key
		}
		if l := &req.Limits[i]; l.Cost.Set {
			if l.Cost.V < 0 {
				return nil, errorf(ratelimit.ErrInvalidCost, "limits[%d]: cost %d is negative", i, l.Cost.V)
			}
			hit.Cost = l.Cost.V
		}
		hits = append(hits, hit)
	}
	return hits, nil
}

// replacePolicies, putPolicy and deletePolicy change the policies through
// opts.Policies when set, else in the local Limiter.
func (h *httpHandler) replacePolicies(ctx context.Context, ps []ratelimit.Policy) error {
	if h.opts.Policies != nil {
		return policyStoreErr(h.opts.Policies.ReplacePolicies(ctx, ps))
	}
	return h.l.SetPolicies(ps)
}

func (h *httpHandler) putPolicy(ctx context.Context, p ratelimit.Policy) error {
	if h.opts.Policies != nil {
		return policyStoreErr(h.opts.Policies.PutPolicy(ctx, p))
	}
	return h.l.SetPolicy(p)
}

func (h *httpHandler) deletePolicy(ctx context.Context, name string) (bool, error) {
	if h.opts.Policies != nil {
		ok, err := h.opts.Policies.DeletePolicy(ctx, name)
		return ok, policyStoreErr(err)
	}
	return h.l.DeletePolicy(name), nil
}

// policyStoreErr marks a store failure (not a policy the store refused)
// as ErrPolicyStoreUnavailable, answered 503.
func policyStoreErr(err error) error {
	if err == nil || errors.Is(err, ratelimit.ErrInvalidPolicy) || errors.Is(err, ratelimit.ErrPolicyStoreUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", ratelimit.ErrPolicyStoreUnavailable, err)
}

type policiesBody struct {
	Policies []ratelimit.Policy `json:"policies"`
}

func (h *httpHandler) policies(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		httpapi.WriteJSON(w, http.StatusOK, policiesBody{Policies: h.l.Policies()})
	case http.MethodPut:
		if h.opts.ReadOnlyPolicies {
			httpapi.MethodNotAllowed(w, r, "GET, HEAD")
			return
		}
		b, err := httpapi.ReadBody(w, r, h.opts.MaxBodyBytes)
		if err != nil {
			writeError(w, err)
			return
		}
		var ps []ratelimit.Policy
		if isYAML(r) {
			ps, err = ratelimit.LoadPolicies(bytes.NewReader(b))
		} else {
			var body policiesBody
			err = httpapi.DecodeStrict(b, &body)
			ps = body.Policies
		}
		if err == nil {
			err = h.replacePolicies(r.Context(), ps)
		}
		if err != nil {
			writeError(w, err)
			return
		}
		httpapi.WriteJSON(w, http.StatusOK, struct {
			Status   string `json:"status"`
			Policies int    `json:"policies"`
		}{"ok", len(ps)})
	default:
		httpapi.MethodNotAllowed(w, r, h.allow("GET, HEAD, PUT"))
	}
}

func (h *httpHandler) allow(rw string) string {
	if h.opts.ReadOnlyPolicies {
		return "GET, HEAD"
	}
	return rw
}

func isYAML(r *http.Request) bool {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return strings.HasSuffix(mt, "yaml")
}

func (h *httpHandler) policy(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		p, ok := h.l.Policy(name)
		if !ok {
			writeError(w, errorf(ratelimit.ErrUnknownPolicy, "%q", name))
			return
		}
		httpapi.WriteJSON(w, http.StatusOK, p)
	case http.MethodPut:
		if h.opts.ReadOnlyPolicies {
			httpapi.MethodNotAllowed(w, r, "GET, HEAD")
			return
		}
		var d ratelimit.PolicyDoc
		if !h.decodeBody(w, r, &d) {
			return
		}
		if d.Name == "" {
			d.Name = name
		}
		if d.Name != name {
			writeError(w, errorf(ratelimit.ErrInvalidPolicy, "name %q in the body differs from %q in the path", d.Name, name))
			return
		}
		p, err := d.Policy()
		if err == nil {
			err = h.putPolicy(r.Context(), p)
		}
		if err != nil {
			writeError(w, err)
			return
		}
		p, _ = h.l.Policy(name)
		httpapi.WriteJSON(w, http.StatusOK, struct {
			Status string           `json:"status"`
			Policy ratelimit.Policy `json:"policy"`
		}{"ok", p})
	case http.MethodDelete:
		if h.opts.ReadOnlyPolicies {
			httpapi.MethodNotAllowed(w, r, "GET, HEAD")
			return
		}
		deleted, err := h.deletePolicy(r.Context(), name)
		if err != nil {
			writeError(w, err)
			return
		}
		httpapi.WriteJSON(w, http.StatusOK, struct {
			Status  string `json:"status"`
			Deleted bool   `json:"deleted"`
		}{"ok", deleted})
	default:
		httpapi.MethodNotAllowed(w, r, h.allow("GET, HEAD, PUT, DELETE"))
	}
}

// decisionsBody is the answer of GET /ratelimit/decisions.
type decisionsBody struct {
	Decisions []ratelimit.Decision `json:"decisions"` // newest first
	Total     uint64               `json:"total"`     // recorded since the server started
	Capacity  int                  `json:"capacity"`  // how many the ring keeps
}

// decisions answers the last decisions of HTTPOptions.Recent; ?limit=N
// (1..capacity) returns the N newest.
func (h *httpHandler) decisions(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		httpapi.MethodNotAllowed(w, r, "GET, HEAD")
		return
	}
	body := decisionsBody{Decisions: []ratelimit.Decision{}}
	limit := 0
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			writeError(w, errorf(ratelimit.ErrInvalidRequest, "limit: %q is not a positive integer", ratelimit.Truncate(s, 40)))
			return
		}
		limit = n
	}
	if rec := h.opts.Recent; rec != nil {
		body.Decisions, body.Total = rec.Recent(limit)
		body.Capacity = rec.Capacity()
	}
	httpapi.WriteJSON(w, http.StatusOK, body)
}
