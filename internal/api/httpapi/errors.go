package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/counterd/counterd/internal/auth"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/quota"
)

// Errors of the HTTP layer itself; engine errors are used as they are.
var (
	errInvalidJSON      = errors.New("invalid JSON")
	errBodyTooLarge     = errors.New("request body too large")
	errRouteNotFound    = errors.New("not found")
	errMethodNotAllowed = errors.New("method not allowed")
)

// Wire error codes (docs/http-api.md, "Errors").
const (
	codeInvalidID        = "invalid_id"
	codeInvalidJSON      = "invalid_json"
	codeInvalidArgument  = "invalid_argument"
	codeWrongKind        = "wrong_kind"
	codeVersionConflict  = "version_conflict"
	codeOverflow         = "overflow"
	codeIdempotencyReuse = "idempotency_key_reused"
	codeNotFound         = "not_found"
	codeMethodNotAllowed = "method_not_allowed"
	codeBodyTooLarge     = "body_too_large"
	codeBatchTooLarge    = "batch_too_large"
	codeUnavailable      = "unavailable"
	codeInternal         = "internal"
	codeUnauthenticated  = "unauthenticated"
	codeForbidden        = "forbidden"
	codeQuotaExceeded    = "quota_exceeded"
	// codeInsufficientStorage: the node cannot make writes durable (full
	// or failing disk: docs/operations.md, "Full disk").
	codeInsufficientStorage = "insufficient_storage"
)

// errorTable maps errors to wire codes and statuses. It is the only place
// where engine sentinel errors become HTTP answers; the first entry that
// errors.Is matches wins.
var errorTable = []struct {
	err    error
	code   string
	status int
}{
	{engine.ErrInvalidID, codeInvalidID, http.StatusBadRequest},
	{errInvalidJSON, codeInvalidJSON, http.StatusBadRequest},
	{engine.ErrInvalidArgument, codeInvalidArgument, http.StatusBadRequest},
	{engine.ErrWrongKind, codeWrongKind, http.StatusConflict},
	{engine.ErrVersionConflict, codeVersionConflict, http.StatusConflict},
	{engine.ErrOverflow, codeOverflow, http.StatusUnprocessableEntity},
	{engine.ErrNotFloat, codeInvalidArgument, http.StatusBadRequest},
	{engine.ErrFloatRange, codeOverflow, http.StatusUnprocessableEntity},
	{engine.ErrNotInteger, codeWrongKind, http.StatusConflict},
	{engine.ErrIdempotencyReuse, codeIdempotencyReuse, http.StatusUnprocessableEntity},
	{engine.ErrNotFound, codeNotFound, http.StatusNotFound},
	{errRouteNotFound, codeNotFound, http.StatusNotFound},
	{errMethodNotAllowed, codeMethodNotAllowed, http.StatusMethodNotAllowed},
	{errBodyTooLarge, codeBodyTooLarge, http.StatusRequestEntityTooLarge},
	{engine.ErrBatchTooLarge, codeBatchTooLarge, http.StatusRequestEntityTooLarge},
	{engine.ErrInsufficientStorage, codeInsufficientStorage, http.StatusInsufficientStorage},
	{engine.ErrClosed, codeUnavailable, http.StatusServiceUnavailable},
	{engine.ErrUnavailable, codeUnavailable, http.StatusServiceUnavailable},
	{context.DeadlineExceeded, codeUnavailable, http.StatusServiceUnavailable},
	{context.Canceled, codeUnavailable, http.StatusServiceUnavailable},
	{auth.ErrUnauthenticated, codeUnauthenticated, http.StatusUnauthorized},
	{auth.ErrBadToken, codeUnauthenticated, http.StatusUnauthorized},
	{auth.ErrForbidden, codeForbidden, http.StatusForbidden},
	{engine.ErrQuotaExceeded, codeQuotaExceeded, http.StatusTooManyRequests},
}

// classify returns the wire code and HTTP status of err.
func classify(err error) (code string, status int) {
	for _, e := range errorTable {
		if errors.Is(err, e.err) {
			return e.code, e.status
		}
	}
	return codeInternal, http.StatusInternalServerError
}

// errorBody is the JSON of every error answer.
type errorBody struct {
	Status string      `json:"status"` // "error"
	Error  errorDetail `json:"error"`
	// Index is the failing op of a batch (also in Error.Index).
	Index *int `json:"index,omitempty"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Index   *int   `json:"index,omitempty"`
	// Quota, for quota_exceeded: the quota and the limit the write
	// would pass.
	Quota *quotaDetail `json:"quota,omitempty"`
}

type quotaDetail struct {
	Name      string `json:"name"`                // the quota's pattern, or "default"
	Namespace string `json:"namespace,omitempty"` // for the default
	Limit     string `json:"limit"`               // max_keys or max_hash_fields
	Max       int64  `json:"max"`
}

// indexError marks the error of op Index of a batch.
type indexError struct {
	Index int
	Err   error
}

func (e *indexError) Error() string { return fmt.Sprintf("op %d: %v", e.Index, e.Err) }
func (e *indexError) Unwrap() error { return e.Err }

// writeError writes err as the JSON error answer.
func (h *Handler) writeError(w http.ResponseWriter, err error) {
	code, status := classify(err)
	if sw, ok := w.(*statusWriter); ok {
		sw.err = err
	}
	msg := err.Error()
	if status == http.StatusInternalServerError {
		msg = "internal error" // details go to the log only
	}
	body := errorBody{Status: "error", Error: errorDetail{Code: code, Message: msg}}
	if qe := (*quota.ExceededError)(nil); errors.As(err, &qe) {
		body.Error.Quota = &quotaDetail{Name: qe.Quota, Namespace: qe.Namespace, Limit: qe.Limit, Max: qe.Max}
	}
	var ie *indexError
	var be *engine.BatchError
	switch {
	case errors.As(err, &ie):
		i := ie.Index
		body.Index, body.Error.Index = &i, &i
	case errors.As(err, &be):
		i := be.Index
		body.Index, body.Error.Index = &i, &i
	}
	writeJSON(w, status, body)
}

// WriteError writes err as the API's JSON error answer, for middleware
// in front of the Handler (authentication) that must answer like it.
func WriteError(w http.ResponseWriter, err error) {
	code, status := classify(err)
	msg := err.Error()
	if status == http.StatusInternalServerError {
		msg = "internal error"
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="counterd"`)
	}
	writeJSON(w, status, errorBody{Status: "error", Error: errorDetail{Code: code, Message: msg}})
}

// WriteErrorCode writes the API's JSON error answer with an explicit code
// and status, for an answer that is no error of the contract (the
// rate-limit middleware's 429 "rate_limited").
func WriteErrorCode(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, errorBody{Status: "error", Error: errorDetail{Code: code, Message: msg}})
}

// MethodNotAllowed answers 405 method_not_allowed with the Allow header.
func MethodNotAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	w.Header().Set("Allow", allow)
	WriteError(w, fmt.Errorf("%w: %s %s (allowed: %s)", errMethodNotAllowed, r.Method, r.URL.Path, allow))
}

// RouteNotFound is the not_found error of a request no route serves.
func RouteNotFound(r *http.Request) error {
	return fmt.Errorf("%w: %s %s", errRouteNotFound, r.Method, r.URL.Path)
}

// invalidArgf returns an error wrapping engine.ErrInvalidArgument.
func invalidArgf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", engine.ErrInvalidArgument, fmt.Sprintf(format, args...))
}
