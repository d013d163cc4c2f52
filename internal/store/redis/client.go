package redisstore

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client is the part of go-redis's API that counterd calls, satisfied by
// *redis.Client and *redis.ClusterClient (Store.Client returns it; tests
// needing more assert redis.UniversalClient). Holding the client through
// this interface rather than redis.UniversalClient says what the Redis
// tier depends on, and left 12 KB of go-redis out of the release binary
// (docs/deploy.md, "Building"). A new call adds its method here.
type Client interface {
	redis.Scripter // Script.Load, Script.Run

	Process(ctx context.Context, cmd redis.Cmder) error
	Pipeline() redis.Pipeliner
	Ping(ctx context.Context) *redis.StatusCmd
	Close() error

	Get(ctx context.Context, key string) *redis.StringCmd
	MGet(ctx context.Context, keys ...string) *redis.SliceCmd
	Set(ctx context.Context, key string, value any, expiration time.Duration) *redis.StatusCmd
	SetNX(ctx context.Context, key string, value any, expiration time.Duration) *redis.BoolCmd
	Del(ctx context.Context, keys ...string) *redis.IntCmd
	Unlink(ctx context.Context, keys ...string) *redis.IntCmd
	Exists(ctx context.Context, keys ...string) *redis.IntCmd
	PFCount(ctx context.Context, keys ...string) *redis.IntCmd
	HGet(ctx context.Context, key, field string) *redis.StringCmd
	HGetAll(ctx context.Context, key string) *redis.MapStringStringCmd
	SMembers(ctx context.Context, key string) *redis.StringSliceCmd
	SRem(ctx context.Context, key string, members ...any) *redis.IntCmd
	ZAdd(ctx context.Context, key string, members ...redis.Z) *redis.IntCmd
	ZAddXX(ctx context.Context, key string, members ...redis.Z) *redis.IntCmd
	ZRem(ctx context.Context, key string, members ...any) *redis.IntCmd
	ZRangeByScore(ctx context.Context, key string, opt *redis.ZRangeBy) *redis.StringSliceCmd
}

var (
	_ Client = (*redis.Client)(nil)
	_ Client = (*redis.ClusterClient)(nil)
)
