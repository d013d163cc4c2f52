// Package auth authenticates API tokens and authorizes requests by
// namespace, for every client-facing front end (HTTP, Redis protocol, gRPC).
//
// A tokens file (YAML, see Parse and docs/security.md) names users; each
// has one or more tokens, stored only as their SHA-256 ("sha256:<hex>"),
// and grants: a glob over counter ids ("page_views:*", "*") mapped to a
// permission. Permissions are levels, admin > write > read: a write token
// can read, because INCR answers with the new value anyway, so a
// write-but-not-read right would be illusory.
//
// Why SHA-256 and not a slow password hash: tokens are API keys generated
// by a machine (counterctl auth token: 32 random bytes), so a preimage
// search over 2^256 is the attacker's only option whatever the hash costs,
// while a deliberately slow hash (bcrypt, argon2) would add tens of
// milliseconds of CPU to every HTTP request and every RESP AUTH. Parse
// therefore stores and compares digests only, and counterctl refuses to
// hash tokens shorter than MinTokenLen. Do not use human passwords as
// tokens.
//
// A Store holds the parsed file behind an atomic pointer: Reload parses
// the file again and swaps the table in one store, so requests in flight
// and open connections are never dropped; a file that does not parse
// leaves the previous table in force. Each table has a generation number
// so that long-lived connections (RESP) re-resolve their token after a
// reload: a removed token stops working on its open connections too.
//
// To keep SHA-256 off the hot path, a Store remembers recently accepted
// tokens (a small table compared in constant time, emptied by a reload),
// so the process holds those tokens in memory, as it holds each request.
//
// Store and Principal are safe for concurrent use; a Principal is
// immutable.
package auth
