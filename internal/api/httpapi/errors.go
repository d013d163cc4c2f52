package httpapi

import (
	"fmt"
	"net/http"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/httpjson"
)

// writeError writes err as the JSON error answer. Errors become wire codes
// and statuses in one place, httpjson's table (docs/http-api.md, "Errors").
func (h *Handler) writeError(w http.ResponseWriter, err error) {
	if sw, ok := w.(*statusWriter); ok {
		sw.err = err
	}
	status, body := httpjson.Answer(err)
	writeJSON(w, status, body)
}

// WriteError writes err as the API's JSON error answer, for middleware
// in front of the Handler (authentication) that must answer like it. It
// is httpjson.WriteError, which packages below internal/api use directly.
func WriteError(w http.ResponseWriter, err error) { httpjson.WriteError(w, err) }

// DecodeStrict decodes the JSON object b into v as the API's bodies are
// decoded (httpjson.DecodeStrict).
func DecodeStrict(b []byte, v any) error { return httpjson.DecodeStrict(b, v) }

// WriteErrorCode writes the API's JSON error answer with an explicit code
// and status, for an answer that is no error of the contract (the
// rate-limit middleware's 429 "rate_limited").
func WriteErrorCode(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, httpjson.Body{Status: "error", Error: httpjson.Detail{Code: code, Message: msg}})
}

// MethodNotAllowed answers 405 method_not_allowed with the Allow header.
func MethodNotAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	w.Header().Set("Allow", allow)
	WriteError(w, fmt.Errorf("%w: %s %s (allowed: %s)", httpjson.ErrMethodNotAllowed, r.Method, r.URL.Path, allow))
}

// RouteNotFound is the not_found error of a request no route serves.
func RouteNotFound(r *http.Request) error {
	return fmt.Errorf("%w: %s %s", httpjson.ErrRouteNotFound, r.Method, r.URL.Path)
}

// invalidArgf returns an error wrapping contract.ErrInvalidArgument.
func invalidArgf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", contract.ErrInvalidArgument, fmt.Sprintf(format, args...))
}
