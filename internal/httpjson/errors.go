// Package httpjson holds the JSON conventions every HTTP surface of
// counterd shares: the error answer
//
//	{"status":"error","error":{"code":...,"message":...}}
//
// with the one mapping from errors to its code and HTTP status
// (docs/http-api.md, "Errors"), the JSON writer, and strict decoding of
// request bodies. It sits below the front ends (internal/api) so that every
// package that serves HTTP (the cluster node, snapshot sync, regions, the
// console, the event pipeline) answers like the API without importing it.
package httpjson

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/counterd/counterd/internal/auth"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/quota"
)

// Errors of the HTTP layer itself; engine errors are used as they are.
var (
	ErrInvalidJSON      = errors.New("invalid JSON")
	ErrBodyTooLarge     = errors.New("request body too large")
	ErrRouteNotFound    = errors.New("not found")
	ErrMethodNotAllowed = errors.New("method not allowed")
)

// Wire error codes (docs/http-api.md, "Errors").
const (
	CodeInvalidID        = "invalid_id"
	CodeInvalidJSON      = "invalid_json"
	CodeInvalidArgument  = "invalid_argument"
	CodeWrongKind        = "wrong_kind"
	CodeVersionConflict  = "version_conflict"
	CodeOverflow         = "overflow"
	CodeIdempotencyReuse = "idempotency_key_reused"
	CodeNotFound         = "not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeBodyTooLarge     = "body_too_large"
	CodeBatchTooLarge    = "batch_too_large"
	CodeUnavailable      = "unavailable"
	CodeInternal         = "internal"
	CodeUnauthenticated  = "unauthenticated"
	CodeForbidden        = "forbidden"
	CodeQuotaExceeded    = "quota_exceeded"
	// CodeInsufficientStorage: the node cannot make writes durable (full
	// or failing disk: docs/operations.md, "Full disk").
	CodeInsufficientStorage = "insufficient_storage"
)

// errorTable maps errors to wire codes and statuses. It is the only place
// where engine sentinel errors become HTTP answers; the first entry that
// errors.Is matches wins.
var errorTable = []struct {
	err    error
	code   string
	status int
}{
	{contract.ErrInvalidID, CodeInvalidID, http.StatusBadRequest},
	{ErrInvalidJSON, CodeInvalidJSON, http.StatusBadRequest},
	{contract.ErrInvalidArgument, CodeInvalidArgument, http.StatusBadRequest},
	{contract.ErrWrongKind, CodeWrongKind, http.StatusConflict},
	{contract.ErrVersionConflict, CodeVersionConflict, http.StatusConflict},
	{contract.ErrOverflow, CodeOverflow, http.StatusUnprocessableEntity},
	{contract.ErrNotFloat, CodeInvalidArgument, http.StatusBadRequest},
	{contract.ErrFloatRange, CodeOverflow, http.StatusUnprocessableEntity},
	{contract.ErrNotInteger, CodeWrongKind, http.StatusConflict},
	{contract.ErrIdempotencyReuse, CodeIdempotencyReuse, http.StatusUnprocessableEntity},
	{contract.ErrNotFound, CodeNotFound, http.StatusNotFound},
	{ErrRouteNotFound, CodeNotFound, http.StatusNotFound},
	{ErrMethodNotAllowed, CodeMethodNotAllowed, http.StatusMethodNotAllowed},
	{ErrBodyTooLarge, CodeBodyTooLarge, http.StatusRequestEntityTooLarge},
	{contract.ErrBatchTooLarge, CodeBatchTooLarge, http.StatusRequestEntityTooLarge},
	{contract.ErrInsufficientStorage, CodeInsufficientStorage, http.StatusInsufficientStorage},
	{contract.ErrClosed, CodeUnavailable, http.StatusServiceUnavailable},
	{contract.ErrUnavailable, CodeUnavailable, http.StatusServiceUnavailable},
	{context.DeadlineExceeded, CodeUnavailable, http.StatusServiceUnavailable},
	{context.Canceled, CodeUnavailable, http.StatusServiceUnavailable},
	{auth.ErrUnauthenticated, CodeUnauthenticated, http.StatusUnauthorized},
	{auth.ErrBadToken, CodeUnauthenticated, http.StatusUnauthorized},
	{auth.ErrForbidden, CodeForbidden, http.StatusForbidden},
	{contract.ErrQuotaExceeded, CodeQuotaExceeded, http.StatusTooManyRequests},
}

