// Package redisrl decides rate limits in Redis, so that any number of
// counterd nodes sharing one Redis (or Redis Cluster) enforce one exact
// global limit: the tiered mode's ratelimit.Checker.
//
// Each check is one Lua script (check.lua, run with EVALSHA and loaded on
// NOSCRIPT): it reads the state of every limit of the check, decides all
// of them exactly as ratelimit.Limiter.CheckMulti does (every algorithm,
// the same Status figures), and charges all or none. Redis runs a script
// atomically, so concurrent checks from any node serialise on it.
//
// Key layout (docs/ratelimit.md): the state of hit (key K, limit L) in a
// check whose first key is F is the Redis key
//
//	rl:{T}:<L.ID() in hex>[:K]
//
// where T is F's hash tag, {tag} inside F as Redis defines it, else all of
// F, with '%' and '}' percent-encoded; ":K" is left out when K is that tag.
// Every key of a check therefore has the tag T and lives in one slot of a
// Redis Cluster, and a key's state is shared by every check whose first key
// has the same tag (a multi-key check keeps the state of its other keys
// under its first key's tag, as a cluster-mode check keeps it on the first
// key's owner). Keys like "{user:1}:api" and "{user:1}:login" share a tag,
// so checks of either alone and of both together share state. A
// sliding_log limit keeps the sum of its hits there and the hits in a list
// at the same name with the prefix "rlog:".
//
// Time: by default the script reads Redis' clock (TIME), so every counterd
// node decides on one clock whatever their own clocks say; on a Redis
// Cluster each master's clock decides its own slots. Config.Clock injects
// a clock instead (tests). Every key gets a TTL of the time until its
// state is back to fresh (plus Config.TTLSlack), so idle keys expire.
package redisrl

import (
	"bytes"
	"compress/gzip"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/counterd/counterd/internal/ratelimit"
	"github.com/counterd/counterd/internal/shed"
)

// The script is embedded gzip-compressed (check.lua.gz, written by go
// generate from check.lua, the source): 13 KB of Lua is 4 KB in the
// release binary. TestCheckLuaGzipCurrent fails when the two differ.
//
//go:generate sh -c "gzip -9 -n -c check.lua > check.lua.gz"
//go:embed check.lua.gz
var checkLuaGzip []byte

var checkLua = gunzip(checkLuaGzip)

// gunzip decompresses the embedded script; it panics on a corrupt one,
// which TestCheckLuaGzipCurrent rules out.
func gunzip(b []byte) string {
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		panic("redisrl: embedded check.lua.gz: " + err.Error())
	}
	out, err := io.ReadAll(r)
	if err != nil {
		panic("redisrl: embedded check.lua.gz: " + err.Error())
	}
	return string(out)
}

var checkScript = redis.NewScript(checkLua)

// DefaultTimeout bounds one check's round trip to Redis by default.
const DefaultTimeout = time.Second

// Config configures New.
type Config struct {
	// Client is the Redis (or Redis Cluster) client. Required; the
	// Decider does not close it.
	Client redis.Scripter
	// Local holds the policies and is the front ends' clock (headers).
	// Required; the Decider does not close it.
	Local *ratelimit.Limiter
	// Clock, when set, is the time checks are decided at (unix ns passed
	// to the script). Default nil: Redis' clock, the same for every node.
	Clock func() time.Time
	// TTLSlack is added to every key's TTL. Default 0 with Redis' clock;
	// with Clock set, 1 minute, so that Redis (which expires keys on its
	// own clock) never drops state that an injected clock still needs.
	TTLSlack time.Duration
	// Timeout bounds one check when the caller's context has no earlier
	// deadline. Default 1s (DefaultTimeout).
	Timeout time.Duration
}

// Decider is a ratelimit.Checker deciding in Redis. It is safe for
// concurrent use. Close makes later checks fail with ratelimit.ErrClosed;
// it closes neither the client nor the Limiter.
type Decider struct {
	rdb     redis.Scripter // only Script.Run
	local   *ratelimit.Limiter
	clock   func() time.Time
	slackMS int64
	timeout time.Duration
	closed  atomic.Bool
}

var _ ratelimit.Checker = (*Decider)(nil)

