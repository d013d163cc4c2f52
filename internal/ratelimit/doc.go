// Package ratelimit decides whether a hit on a key is within its limits.
//
// A Limiter holds, for every (key, Limit) pair that has state, one
// limiter entry in the counter engine's index (internal/engine/limiter.go;
// Config.Table, the node engine's in a server): counters and limits share
// one table. Keys are not stored: an entry is identified by a 96-bit
// fingerprint of the key and the limit (xxhash and a seeded maphash), in
// an id namespace no counter can name, so the memory per active key does
// not depend on the key's length and limit state never shows as a counter.
// Lookups take no shard lock; each entry has its own spin lock, so
// unrelated keys never contend. A check locks its entry, decides with the
// algorithm (a pure function of the three state words) and unlocks it: no
// allocation, no write-ahead log, no flush (limiter state is soft state).
// A check of several limits (CheckMulti) resolves every entry first, locks
// them in the engine's order (shard, slab index), evaluates all and
// commits only if all allow, so a multi-limit check is all-or-nothing and
// deadlock-free. A janitor goroutine frees entries whose state has
// returned to "fresh" (the algorithm's expiry time has passed).
//
// Algorithms (see docs/ratelimit.md for the exact semantics):
//
//   - FixedWindow: a count per window aligned to the Unix epoch.
//   - SlidingWindow: the two-bucket weighted sliding window counter.
//   - SlidingLog: the exact sliding window, one timestamp per hit.
//   - TokenBucket: GCRA (a token bucket refilled continuously).
//   - LeakyBucket: GCRA as a queue: admitted hits carry the delay after
//     which they leave the queue (shaping instead of policing).
//
// Policies (Policy, LoadPolicies, Limiter.SetPolicy) attach limits to keys
// by glob or namespace. Where several nodes share one state, the policies
// live in a PolicyStore (PostgreSQL in tiered mode) and a PolicySync
// writes changes through it and reloads it into each node's Limiter.
//
// The front ends live in internal/api/ratelimitapi: the HTTP API (POST
// /ratelimit/check, /ratelimit/policies; its JSON is wire.go's), the
// net/http middleware, the RESP command RL.CHECK (Limiter.CheckArgs parses
// its arguments) and Envoy's rate limit service (envoy.service.ratelimit.v3)
// over gRPC. They take a Checker: a *Limiter decides itself; a *Router (the
// cluster mode) decides on the node owning the key, forwarding the check
// one hop to the owner's POST /ratelimit/check, so decisions are exact
// while one node owns a key. When the owner is unreachable it decides
// locally (approximate: up to k x Limit per window with k nodes deciding)
// or fails (FallbackError); docs/ratelimit.md states the bounds. In the
// tiered mode, redisrl.Decider decides every check in one Redis script
// shared by all nodes, exactly as a Limiter would.
//
// Handoff (handoff.go): with Config.KeepKeys a Limiter also keeps each
// entry's key and limit, so that ExportEntries and ExportChanged can copy
// state by key for another node and ImportEntries can merge it there; the
// merge is a join that only makes a limit stricter. A PolicyLog
// (policylog.go) is a PolicyStore whose last-writer-wins records converge
// between nodes and persist through a PolicyPersister.
package ratelimit
