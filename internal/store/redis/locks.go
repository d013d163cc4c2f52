package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/counterd/counterd/internal/ctxwait"
)

// Script locks (the tiered mode's Lua scripts: tiered's locks.go, and
// docs/redis-tier.md, "Script locks"). A script holding locks on
// counters keeps every other writer, on every node sharing the Redis,
// from changing them until it ends: each counter's lock is the key
// counter:{id}:lock (LockKey, in the counter's slot) holding the
// holder's random token, with a lease (PX) renewed while it is held.
// Every write script of the store checks that key in the same script
// (luaLockCheck): while another token holds it, it writes nothing and
// answers LOCKED, and the store tries again after a short backoff until
// the request's deadline or Options.LockWait (then ErrLocked). A write
// made with a context carrying the holder's Locks (Locks.Context) runs
// the script's owned variant, which writes only while its token holds
// the lock (else LOCKLOST: ErrLockLost).

var (
	// ErrLocked: a counter's script lock was held by another holder for
	// longer than the write (or the lock request) could wait.
	ErrLocked = errors.New("redisstore: counter locked by a running script")
	// ErrLockLost: a write made for a lock holder found the lock no
	// longer its own (its lease ran out, or the key was flushed).
	ErrLockLost = errors.New("redisstore: script lock lost")
)

// DefaultLockWait is Options.LockWait's default.
const DefaultLockWait = 10 * time.Second

// LockKey is the script lock of id's counter.
func LockKey(id string) string { return ValueKey(id) + ":lock" }

// luaLockCheck, in a write script after luaPrelude, returns a LOCKED
// error reply, having written nothing, while a holder other than LT (the
// token of the script's owned variant; false for none) holds the
// counter's lock; LOCKLOST when LT is not (or no longer) the holder.
// Without a token it costs one EXISTS. The lock key is not a declared
// key: on Redis Cluster, while the counter's slot migrates and the lock
// key is not on this node, Redis refuses the access; the check then
// counts the lock as not held (a plain write) or lost (a holder's).
const luaLockCheck = `
do
  local lk = base .. ':lock'
  if LT then
    if redis.pcall('GET', lk) ~= LT then return redis.error_reply('LOCKLOST ' .. lk .. ' is no longer held by this script') end
  elseif redis.pcall('EXISTS', lk) == 1 then
    return redis.error_reply('LOCKED ' .. lk .. ' is held by a running script')
  end
end
`

var (
	// lockScript takes KEYS[1] for the token ARGV[1] with a lease of
	// ARGV[2] ms, or renews it if the token holds it already (a retried
	// call). Reply 1 when held, 0 when another token holds it.
	lockScript = newScript(`
local v = redis.call('GET', KEYS[1])
if v and v ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
`)
	// renewLockScript extends KEYS[1]'s lease to ARGV[2] ms if ARGV[1]
	// holds it. Reply 1, or 0 when it does not.
	renewLockScript = newScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('PEXPIRE', KEYS[1], ARGV[2])
`)
	// unlockScript deletes KEYS[1] if ARGV[1] holds it.
	unlockScript = newScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('DEL', KEYS[1])
`)
)

// Locks are one holder's script locks (one Lua script's run). Lock
// takes them; Context carries them to the store's writes; Unlock
// releases them. While any is held, the lease of every one is renewed
// every third of it. Safe for concurrent use.
type Locks struct {
	s     *Store
	token string
	lease time.Duration

	mu    sync.Mutex
	held  map[string]bool // ValueKey of every counter locked
	keys  []string        // their lock keys
	timer *time.Timer     // renewal; nil before the first lock
	done  bool            // Unlock was called
}

// NewLocks returns a holder with no lock yet, whose token starts with
// prefix (a node's name, for diagnostics) and whose locks last lease
// (at least 30 ms) without renewal: a crashed holder's locks are free
// again after it. Call Unlock when done.
func (s *Store) NewLocks(prefix string, lease time.Duration) *Locks {
	s.lockUsers.Add(1)
	return &Locks{s: s, token: prefix + ":" + strconv.FormatUint(rand.Uint64(), 36) + strconv.FormatUint(rand.Uint64(), 36),
		lease: max(lease, 30*time.Millisecond), held: make(map[string]bool)}
}

type locksKey struct{}

// Context returns ctx carrying l: the store's writes made with it pass
// l's locks (and fail with ErrLockLost on a counter whose lock l held
// but no longer does).
func (l *Locks) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, locksKey{}, l)
}

func (l *Locks) holds(valueKey string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held[valueKey] && !l.done
}

// forLocks returns the script and arguments to run sc with: sc's owned
// variant and the token when ctx carries Locks holding the counter of
// keys[0], else sc and args as they are.
func (s *Store) forLocks(ctx context.Context, sc *script, keys []string, args []any) (*script, []any) {
	if sc.owned == nil || s.lockUsers.Load() == 0 || len(keys) == 0 {
		return sc, args
	}
	l, _ := ctx.Value(locksKey{}).(*Locks)
	if l == nil || l.s != s || !l.holds(keys[0]) {
		return sc, args
	}
	return sc.owned, append(args[:len(args):len(args)], l.token)
}

// Lock locks the counters ids in the order given (a caller locking
// several at once sorts them, so that two holders cannot each wait for
// the other), skipping those l holds already. A lock another holder has
// is waited for, with a short backoff, until ctx ends or wait has passed
// (then ErrLocked). The locks taken before an error stay held: Unlock
// releases them.
func (l *Locks) Lock(ctx context.Context, ids []string, wait time.Duration) error {
	var deadline time.Time
	for _, id := range ids {
		if err := checkID(id); err != nil {
			return err
		}
		if l.holds(ValueKey(id)) {
			continue
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(wait)
		}
		if err := l.take(ctx, id, deadline); err != nil {
			return err
		}
	}
	return nil
}

