package ratelimit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/counterd/counterd/internal/auth"
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
	Authorize func(ctx context.Context, hits []Hit) error
	// Policies, when set, receives every policy change (PUT and DELETE on
	// /ratelimit/policies) instead of the Checker's Limiter, and must make
	// it visible in Local() before it returns: a *PolicySync, which writes
	// through a shared PolicyStore and then updates the Limiter. Default
	// nil: changes go to Local() only (this process).
	Policies PolicyStore
	// Recent, when set, serves GET /ratelimit/decisions: the last
	// decisions it recorded (wrap the Checker with it). Default nil: the
	// route answers an empty list.
	Recent *Recorder
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
func NewHTTPHandler(c Checker, opts HTTPOptions) http.Handler {
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
		writeError(w, fmt.Errorf("%w: %s %s", errRouteNotFound, r.Method, r.URL.Path))
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
	c    Checker
	l    *Limiter // c.Local()
	opts HTTPOptions
}

// Errors of the HTTP layer.
var (
	errInvalidJSON      = errors.New("invalid JSON")
	errBodyTooLarge     = errors.New("request body too large")
	errRouteNotFound    = errors.New("not found")
	errMethodNotAllowed = errors.New("method not allowed")
)

// errorTable maps errors to wire codes (docs/http-api.md) and statuses;
// the first match wins.
var errorTable = []struct {
	err    error
	code   string
	status int
}{
	{errInvalidJSON, "invalid_json", http.StatusBadRequest},
	{errBodyTooLarge, "body_too_large", http.StatusRequestEntityTooLarge},
	{errRouteNotFound, "not_found", http.StatusNotFound},
	{errMethodNotAllowed, "method_not_allowed", http.StatusMethodNotAllowed},
	{ErrInvalidKey, "invalid_argument", http.StatusBadRequest},
	{ErrInvalidLimit, "invalid_argument", http.StatusBadRequest},
	{ErrInvalidCost, "invalid_argument", http.StatusBadRequest},
	{ErrInvalidPolicy, "invalid_argument", http.StatusBadRequest},
	{ErrInvalidRequest, "invalid_argument", http.StatusBadRequest},
	{ErrTooManyLimits, "invalid_argument", http.StatusBadRequest},
	{ErrUnknownPolicy, "not_found", http.StatusNotFound},
	{ErrNoPolicy, "not_found", http.StatusNotFound},
	{auth.ErrUnauthenticated, "unauthenticated", http.StatusUnauthorized},
	{auth.ErrBadToken, "unauthenticated", http.StatusUnauthorized},
	{auth.ErrForbidden, "forbidden", http.StatusForbidden},
	{ErrClosed, "unavailable", http.StatusServiceUnavailable},
	{ErrFull, "unavailable", http.StatusServiceUnavailable},
	{ErrOwnerUnavailable, "unavailable", http.StatusServiceUnavailable},
	{ErrPolicyStoreUnavailable, "unavailable", http.StatusServiceUnavailable},
	{ErrDeciderUnavailable, "unavailable", http.StatusServiceUnavailable},
}

func classify(err error) (string, int) {
	for _, e := range errorTable {
		if errors.Is(err, e.err) {
			return e.code, e.status
		}
	}
	return "internal", http.StatusInternalServerError
}

type errorBody struct {
	Status string      `json:"status"`
	Error  errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, err error) {
	code, status := classify(err)
	msg := err.Error()
	if status == http.StatusInternalServerError {
		msg = "internal error"
	}
	writeJSON(w, status, errorBody{Status: "error", Error: errorDetail{Code: code, Message: msg}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"status":"error","error":{"code":"internal","message":"internal error"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func methodNotAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	w.Header().Set("Allow", allow)
	writeError(w, fmt.Errorf("%w: %s %s (allowed: %s)", errMethodNotAllowed, r.Method, r.URL.Path, allow))
}

func (h *httpHandler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.opts.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, fmt.Errorf("%w: at most %d bytes", errBodyTooLarge, mbe.Limit)
		}
		return nil, fmt.Errorf("%w: reading body: %v", errInvalidJSON, err)
	}
	return b, nil
}

// decodeStrict decodes the JSON object b into v: unknown fields and
// trailing data are invalid_json, values of the wrong type
// invalid_argument. An empty body is {}.
// decodeBody reads and strictly decodes the request body into v, or
// answers the error and returns false.
func (h *httpHandler) decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	b, err := h.readBody(w, r)
	if err == nil {
		err = decodeStrict(b, v)
	}
	if err != nil {
		writeError(w, err)
		return false
	}
	return true
}

