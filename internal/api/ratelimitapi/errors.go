package ratelimitapi

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/counterd/counterd/internal/api/httpapi"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/ratelimit"
)

// contractErrors maps the rate limiter's sentinel errors onto the
// contract's, so that httpapi.WriteError (the one error writer of the HTTP
// API) answers them with the codes of docs/http-api.md: invalid_argument
// (400), not_found (404) and unavailable (503).
var contractErrors = []struct{ err, as error }{
	{ratelimit.ErrInvalidKey, contract.ErrInvalidArgument},
	{ratelimit.ErrInvalidLimit, contract.ErrInvalidArgument},
	{ratelimit.ErrInvalidCost, contract.ErrInvalidArgument},
	{ratelimit.ErrInvalidPolicy, contract.ErrInvalidArgument},
	{ratelimit.ErrInvalidRequest, contract.ErrInvalidArgument},
	{ratelimit.ErrTooManyLimits, contract.ErrInvalidArgument},
	{ratelimit.ErrUnknownPolicy, contract.ErrNotFound},
	{ratelimit.ErrNoPolicy, contract.ErrNotFound},
	{ratelimit.ErrClosed, contract.ErrUnavailable},
	{ratelimit.ErrFull, contract.ErrUnavailable},
	{ratelimit.ErrOwnerUnavailable, contract.ErrUnavailable},
	{ratelimit.ErrPolicyStoreUnavailable, contract.ErrUnavailable},
	{ratelimit.ErrDeciderUnavailable, contract.ErrUnavailable},
}

// contractError is a rate-limit error that also matches its contract
// sentinel (errors.Is); its message is the original's.
type contractError struct{ err, as error }

func (e *contractError) Error() string   { return e.err.Error() }
func (e *contractError) Unwrap() []error { return []error{e.err, e.as} }

// toContract returns err matching the contract sentinel of its rate-limit
// sentinel, or err itself when it has none (auth errors, the HTTP layer's
// own, which httpapi classifies).
func toContract(err error) error {
	for _, c := range contractErrors {
		if errors.Is(err, c.err) {
			return &contractError{err, c.as}
		}
	}
	return err
}

// writeError answers err with httpapi.WriteError.
func writeError(w http.ResponseWriter, err error) { httpapi.WriteError(w, toContract(err)) }

func errorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
}
