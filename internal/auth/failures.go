package auth

import "errors"

// Reasons of a refused request, as counted by the front ends
// (counterd_auth_failures_total's reason label).
const (
	// ReasonNoToken: the request carried no credentials (HTTP 401
	// without a token, RESP -NOAUTH, gRPC UNAUTHENTICATED without one).
	ReasonNoToken = "no_token"
	// ReasonBadToken: the credentials match no user (HTTP 401 with a
	// token, RESP -WRONGPASS, gRPC UNAUTHENTICATED with one).
	ReasonBadToken = "bad_token"
	// ReasonForbidden: the user lacks the permission (HTTP 403, RESP
	// -NOPERM, gRPC PERMISSION_DENIED).
	ReasonForbidden = "forbidden"
)

// Reasons lists every reason, for metrics that start each series at 0.
var Reasons = []string{ReasonNoToken, ReasonBadToken, ReasonForbidden}

// ReasonOf classifies an error of Authenticate or of a permission check;
// "" for an error that is neither.
func ReasonOf(err error) string {
	switch {
	case errors.Is(err, ErrBadToken):
		return ReasonBadToken
	case errors.Is(err, ErrUnauthenticated):
		return ReasonNoToken
	case errors.Is(err, ErrForbidden):
		return ReasonForbidden
	}
	return ""
}

// SetOnFailure installs fn, called by the front ends for every refused
// request with their name ("http", "resp", "grpc") and a Reason. Call it
// before serving; the store holds one hook.
func (s *Store) SetOnFailure(fn func(frontEnd, reason string)) { s.onFailure = fn }

// Failed reports a refused request to the hook, if any. Safe on a nil
// store (no --auth: nothing is refused).
func (s *Store) Failed(frontEnd, reason string) {
	if s != nil && s.onFailure != nil && reason != "" {
		s.onFailure(frontEnd, reason)
	}
}