func decodeStrict(b []byte, v any) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		b = []byte("{}")
	}
	if b[0] != '{' {
		if json.Valid(b) {
			return errorf(ErrInvalidRequest, "body must be a JSON object")
		}
		return fmt.Errorf("%w: body is not a JSON object", errInvalidJSON)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		var ae *argError
		switch {
		case errors.As(err, &ae), errors.Is(err, ErrInvalidPolicy), errors.Is(err, ErrInvalidLimit):
			return err
		case errors.As(err, &te):
			field := te.Field
			if field == "" {
				field = "body"
			}
			return errorf(ErrInvalidRequest, "%s: expected %s, got JSON %s", field, te.Type, te.Value)
		}
		return fmt.Errorf("%w: %s", errInvalidJSON, strings.TrimPrefix(err.Error(), "json: "))
	}
	if rest := bytes.TrimSpace(b[dec.InputOffset():]); len(rest) > 0 {
		return fmt.Errorf("%w: trailing data after the JSON object", errInvalidJSON)
	}
	return nil
}

// argError is a field-level error raised while decoding.
type argError struct{ msg string }

func (e *argError) Error() string { return ErrInvalidRequest.Error() + ": " + e.msg }
func (e *argError) Unwrap() error { return ErrInvalidRequest }

// jsonInt is an int64 field that accepts only JSON integer literals in
// range: 1.5, "1", 1e3 and null are invalid_argument.
type jsonInt struct {
	V   int64
	Set bool
}

func (n *jsonInt) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || !(b[0] == '-' || b[0] >= '0' && b[0] <= '9') || bytes.ContainsAny(b, ".eE") {
		return &argError{"expected an integer, got " + truncate(string(b), 40)}
	}
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return &argError{"integer " + truncate(string(b), 40) + " out of range"}
	}
	n.V, n.Set = v, true
	return nil
}

// MarshalJSON writes the integer (omit unset ones with omitzero).
func (n jsonInt) MarshalJSON() ([]byte, error) { return strconv.AppendInt(nil, n.V, 10), nil }

// checkRequest is the body of POST /ratelimit/check. A Router also sends
// it, so it encodes as well as it decodes.
type checkRequest struct {
	Key      string      `json:"key"`
	Cost     jsonInt     `json:"cost,omitzero"`
	Policy   string      `json:"policy,omitempty"`
	Policies []string    `json:"policies,omitempty"`
	Limits   []limitJSON `json:"limits,omitempty"`
}

type limitJSON struct {
	// Key, when set, is the key of this limit's hit instead of the
	// request's (a multi-key atomic check).
	Key       string  `json:"key,omitempty"`
	Name      string  `json:"name,omitempty"`
	Algorithm string  `json:"algorithm,omitempty"`
	Limit     jsonInt `json:"limit,omitzero"`
	Period    string  `json:"period,omitempty"`
	PeriodMS  jsonInt `json:"period_ms,omitzero"`
	Burst     jsonInt `json:"burst,omitzero"`
	// Cost, when set, is this limit's cost instead of the request's.
	Cost jsonInt `json:"cost,omitzero"`
}

func (j *limitJSON) limit(i int) (Limit, error) {
	lim := Limit{Name: j.Name, Algorithm: DefaultAlgorithm, Limit: j.Limit.V, Burst: j.Burst.V}
	if j.Name != "" {
		if err := validatePolicyName(j.Name); err != nil {
			return lim, errorf(ErrInvalidLimit, "limits[%d]: %v", i, strings.TrimPrefix(err.Error(), ErrInvalidPolicy.Error()+": "))
		}
	}
	if j.Algorithm != "" {
		a, err := ParseAlgorithm(j.Algorithm)
		if err != nil {
			return lim, errorf(ErrInvalidLimit, "limits[%d]: unknown algorithm %q", i, j.Algorithm)
		}
		lim.Algorithm = a
	}
	if !j.Limit.Set {
		return lim, errorf(ErrInvalidLimit, "limits[%d]: limit is required", i)
	}
	switch {
	case j.Period != "" && j.PeriodMS.Set:
		return lim, errorf(ErrInvalidLimit, "limits[%d]: give period or period_ms, not both", i)
	case j.PeriodMS.Set:
		if j.PeriodMS.V <= 0 || j.PeriodMS.V > int64(MaxPeriod/time.Millisecond) {
			return lim, errorf(ErrInvalidLimit, "limits[%d]: period_ms %d out of range", i, j.PeriodMS.V)
		}
		lim.Period = time.Duration(j.PeriodMS.V) * time.Millisecond
	default:
		p, err := ParsePeriod(j.Period)
		if err != nil {
			return lim, errorf(ErrInvalidLimit, "limits[%d]: %v", i, err)
		}
		lim.Period = p
	}
	if err := lim.Validate(); err != nil {
		return lim, errorf(ErrInvalidLimit, "limits[%d]: %s", i, strings.TrimPrefix(err.Error(), ErrInvalidLimit.Error()+": "))
	}
	return lim, nil
}

