package ratelimitapi

import (
	"errors"
	"strings"

	"github.com/counterd/counterd/internal/ratelimit"
)

// RESP command metadata for RL.CHECK (ratelimit.Limiter.CheckArgs), for
// the RESP server's command table (internal/api/resp).
const (
	RESPCommandName = "rl.check"
	RESPArity       = -2 // the name and at least the key
)

// RESPError formats an error of CheckArgs as a Redis error reply without
// the leading '-': "ERR wrong number of arguments for 'rl.check' command",
// "ERR limit is not an integer or out of range", "ERR invalid limit: ...".
func RESPError(err error) string {
	var ae *ratelimit.ArgError
	if errors.As(err, &ae) {
		return "ERR " + ae.Msg
	}
	if errors.Is(err, ratelimit.ErrDeciderUnavailable) {
		// Like a Redis Cluster that cannot serve right now: retryable.
		return "TRYAGAIN " + strings.TrimPrefix(err.Error(), "ratelimit: ")
	}
	return "ERR " + strings.TrimPrefix(err.Error(), "ratelimit: ")
}
