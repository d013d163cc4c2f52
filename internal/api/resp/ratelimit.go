package resp

import (
	"context"

	"github.com/counterd/counterd/internal/api/ratelimitapi"
	"github.com/counterd/counterd/internal/ratelimit"
)

// ctxChecker is a Checker that forwards checks to other nodes
// (*ratelimit.Router): it gets the connection's credentials.
type ctxChecker interface {
	CheckArgsContext(ctx context.Context, args [][]byte) ([4]int64, error)
}

// RL.CHECK key limit period_ms [cost] [algorithm]: one rate-limit check
// (docs/ratelimit.md). Reply: [allowed 0|1, remaining, reset_ms,
// retry_after_ms]. Registered only when Options.RateLimiter is set.
func rateLimitCommand(l ratelimit.Checker) *command {
	return &command{
		name: ratelimitapi.RESPCommandName, arity: ratelimitapi.RESPArity, flags: flagWrite | flagFast, first: 1, last: 1, step: 1,
		doc: &cmdDoc{"counterd", "Checks and consumes a rate limit on a key: allowed, remaining, reset_ms, retry_after_ms.", "0.1.0", "O(1)",
			[]argDoc{aKey("key"), aInt("limit"), aInt("period_ms"), aOpt(aInt("cost")), aOpt(aStr("algorithm"))}},
		fn: func(s *Server, c *client, args [][]byte) {
			var r [4]int64
			var err error
			if cc, ok := l.(ctxChecker); ok && c.auth.ok {
				r, err = cc.CheckArgsContext(c.authContext(c.ctx), args[1:])
			} else {
				r, err = l.CheckArgs(args[1:])
			}
			if err != nil {
				c.writeError(ratelimitapi.RESPError(err))
				return
			}
			c.writeHeader('*', len(r))
			for _, v := range r {
				c.writeInt(v)
			}
		},
	}
}
