package backendtest

import (
	"context"
	"errors"
	"time"

	"github.com/counterd/counterd/internal/contract"
)

// Script locks (contract.KeyLocker): a backend whose counters other
// nodes write too (tiered) locks them for a Lua script, so that no other
// writer changes them while it runs. A backend without KeyLocker (its
// script gate is enough) skips the case with a log line.

func keyLockCases() []tcase {
	return []tcase{
		{"a locked counter takes only its holder's writes; other writes, batches included, wait and fail with ErrUnavailable having changed nothing; after Unlock they apply", func(e *env) {
			kl, ok := e.b.(contract.KeyLocker)
			if !ok {
				e.t.Skipf("%s backend does not implement contract.KeyLocker: no writer of another node bypasses its script gate", e.caps.Mode)
			}
			x, y, z := e.id("x"), e.id("y"), e.id("z")
			e.apply(add(x, contract.KindNone, 1))
			l := kl.NewKeyLocks(5 * time.Second)
			defer l.Unlock()
			if err := l.Lock(e.ctx, []string{x, y}, time.Second); err != nil {
				e.t.Fatalf("lock: %v", err)
			}
			refused := func(what string, f func(ctx context.Context) error) {
				e.t.Helper()
				ctx, cancel := context.WithTimeout(e.ctx, 50*time.Millisecond)
				defer cancel()
				if err := f(ctx); !errors.Is(err, contract.ErrUnavailable) {
					e.t.Fatalf("%s of a locked counter: %v, want ErrUnavailable", what, err)
				}
			}
			refused("add", func(ctx context.Context) error {
				_, err := e.b.Apply(ctx, add(x, contract.KindNone, 1), contract.WriteOptions{})
				return err
			})
			refused("batch whose second id is locked", func(ctx context.Context) error {
				_, err := e.b.ApplyBatch(ctx, []contract.Op{add(z, contract.KindNone, 1), add(y, contract.KindNone, 1)}, contract.WriteOptions{})
				return err
			})
			refused("a second holder's lock", func(ctx context.Context) error {
				l2 := kl.NewKeyLocks(time.Second)
				defer l2.Unlock()
				return l2.Lock(ctx, []string{x}, 30*time.Millisecond)
			})
			e.wantValue(x, contract.KindCounter, 1)
			if v, err := e.b.Get(e.ctx, z); err != nil || v.Value != 0 {
				e.t.Fatalf("%s after the refused batch = %+v, %v; want 0 (its add undone)", z, v, err)
			}
			if _, err := e.b.Apply(l.Context(e.ctx), add(x, contract.KindNone, 2), contract.WriteOptions{}); err != nil {
				e.t.Fatalf("the holder's add: %v", err)
			}
			e.wantValue(x, contract.KindCounter, 3)
			l.Unlock()
			e.apply(add(x, contract.KindNone, 1))
			e.wantValue(x, contract.KindCounter, 4)
		}},
	}
}
