package ratelimit

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error the package returns wraps exactly one of
// them; front ends map them with errors.Is.
var (
	ErrClosed         = errors.New("ratelimit: closed")
	ErrInvalidKey     = errors.New("ratelimit: invalid key")
	ErrInvalidLimit   = errors.New("ratelimit: invalid limit")
	ErrInvalidCost    = errors.New("ratelimit: invalid cost")
	ErrInvalidPolicy  = errors.New("ratelimit: invalid policy")
	ErrInvalidRequest = errors.New("ratelimit: invalid request")
	ErrUnknownPolicy  = errors.New("ratelimit: no such policy")
	ErrNoPolicy       = errors.New("ratelimit: no policy matches the key")
	ErrTooManyLimits  = errors.New("ratelimit: too many limits in one check")
	ErrFull           = errors.New("ratelimit: too many keys")
	// ErrInvalidEntry: ImportEntries got a state no check could produce.
	ErrInvalidEntry = errors.New("ratelimit: invalid handoff entry")
	// ErrOwnerUnavailable: a Router could not reach the node owning the
	// key and its Fallback is FallbackError.
	ErrOwnerUnavailable = errors.New("ratelimit: owner of the key unavailable")
	// ErrPolicyStoreUnavailable: a policy change could not be written to
	// the shared PolicyStore (nothing changed on this node).
	ErrPolicyStoreUnavailable = errors.New("ratelimit: policy store unavailable")
	// ErrDeciderUnavailable: a shared decider (Redis in tiered mode) did
	// not answer; the check was not decided.
	ErrDeciderUnavailable = errors.New("ratelimit: rate-limit state unavailable")
)

func errorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
}