// checkAnswer is the answer of POST /ratelimit/check, 200 or 429.
type checkAnswer struct {
	Status       string        `json:"status"` // "ok" or "rate_limited"
	Allowed      bool          `json:"allowed"`
	Key          string        `json:"key"`
	Limit        int64         `json:"limit"`
	Remaining    int64         `json:"remaining"`
	ResetMS      int64         `json:"reset_ms"`
	RetryAfterMS int64         `json:"retry_after_ms"`
	DelayMS      int64         `json:"delay_ms"`
	Limits       []limitAnswer `json:"limits"`
}

type limitAnswer struct {
	Name         string `json:"name"`
	Algorithm    string `json:"algorithm"`
	Limit        int64  `json:"limit"`
	Period       string `json:"period"`
	Burst        int64  `json:"burst,omitempty"`
	Cost         int64  `json:"cost"`
	Allowed      bool   `json:"allowed"`
	Remaining    int64  `json:"remaining"`
	ResetMS      int64  `json:"reset_ms"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	DelayMS      int64  `json:"delay_ms"`
}

func (h *httpHandler) check(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		methodNotAllowed(w, r, "POST")
		return
	}
	var req checkRequest
	if !h.decodeBody(w, r, &req) {
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
	sts := make([]Status, len(hits))
	c := h.c
	if r.Header.Get(ForwardedHeader) != "" {
		c = h.l // one hop: a forwarded check is decided here
	}
	agg, err := c.CheckMultiContext(r.Context(), hits, sts)
	if err != nil {
		writeError(w, err)
		return
	}
	appendHeaders(w.Header().Add, h.l.Now(), hits, sts, agg)
	ans := newCheckAnswer(req.Key, hits, sts, agg)
	status := http.StatusOK
	if !agg.Allowed {
		status = http.StatusTooManyRequests
	}
	writeJSON(w, status, ans)
}

// newCheckAnswer is the answer to a check of hits on key, with their
// statuses sts and the binding status agg. Durations are rounded up to
// milliseconds.
func newCheckAnswer(key string, hits []Hit, sts []Status, agg Status) checkAnswer {
	ans := checkAnswer{Status: "ok", Allowed: agg.Allowed, Key: key, Limit: agg.Limit, Remaining: agg.Remaining,
		ResetMS: ceilMillis(agg.Reset), RetryAfterMS: ceilMillis(agg.RetryAfter), DelayMS: ceilMillis(agg.Delay),
		Limits: make([]limitAnswer, len(hits))}
	for i, hit := range hits {
		s := sts[i]
		ans.Limits[i] = limitAnswer{Name: hit.Limit.DisplayName(), Algorithm: hit.Limit.Algorithm.String(),
			Limit: hit.Limit.Limit, Period: FormatPeriod(hit.Limit.Period), Burst: hit.Limit.Burst, Cost: hit.Cost,
			Allowed: s.Allowed, Remaining: s.Remaining, ResetMS: ceilMillis(s.Reset),
			RetryAfterMS: ceilMillis(s.RetryAfter), DelayMS: ceilMillis(s.Delay)}
	}
	if !agg.Allowed {
		ans.Status = "rate_limited"
	}
	return ans
}

// hits turns a check request into the hits to check.
func (h *httpHandler) hits(req *checkRequest) ([]Hit, error) {
	if err := validateKey(req.Key); err != nil {
		return nil, err
	}
	cost := int64(PolicyCost)
	if req.Cost.Set {
		if req.Cost.V < 0 {
			return nil, errorf(ErrInvalidCost, "cost %d is negative", req.Cost.V)
		}
		cost = req.Cost.V
	}
	names := req.Policies
	if req.Policy != "" {
		names = append([]string{req.Policy}, names...)
	}
	if len(names)+len(req.Limits) > MaxHits {
		return nil, errorf(ErrTooManyLimits, "%d limits, at most %d", len(names)+len(req.Limits), MaxHits)
	}
	var hits []Hit
	var err error
	if len(names) > 0 || len(req.Limits) == 0 {
		if hits, err = h.l.AppendPolicyHits(hits, req.Key, names, cost); err != nil {
			return nil, err
		}
	}
	for i := range req.Limits {
		lim, err := req.Limits[i].limit(i)
		if err != nil {
			return nil, err
		}
		hit := Hit{Key: req.Key, Limit: lim, Cost: cost}
		if hit.Cost == PolicyCost {
			hit.Cost = 1
		}
		if l := &req.Limits[i]; l.Key != "" {
			if err := validateKey(l.Key); err != nil {
				return nil, fmt.Errorf("limits[%d]: %w", i, err)
			}
			hit.Key = l.Key
		}
		if l := &req.Limits[i]; l.Cost.Set {
			if l.Cost.V < 0 {
				return nil, errorf(ErrInvalidCost, "limits[%d]: cost %d is negative", i, l.Cost.V)
			}
			hit.Cost = l.Cost.V
		}
		hits = append(hits, hit)
	}
	return hits, nil
}

// replacePolicies, putPolicy and deletePolicy change the policies through
// opts.Policies when set, else in the local Limiter.
func (h *httpHandler) replacePolicies(ctx context.Context, ps []Policy) error {
	if h.opts.Policies != nil {
		return policyStoreErr(h.opts.Policies.ReplacePolicies(ctx, ps))
	}
	return h.l.SetPolicies(ps)
}

func (h *httpHandler) putPolicy(ctx context.Context, p Policy) error {
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
	if err == nil || errors.Is(err, ErrInvalidPolicy) || errors.Is(err, ErrPolicyStoreUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrPolicyStoreUnavailable, err)
}

type policiesBody struct {
	Policies []Policy `json:"policies"`
}

func (h *httpHandler) policies(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		writeJSON(w, http.StatusOK, policiesBody{Policies: h.l.Policies()})
	case http.MethodPut:
		if h.opts.ReadOnlyPolicies {
			methodNotAllowed(w, r, "GET, HEAD")
			return
		}
		b, err := h.readBody(w, r)
		if err != nil {
			writeError(w, err)
			return
		}
		var ps []Policy
		if isYAML(r) {
			ps, err = LoadPolicies(bytes.NewReader(b))
		} else {
			var body policiesBody
			err = decodeStrict(b, &body)
			ps = body.Policies
		}
		if err == nil {
			err = h.replacePolicies(r.Context(), ps)
		}
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, struct {
			Status   string `json:"status"`
			Policies int    `json:"policies"`
		}{"ok", len(ps)})
	default:
		methodNotAllowed(w, r, h.allow("GET, HEAD, PUT"))
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
			writeError(w, errorf(ErrUnknownPolicy, "%q", name))
			return
		}
		writeJSON(w, http.StatusOK, p)
	case http.MethodPut:
		if h.opts.ReadOnlyPolicies {
			methodNotAllowed(w, r, "GET, HEAD")
			return
		}
		var d policyDoc
		if !h.decodeBody(w, r, &d) {
			return
		}
		if d.Name == "" {
			d.Name = name
		}
		if d.Name != name {
			writeError(w, errorf(ErrInvalidPolicy, "name %q in the body differs from %q in the path", d.Name, name))
			return
		}
		p, err := d.policy()
		if err == nil {
			err = h.putPolicy(r.Context(), p)
		}
		if err != nil {
			writeError(w, err)
			return
		}
		p, _ = h.l.Policy(name)
		writeJSON(w, http.StatusOK, struct {
			Status string `json:"status"`
			Policy Policy `json:"policy"`
		}{"ok", p})
	case http.MethodDelete:
		if h.opts.ReadOnlyPolicies {
			methodNotAllowed(w, r, "GET, HEAD")
			return
		}
		deleted, err := h.deletePolicy(r.Context(), name)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, struct {
			Status  string `json:"status"`
			Deleted bool   `json:"deleted"`
		}{"ok", deleted})
	default:
		methodNotAllowed(w, r, h.allow("GET, HEAD, PUT, DELETE"))
	}
}

// decisionsBody is the answer of GET /ratelimit/decisions.
type decisionsBody struct {
	Decisions []Decision `json:"decisions"` // newest first
	Total     uint64     `json:"total"`     // recorded since the server started
	Capacity  int        `json:"capacity"`  // how many the ring keeps
}

// decisions answers the last decisions of HTTPOptions.Recent; ?limit=N
// (1..capacity) returns the N newest.
func (h *httpHandler) decisions(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, r, "GET, HEAD")
		return
	}
	body := decisionsBody{Decisions: []Decision{}}
	limit := 0
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			writeError(w, errorf(ErrInvalidRequest, "limit: %q is not a positive integer", truncate(s, 40)))
			return
		}
		limit = n
	}
	if rec := h.opts.Recent; rec != nil {
		body.Decisions, body.Total = rec.Recent(limit)
		body.Capacity = len(rec.slots)
	}
	writeJSON(w, http.StatusOK, body)
}
