package resp

import "github.com/counterd/counterd/internal/ratelimit"

// RL.CHECK key limit period_ms [cost] [algorithm]: one rate-limit check
// (docs/ratelimit.md). Reply: [allowed 0|1, remaining, reset_ms,
// retry_after_ms]. Registered only when Options.RateLimiter is set.
func rateLimitCommand(l ratelimit.Checker) *command {
	return &command{
		name: ratelimit.RESPCommandName, arity: ratelimit.RESPArity, flags: flagWrite | flagFast, first: 1, last: 1, step: 1,
		doc: &cmdDoc{"counterd", "Checks and consumes a rate limit on a key: allowed, remaining, reset_ms, retry_after_ms.", "0.1.0", "O(1)",
			[]argDoc{aKey("key"), aInt("limit"), aInt("period_ms"), aOpt(aInt("cost")), aOpt(aStr("algorithm"))}},
		fn: func(_ *Server, c *client, args [][]byte) {
			r, err := l.CheckArgs(args[1:])
			if err != nil {
				c.writeError(ratelimit.RESPError(err))
				return
			}
			c.writeHeader('*', len(r))
			for _, v := range r {
				c.writeInt(v)
			}
		},
	}
}