// take locks id, waiting until deadline.
func (l *Locks) take(ctx context.Context, id string, deadline time.Time) error {
	key, lease := LockKey(id), l.lease.Milliseconds()
	var bo lockBackoff
	for {
		var n int64
		err := l.s.do(ctx, "lock", false, func(ctx context.Context) (err error) {
			n, err = l.s.eval(ctx, lockScript, []string{key}, l.token, lease).Int64()
			return err
		})
		if err != nil {
			return err
		}
		if n == 1 {
			break
		}
		if err := bo.wait(ctx, deadline); err != nil {
			return lockedError(err, bo.waited, id)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done { // Unlock ran meanwhile: let it go again
		_ = l.s.eval(context.WithoutCancel(ctx), unlockScript, []string{key}, l.token).Err()
		return fmt.Errorf("lock %q: %w", id, ErrLockLost)
	}
	l.held[ValueKey(id)] = true
	l.keys = append(l.keys, key)
	if l.timer == nil {
		l.timer = time.AfterFunc(l.lease/3, l.renew)
	}
	return nil
}

// renew extends the lease of every lock held, then plans the next
// renewal. A lock found gone is not taken again: the holder's next write
// of that counter fails with ErrLockLost (its owned script checks).
func (l *Locks) renew() {
	l.mu.Lock()
	if l.done {
		l.mu.Unlock()
		return
	}
	keys := append([]string(nil), l.keys...)
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), l.lease/3)
	_, _ = l.s.evalEach(ctx, renewLockScript, keys, l.token, l.lease.Milliseconds())
	cancel()
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.done {
		l.timer.Reset(l.lease / 3)
	}
}

// Unlock releases every lock l holds (each only if l's token still
// holds it). l holds nothing afterwards and must not be used again.
func (l *Locks) Unlock(ctx context.Context) error {
	l.mu.Lock()
	if l.done {
		l.mu.Unlock()
		return nil
	}
	l.done = true
	if l.timer != nil {
		l.timer.Stop()
	}
	keys := l.keys
	l.mu.Unlock()
	l.s.lockUsers.Add(-1)
	if len(keys) == 0 {
		return nil
	}
	_, err := l.s.evalEach(context.WithoutCancel(ctx), unlockScript, keys, l.token)
	return err
}

// evalEach runs sc (a one-key script) for each of keys with args, in one
// pipeline (split by node on a cluster), sending the source (EVAL: no
// NOSCRIPT to handle), and returns each integer reply.
func (s *Store) evalEach(ctx context.Context, sc *script, keys []string, args ...any) ([]int64, error) {
	var out []int64
	err := s.do(ctx, "lock", false, func(ctx context.Context) error {
		p := s.rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(keys))
		for i, k := range keys {
			cmds[i] = evalCmd(ctx, "eval", sc.src, []string{k}, args)
			_ = p.Process(ctx, cmds[i])
		}
		_, _ = p.Exec(ctx) // errors are per command
		out = out[:0]
		var err error
		for _, c := range cmds {
			n, e := c.Int64()
			out = append(out, n)
			err = errors.Join(err, e)
		}
		return err
	})
	return out, err
}

// lockBackoff paces the retries of a write or lock that met another
// holder's lock: 1 ms doubling to 16 ms, with jitter.
type lockBackoff struct {
	next   time.Duration
	waited time.Duration
}

// wait sleeps before the next try; an error when ctx ends or deadline
// has passed.
func (b *lockBackoff) wait(ctx context.Context, deadline time.Time) error {
	if b.next == 0 {
		b.next = time.Millisecond
	}
	left := time.Until(deadline)
	if left <= 0 {
		return errLockWait
	}
	d := min(b.next/2+rand.N(b.next), left)
	b.next = min(2*b.next, 16*time.Millisecond)
	if err := ctxwait.Sleep(ctx, d); err != nil {
		return err
	}
	b.waited += d
	return nil
}

var errLockWait = errors.New("waited for the lock")

// lockedError is the error of a write or lock that gave up waiting for
// another holder's lock after waited (err: errLockWait, or the
// context's); id, when not "", is the counter's.
func lockedError(err error, waited time.Duration, id string) error {
	detail := "locked by a Lua script running on a counterd node sharing this store; waited " + waited.Round(time.Millisecond).String()
	if id != "" {
		detail = strconv.Quote(id) + " " + detail
	}
	if !errors.Is(err, errLockWait) {
		return fmt.Errorf("%w: %w", &ReplyError{Kind: ErrLocked, Reply: "LOCKED", Detail: detail}, err)
	}
	return &ReplyError{Kind: ErrLocked, Reply: "LOCKED", Detail: detail}
}

// doWrite is do for a counter's write script f, with wctx (ctx without
// its cancellation: see write): a LOCKED answer (another holder's script
// lock; nothing was written) is tried again after a short backoff until
// ctx's deadline or Options.LockWait, whichever comes first, then fails
// with ErrLocked.
func (s *Store) doWrite(ctx, wctx context.Context, op string, f func(ctx context.Context) error) error {
	err := s.do(wctx, op, true, f)
	if err == nil || !errors.Is(err, ErrLocked) {
		return err
	}
	deadline := time.Now().Add(s.opts.LockWait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	var bo lockBackoff
	for {
		if werr := bo.wait(ctx, deadline); werr != nil {
			return fmt.Errorf("%s: %w", op, lockedError(werr, bo.waited, ""))
		}
		if err = s.do(wctx, op, true, f); err == nil || !errors.Is(err, ErrLocked) {
			return err
		}
	}
}
