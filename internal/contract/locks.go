package contract

import (
	"context"
	"time"
)

// KeyLocker is implemented by a backend whose counters other processes
// write too (the tiered mode: every node on one Redis and PostgreSQL):
// a Redis-protocol Lua script locks the counters it touches with it, so
// that no writer of any node changes them while the script runs
// (docs/resp.md, "Scripting"). Backends without it need no such locks
// (embedded: the script gate; cluster: a key's owner serves its writes).
type KeyLocker interface {
	// NewKeyLocks returns a holder with no lock yet; its locks last
	// lease unless renewed, and are renewed while held, so a crashed
	// holder's locks are free again after at most lease.
	NewKeyLocks(lease time.Duration) KeyLocks
}

// KeyLocks are one holder's locks (one script's run).
type KeyLocks interface {
	// Lock locks the counters ids in the order given (sort them when
	// locking several at once), skipping those held already, waiting
	// for another holder's lock at most wait (then an error wrapping
	// ErrUnavailable) or until ctx ends. Locks taken before an error
	// stay held until Unlock.
	Lock(ctx context.Context, ids []string, wait time.Duration) error
	// Context returns ctx carrying the locks: the backend's writes made
	// with it pass them; every other write of a locked counter waits.
	Context(ctx context.Context) context.Context
	// Unlock releases every lock held.
	Unlock()
}
