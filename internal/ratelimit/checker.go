package ratelimit

import "context"

// Checker decides rate-limit checks for the front ends
// (internal/api/ratelimitapi: the HTTP API, the middleware, Envoy RLS, and
// the RESP command RL.CHECK). *Limiter
// decides every check itself; *Router sends each check to the node that
// owns its key and decides there; redisrl.Decider decides in Redis, for
// every node of the tiered mode. Implementations are safe for concurrent
// use.
type Checker interface {
	// CheckMultiContext is Limiter.CheckMulti: it checks hits atomically
	// (all charged or none) and returns the binding status, and each hit's
	// status in out when out is not nil. ctx bounds any network round trip.
	CheckMultiContext(ctx context.Context, hits []Hit, out []Status) (Status, error)
	// CheckArgs runs RL.CHECK; see Limiter.CheckArgs.
	CheckArgs(args [][]byte) ([4]int64, error)
	// Local returns the Limiter of this process: it holds the policies
	// (front ends resolve them with it), its clock is the front ends'
	// clock, and it decides checks another node forwarded here.
	Local() *Limiter
}

var (
	_ Checker = (*Limiter)(nil)
	_ Checker = (*Router)(nil)
)

// CheckMultiContext is CheckMulti; ctx is unused (a Limiter never waits).
func (l *Limiter) CheckMultiContext(_ context.Context, hits []Hit, out []Status) (Status, error) {
	return l.CheckMulti(hits, out)
}

// Local returns l.
func (l *Limiter) Local() *Limiter { return l }