// Classify returns the wire code and HTTP status of err: internal and 500
// for an error the table does not know.
func Classify(err error) (code string, status int) {
	for _, e := range errorTable {
		if errors.Is(err, e.err) {
			return e.code, e.status
		}
	}
	return CodeInternal, http.StatusInternalServerError
}

// Body is the JSON of every error answer.
type Body struct {
	Status string `json:"status"` // "error"
	Error  Detail `json:"error"`
	// Index is the failing op of a batch (also in Error.Index).
	Index *int `json:"index,omitempty"`
}

// Detail is the "error" member of a Body.
type Detail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Index   *int   `json:"index,omitempty"`
	// Quota, for quota_exceeded: the quota and the limit the write
	// would pass.
	Quota *QuotaDetail `json:"quota,omitempty"`
	// Aggregate, for an overflowing aggregate: what the sum covers.
	Aggregate *OverflowDetail `json:"aggregate,omitempty"`
}

// OverflowDetail is an aggregate whose sum does not fit in 64 bits: the
// number of additive counters and their exact sum as decimal text.
type OverflowDetail struct {
	Prefix   string `json:"prefix"`
	Count    int    `json:"count"`
	Sum      string `json:"sum"`
	Overflow bool   `json:"overflow"` // always true
}

// QuotaDetail names the quota a refused write would pass.
type QuotaDetail struct {
	Name      string `json:"name"`                // the quota's pattern, or "default"
	Namespace string `json:"namespace,omitempty"` // for the default
	Limit     string `json:"limit"`               // max_keys or max_hash_fields
	Max       int64  `json:"max"`
}

// IndexError marks the error of op Index of a batch.
type IndexError struct {
	Index int
	Err   error
}

func (e *IndexError) Error() string { return fmt.Sprintf("op %d: %v", e.Index, e.Err) }
func (e *IndexError) Unwrap() error { return e.Err }

// Answer returns the status and body that answer err. The message is
// err's text, except for an internal error, whose details go to the log
// only. A batch op's index (IndexError, contract.BatchError) and a refusing
// quota (quota.ExceededError) are given in the body.
func Answer(err error) (status int, body Body) {
	code, status := Classify(err)
	msg := err.Error()
	if status == http.StatusInternalServerError {
		msg = "internal error"
	}
	body = Body{Status: "error", Error: Detail{Code: code, Message: msg}}
	if qe := (*quota.ExceededError)(nil); errors.As(err, &qe) {
		body.Error.Quota = &QuotaDetail{Name: qe.Quota, Namespace: qe.Namespace, Limit: qe.Limit, Max: qe.Max}
	}
	if oe := (*engine.OverflowError)(nil); errors.As(err, &oe) {
		body.Error.Aggregate = &OverflowDetail{Prefix: oe.Prefix, Count: oe.Count, Sum: oe.Sum.String(), Overflow: true}
	}
	var ie *IndexError
	var be *contract.BatchError
	switch {
	case errors.As(err, &ie):
		i := ie.Index
		body.Index, body.Error.Index = &i, &i
	case errors.As(err, &be):
		i := be.Index
		body.Index, body.Error.Index = &i, &i
	}
	return status, body
}

// WriteError writes err as the JSON error answer (see Answer). A 401
// carries the WWW-Authenticate challenge.
func WriteError(w http.ResponseWriter, err error) {
	status, body := Answer(err)
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="counterd"`)
	}
	_ = WriteJSON(w, status, body)
}

// WriteJSON writes v as the JSON answer with status. If v does not
// encode, it answers a 500 internal error instead and returns the
// encoding error (for the caller's log).
func WriteJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"status":"error","error":{"code":"internal","message":"internal error"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
	return err
}
