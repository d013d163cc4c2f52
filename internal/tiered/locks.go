package tiered

import (
	"context"
	"fmt"
	"time"

	"github.com/counterd/counterd/internal/contract"
	redisstore "github.com/counterd/counterd/internal/store/redis"
)

// Script locks: a Redis-protocol Lua script on a tiered node locks the
// counters it touches in Redis (redisstore's locks.go), so the writes of
// every node sharing the store (their Redis-protocol and HTTP clients,
// event pipelines, region merges) wait while it runs. See docs/resp.md,
// "Scripting", and docs/redis-tier.md, "Script locks".

var (
	// ErrLocked: a write (or a script's lock) waited for a counter
	// locked by a script on another node past its deadline or
	// Options.LockWait. It wraps contract.ErrUnavailable: HTTP 503,
	// RESP TRYAGAIN; the request may be retried.
	ErrLocked = fmt.Errorf("%w: script lock", contract.ErrUnavailable)
	// ErrLockLost: a script's write found the counter's lock no longer
	// the script's (its lease ran out: its node stalled, or the keys were
	// flushed); nothing was written.
	ErrLockLost = fmt.Errorf("%w: script lock lost", contract.ErrUnavailable)
)

var _ contract.KeyLocker = (*Backend)(nil)

// NewKeyLocks implements contract.KeyLocker.
func (b *Backend) NewKeyLocks(lease time.Duration) contract.KeyLocks {
	return &keyLocks{b: b, l: b.rs.NewLocks(b.inst, lease)}
}

type keyLocks struct {
	b *Backend
	l *redisstore.Locks
}

func (k *keyLocks) Lock(ctx context.Context, ids []string, wait time.Duration) error {
	return mapErr(k.l.Lock(ctx, ids, wait))
}

func (k *keyLocks) Context(ctx context.Context) context.Context { return k.l.Context(ctx) }

func (k *keyLocks) Unlock() {
	// A lock left behind is free again after its lease.
	if err := k.l.Unlock(context.Background()); err != nil {
		k.b.opts.Logger.Warn("tiered: releasing a script's locks (they expire after their lease)", "err", err)
	}
}
