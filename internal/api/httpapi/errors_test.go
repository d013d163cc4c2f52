package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/counterd/counterd/internal/auth"
	"github.com/counterd/counterd/internal/engine"
)

// TestClassify pins the wire code and status of every sentinel, wrapped the
// way backends wrap them.
func TestClassify(t *testing.T) {
	for _, c := range []struct {
		err    error
		code   string
		status int
	}{
		{engine.ErrInvalidID, codeInvalidID, http.StatusBadRequest},
		{engine.ErrWrongKind, codeWrongKind, http.StatusConflict},
		{engine.ErrOverflow, codeOverflow, http.StatusUnprocessableEntity},
		{engine.ErrNotFound, codeNotFound, http.StatusNotFound},
		{engine.ErrClosed, codeUnavailable, http.StatusServiceUnavailable},
		{engine.ErrInsufficientStorage, codeInsufficientStorage, http.StatusInsufficientStorage},
		{engine.ErrUnavailable, codeUnavailable, http.StatusServiceUnavailable},
		{context.DeadlineExceeded, codeUnavailable, http.StatusServiceUnavailable},
		{auth.ErrUnauthenticated, codeUnauthenticated, http.StatusUnauthorized},
		{auth.ErrBadToken, codeUnauthenticated, http.StatusUnauthorized},
		{auth.ErrForbidden, codeForbidden, http.StatusForbidden},
		{errors.New("disk on fire"), codeInternal, http.StatusInternalServerError},
	} {
		wrapped := fmt.Errorf("tiered: redis 127.0.0.1:6379: %w", c.err)
		if code, status := classify(wrapped); code != c.code || status != c.status {
			t.Errorf("%v: %s %d, want %s %d", c.err, code, status, c.code, c.status)
		}
	}
}
