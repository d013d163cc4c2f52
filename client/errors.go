package client

import (
	"errors"
	"fmt"
)

// Sentinel errors, one per error code of the HTTP API. An *Error from the
// server wraps the sentinel of its code, so errors.Is(err, ErrVersionConflict)
// works on anything a Client method returns.
var (
	ErrInvalidID            = errors.New("client: invalid id")
	ErrInvalidJSON          = errors.New("client: invalid json")
	ErrInvalidArgument      = errors.New("client: invalid argument")
	ErrWrongKind            = errors.New("client: operation against a counter of the wrong kind")
	ErrVersionConflict      = errors.New("client: version conflict")
	ErrOverflow             = errors.New("client: increment or decrement would overflow")
	ErrIdempotencyKeyReused = errors.New("client: idempotency key reused with a different request")
	ErrNotFound             = errors.New("client: not found")
	ErrMethodNotAllowed     = errors.New("client: method not allowed")
	ErrBodyTooLarge         = errors.New("client: body too large")
	ErrBatchTooLarge        = errors.New("client: batch too large")
	ErrUnavailable          = errors.New("client: unavailable")
	ErrInternal             = errors.New("client: internal server error")
	ErrUnauthenticated      = errors.New("client: unauthenticated (no token, or a token the server does not hold)")
	ErrForbidden            = errors.New("client: forbidden (the token lacks the permission)")
	ErrInvalidEvent         = errors.New("client: invalid event")
	ErrTooLarge             = errors.New("client: too large")
	// ErrStreamUnavailable: POST /events could not reach the event stream
	// (or it did not acknowledge in time); it is also ErrUnavailable, and
	// sending the batch again is safe (event ids deduplicate).
	ErrStreamUnavailable = fmt.Errorf("client: event stream unavailable: %w", ErrUnavailable)
)

// Error codes of the HTTP API (docs/http-api.md).
const (
	CodeInvalidID            = "invalid_id"
	CodeInvalidJSON          = "invalid_json"
	CodeInvalidArgument      = "invalid_argument"
	CodeWrongKind            = "wrong_kind"
	CodeVersionConflict      = "version_conflict"
	CodeOverflow             = "overflow"
	CodeIdempotencyKeyReused = "idempotency_key_reused"
	CodeNotFound             = "not_found"
	CodeMethodNotAllowed     = "method_not_allowed"
	CodeBodyTooLarge         = "body_too_large"
	CodeBatchTooLarge        = "batch_too_large"
	CodeUnavailable          = "unavailable"
	CodeInternal             = "internal"
	CodeUnauthenticated      = "unauthenticated"
	CodeForbidden            = "forbidden"
	CodeInvalidEvent         = "invalid_event"      // POST /events (docs/pipeline.md)
	CodeTooLarge             = "too_large"          // POST /events: a batch or event over the limits
	CodeStreamUnavailable    = "stream_unavailable" // POST /events: the event stream is not reachable (docs/pipeline.md, "Outages")
)

var sentinels = map[string]error{
	CodeInvalidID:            ErrInvalidID,
	CodeInvalidJSON:          ErrInvalidJSON,
	CodeInvalidArgument:      ErrInvalidArgument,
	CodeWrongKind:            ErrWrongKind,
	CodeVersionConflict:      ErrVersionConflict,
	CodeOverflow:             ErrOverflow,
	CodeIdempotencyKeyReused: ErrIdempotencyKeyReused,
	CodeNotFound:             ErrNotFound,
	CodeMethodNotAllowed:     ErrMethodNotAllowed,
	CodeBodyTooLarge:         ErrBodyTooLarge,
	CodeBatchTooLarge:        ErrBatchTooLarge,
	CodeUnavailable:          ErrUnavailable,
	CodeInvalidEvent:         ErrInvalidEvent,
	CodeTooLarge:             ErrTooLarge,
	CodeStreamUnavailable:    ErrStreamUnavailable,
	CodeInternal:             ErrInternal,
	CodeUnauthenticated:      ErrUnauthenticated,
	CodeForbidden:            ErrForbidden,
}

// Error is an error answer of the server: an HTTP status with the API's
// error code and message. Code is empty when the answer was not the API's
// JSON error (for example an HTML 502 page from a proxy); Message then holds
// the start of the body.
type Error struct {
	Status  int    // HTTP status code
	Code    string // API error code, such as "version_conflict"
	Message string // human-readable message from the server
	// Index is, for a failed Batch, the index of the op that failed the
	// batch; -1 otherwise.
	Index int
	// Body is the raw answer (a denied rate-limit check answers 429 with
	// its decision in the body).
	Body []byte
}

func (e *Error) Error() string {
	code := e.Code
	if code == "" {
		code = fmt.Sprintf("http %d", e.Status)
	}
	msg := "counterd: " + code
	if e.Message != "" {
		msg += ": " + e.Message
	}
	if e.Index >= 0 {
		msg += fmt.Sprintf(" (batch op %d)", e.Index)
	}
	return msg
}

// Unwrap returns the sentinel error of e.Code (ErrVersionConflict for
// "version_conflict", ...). Without a code (not an API answer) it goes by the
// status: 503 is ErrUnavailable and 404 ErrNotFound; otherwise nil.
func (e *Error) Unwrap() error {
	if e.Code != "" {
		return sentinels[e.Code]
	}
	switch e.Status {
	case 503:
		return ErrUnavailable
	case 404:
		return ErrNotFound
	}
	return nil
}

// Temporary reports whether the request may succeed if retried: the server
// was unavailable or failed internally (any 5xx status).
func (e *Error) Temporary() bool { return e.Status >= 500 }
