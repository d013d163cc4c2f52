package httpjson

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/counterd/counterd/internal/auth"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/quota"
)

// TestClassify pins the wire code and status of every sentinel, wrapped the
// way backends wrap them.
func TestClassify(t *testing.T) {
	for _, c := range []struct {
		err    error
		code   string
		status int
	}{
		{contract.ErrInvalidID, CodeInvalidID, http.StatusBadRequest},
		{contract.ErrWrongKind, CodeWrongKind, http.StatusConflict},
		{contract.ErrOverflow, CodeOverflow, http.StatusUnprocessableEntity},
		{contract.ErrNotFound, CodeNotFound, http.StatusNotFound},
		{contract.ErrClosed, CodeUnavailable, http.StatusServiceUnavailable},
		{contract.ErrInsufficientStorage, CodeInsufficientStorage, http.StatusInsufficientStorage},
		{contract.ErrUnavailable, CodeUnavailable, http.StatusServiceUnavailable},
		{context.DeadlineExceeded, CodeUnavailable, http.StatusServiceUnavailable},
		{auth.ErrUnauthenticated, CodeUnauthenticated, http.StatusUnauthorized},
		{auth.ErrBadToken, CodeUnauthenticated, http.StatusUnauthorized},
		{auth.ErrForbidden, CodeForbidden, http.StatusForbidden},
		{errors.New("disk on fire"), CodeInternal, http.StatusInternalServerError},
	} {
		wrapped := fmt.Errorf("tiered: redis 127.0.0.1:6379: %w", c.err)
		if code, status := Classify(wrapped); code != c.code || status != c.status {
			t.Errorf("%v: %s %d, want %s %d", c.err, code, status, c.code, c.status)
		}
	}
}

// TestWriteError pins the JSON of an error answer: its shape and headers,
// the hidden text of an internal error, a batch op's index and a quota.
func TestWriteError(t *testing.T) {
	for _, c := range []struct {
		err    error
		status int
		body   string
		header map[string]string
	}{
		{fmt.Errorf("%w: no route for GET /x", ErrRouteNotFound), 404,
			`{"status":"error","error":{"code":"not_found","message":"not found: no route for GET /x"}}`, nil},
		{errors.New("disk on fire at /var/lib"), 500,
			`{"status":"error","error":{"code":"internal","message":"internal error"}}`, nil},
		{&IndexError{Index: 2, Err: contract.ErrWrongKind}, 409,
			`{"status":"error","error":{"code":"wrong_kind","message":"op 2: ` + contract.ErrWrongKind.Error() + `","index":2},"index":2}`, nil},
		{&contract.BatchError{Index: 1, Err: contract.ErrOverflow}, 422,
			`{"status":"error","error":{"code":"overflow","message":"batch op 1: ` + contract.ErrOverflow.Error() + `","index":1},"index":1}`, nil},
		{fmt.Errorf("%w: %w", contract.ErrQuotaExceeded, &quota.ExceededError{Quota: "page:*", Limit: "max_keys", Max: 3, ID: "page:a"}), 429,
			`{"status":"error","error":{"code":"quota_exceeded","message":"` + contract.ErrQuotaExceeded.Error() + `: quota exceeded for page:* (max_keys 3)",` +
				`"quota":{"name":"page:*","limit":"max_keys","max":3}}}`, nil},
		{auth.ErrBadToken, 401,
			`{"status":"error","error":{"code":"unauthenticated","message":"` + auth.ErrBadToken.Error() + `"}}`,
			map[string]string{"WWW-Authenticate": `Bearer realm="counterd"`}},
	} {
		w := httptest.NewRecorder()
		WriteError(w, c.err)
		if w.Code != c.status || w.Body.String() != c.body+"\n" {
			t.Errorf("%v: %d %s, want %d %s", c.err, w.Code, w.Body, c.status, c.body)
		}
		want := map[string]string{"Content-Type": "application/json", "X-Content-Type-Options": "nosniff"}
		for k, v := range c.header {
			want[k] = v
		}
		for k, v := range want {
			if got := w.Header().Get(k); got != v {
				t.Errorf("%v: %s %q, want %q", c.err, k, got, v)
			}
		}
	}
}

// TestWriteJSONUnencodable: a value that does not encode answers a 500
// internal error and returns the encoding error.
func TestWriteJSONUnencodable(t *testing.T) {
	w := httptest.NewRecorder()
	err := WriteJSON(w, http.StatusOK, map[string]any{"f": func() {}})
	if err == nil || w.Code != 500 || w.Body.String() != `{"status":"error","error":{"code":"internal","message":"internal error"}}`+"\n" {
		t.Errorf("%v: %d %s", err, w.Code, w.Body)
	}
}
