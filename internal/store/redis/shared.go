package redisstore

import (
	"context"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Script is a Lua script a caller of the store runs with Eval.
type Script struct{ sc *script }

// NewScript returns src as a Script.
func NewScript(src string) *Script { return &Script{sc: newScript(src)} }

// Eval runs sc over keys (which must share a hash tag on Redis Cluster)
// as a write: sent once (never retried after it may have run), its reply
// awaited even if ctx is cancelled, errors mapped like the store's own.
func (s *Store) Eval(ctx context.Context, op string, sc *Script, keys []string, args ...any) (any, error) {
	ctx = context.WithoutCancel(ctx)
	start := time.Now()
	var r any
	err := s.do(ctx, op, true, func(ctx context.Context) (err error) {
		r, err = s.eval(ctx, sc.sc, keys, args...).Result()
		return err
	})
	s.observe(op, start, err)
	return r, err
}

// IDs calls fn with the id of every counter Redis holds (each meta key,
// found with SCAN on every master; on Redis Cluster fn may be called
// from several goroutines at once). A counter created or deleted during
// the scan may or may not be seen.
func (s *Store) IDs(ctx context.Context, fn func(id string)) error {
	start := time.Now()
	err := s.do(ctx, "ids", false, func(ctx context.Context) error {
		return s.forEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			iter := m.Scan(ctx, 0, "counter:{*}:meta", 1000).Iterator()
			for iter.Next(ctx) {
				k := iter.Val()
				if id, ok := strings.CutPrefix(k, "counter:{"); ok {
					if id, ok = strings.CutSuffix(id, "}:meta"); ok {
						fn(id)
					}
				}
			}
			return iter.Err()
		})
	})
	s.observe("ids", start, err)
	return err
}