// New returns a Decider.
func New(cfg Config) (*Decider, error) {
	if cfg.Client == nil || cfg.Local == nil {
		return nil, errors.New("redisrl: Config.Client and Config.Local are required")
	}
	if cfg.TTLSlack < 0 {
		return nil, errors.New("redisrl: Config.TTLSlack is negative")
	}
	if cfg.TTLSlack == 0 && cfg.Clock != nil {
		cfg.TTLSlack = time.Minute
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	return &Decider{rdb: cfg.Client, local: cfg.Local, clock: cfg.Clock,
		slackMS: int64((cfg.TTLSlack + time.Millisecond - 1) / time.Millisecond), timeout: cfg.Timeout}, nil
}

// Close makes later checks fail with ratelimit.ErrClosed. It is idempotent.
func (d *Decider) Close() error {
	d.closed.Store(true)
	return nil
}

// Local returns the Limiter holding the policies.
func (d *Decider) Local() *ratelimit.Limiter { return d.local }

// CheckArgs runs RL.CHECK (see ratelimit.Limiter.CheckArgs) in Redis.
func (d *Decider) CheckArgs(args [][]byte) ([4]int64, error) {
	return ratelimit.CheckArgsWith(d, args)
}

// CheckMultiContext checks hits atomically in Redis, with the semantics,
// statuses and errors of ratelimit.Limiter.CheckMulti. A failure of Redis
// wraps ratelimit.ErrDeciderUnavailable; the check was charged only if the
// script ran (its reply lost).
func (d *Decider) CheckMultiContext(ctx context.Context, hits []ratelimit.Hit, out []ratelimit.Status) (ratelimit.Status, error) {
	if d.closed.Load() {
		return ratelimit.Status{}, ratelimit.ErrClosed
	}
	distinct, index, err := ratelimit.PrepareHits(hits, out)
	if err != nil {
		return ratelimit.Status{}, err
	}
	keys := make([]string, 0, 2*len(distinct))
	args := make([]any, 2, 2+6*len(distinct))
	if d.clock != nil {
		ns := d.clock().UnixNano()
		if ns < 0 {
			return ratelimit.Status{}, fmt.Errorf("%w: clock before 1970", ratelimit.ErrInvalidRequest)
		}
		args[0] = strconv.FormatInt(ns, 10)
	} else {
		args[0] = ""
	}
	args[1] = d.slackMS
	tag := Tag(hits[0].Key)
	for _, h := range distinct {
		k := StateKey(tag, h.Key, h.Limit)
		keys = append(keys, k, "rlog"+strings.TrimPrefix(k, "rl"))
		t, tol, err := h.Limit.GCRA()
		if err != nil {
			return ratelimit.Status{}, err // validated already
		}
		args = append(args, int(h.Limit.Algorithm), h.Limit.Limit, int64(h.Limit.Period), int64(t), int64(tol), h.Cost)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.timeout)
		defer cancel()
	}
	p := shed.IOWait(ctx) // a Redis round trip is I/O: the admission slot goes to the next request
	res, err := checkScript.Run(ctx, d.rdb, keys, args...).StringSlice()
	p.Resume()
	if err != nil {
		if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return ratelimit.Status{}, fmt.Errorf("redisrl: check: %w", ctx.Err())
		}
		return ratelimit.Status{}, fmt.Errorf("%w: redis: %w", ratelimit.ErrDeciderUnavailable, err)
	}
	sts, err := parseReply(res, distinct)
	if err != nil {
		return ratelimit.Status{}, fmt.Errorf("%w: %w", ratelimit.ErrDeciderUnavailable, err)
	}
	if out == nil {
		out = make([]ratelimit.Status, len(hits))
	}
	for i, j := range index {
		out[i] = sts[j]
	}
	return ratelimit.Binding(out[:len(hits)]), nil
}

// parseReply decodes the script's answer: 5 figures per distinct hit.
func parseReply(res []string, hits []ratelimit.Hit) ([]ratelimit.Status, error) {
	if len(res) != 5*len(hits) {
		return nil, fmt.Errorf("redisrl: script answered %d values for %d limits", len(res), len(hits))
	}
	sts := make([]ratelimit.Status, len(hits))
	for i := range hits {
		r := res[5*i : 5*i+5]
		var v [4]int64
		for k := range v {
			n, err := strconv.ParseInt(r[k+1], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("redisrl: script answered %q: %w", r[k+1], err)
			}
			v[k] = n
		}
		sts[i] = ratelimit.Status{Allowed: r[0] == "1", Limit: hits[i].Limit.Limit, Remaining: v[0],
			Reset: time.Duration(v[1]), RetryAfter: time.Duration(v[2]), Delay: time.Duration(v[3])}
	}
	return sts, nil
}

// Tag is the hash tag of the Redis keys of a check whose first key is
// key: key's own hash tag ({tag}, as Redis finds it) or else all of key,
// with '%' and '}' percent-encoded so that the tag ends at the first '}'.
func Tag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return escape(key[i+1 : i+1+j])
		}
	}
	return escape(key)
}

func escape(s string) string {
	if !strings.ContainsAny(s, "%}") {
		return s
	}
	return strings.NewReplacer("%", "%25", "}", "%7D").Replace(s)
}

// StateKey is the Redis key of the state of (key, lim) in a check of tag
// (see Tag); key is left out when the tag is key itself.
func StateKey(tag, key string, lim ratelimit.Limit) string {
	var id [16]byte
	for i, v := 15, lim.ID(); i >= 0; i, v = i-1, v>>4 {
		id[i] = "0123456789abcdef"[v&15]
	}
	k := "rl:{" + tag + "}:" + string(id[:])
	if escape(key) == tag {
		return k
	}
	return k + ":" + key
}
