package redisstore

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"
)

// script is a Lua script run with EVALSHA, and with EVAL after NOSCRIPT
// (a SCRIPT FLUSH, a restart, a failed-over or new cluster node).
type script struct {
	*redis.Script
	src string
	// A counter's write script (writeScript) has body, its text without
	// the lock token's header (what the scripts wrapping it embed), and
	// owned, the variant run for a holder of the counter's script lock
	// (locks.go).
	body  string
	owned *script
}

func newScript(src string) *script { return &script{Script: redis.NewScript(src), src: src} }

// writeScript returns a counter's write script: body starts with
// luaPrelude and luaLockCheck. The script itself runs with no lock token
// (LT false: it writes nothing while another holder locks the counter);
// its owned variant takes the token as its last ARGV, hidden from body,
// and writes only while that token holds the lock.
func writeScript(body string) *script {
	sc := newScript("local LT = false\n" + withLife(body))
	sc.body = body
	sc.owned = newScript(`local LT = ARGV[#ARGV]
local LA = {}
for i = 1, #ARGV - 1 do LA[i] = ARGV[i] end
local ARGV = LA
` + withLife(body))
	return sc
}

// withLife runs a write script's body and, when it wrote (a reply
// starting 'OK' or 'OKJ'), appends the counter's life to that head
// ('OK:<life>', read back by Store.write): the meta field life, or, for
// a counter the write created (or a meta from before lives), the life
// after its tombstone's (1 without one), which it records, dropping the
// tombstone. A MISS over a tombstone is {'MISS', 'DEAD'}: the counter
// is not read through (docs/redis-tier.md, "Deletes and lives"). The
// body may call lifeof() once it wrote (the journal's scripts name the
// life in their entries): the same life, read once.
func withLife(body string) string {
	return `local LF, LN, LD
local function lifeof()
  if not LF then
    LF = redis.call('HGET', KEYS[2], 'life')
    if not LF then
      LN = true
      LD = redis.call('GET', KEYS[1] .. ':dead')
      LF = '1'
      if LD then LF = string.format('%.0f', tonumber(LD) + 1) end
    end
  end
  return LF
end
local function W()
` + body + `
end
local r = W()
if type(r) == 'table' and (r[1] == 'OK' or r[1] == 'OKJ') then
  local l = lifeof()
  if LN and redis.call('EXISTS', KEYS[2]) == 1 then
    redis.call('HSET', KEYS[2], 'life', l)
    if LD then redis.call('DEL', KEYS[1] .. ':dead') end
  end
  r[1] = r[1] .. ':' .. l
elseif type(r) == 'table' and r[1] == 'MISS' and redis.call('EXISTS', KEYS[1] .. ':dead') == 1 then
  r[2] = 'DEAD'
end
return r
`
}

// onceCmd is a command go-redis must not send again after a network
// error: a script that may have run must not run twice. The cluster client
// still follows MOVED and ASK, which say the command did not run; Store.do
// decides about the rest.
type onceCmd struct{ *redis.Cmd }

// NoRetry tells go-redis (single and cluster clients, pipelines) not to
// resend the command.
func (onceCmd) NoRetry() bool { return true }

func evalCmd(ctx context.Context, name, shaOrSrc string, keys []string, args []any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, shaOrSrc, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	return redis.NewCmd(ctx, append(a, args...)...)
}

// eval runs sc once: EVALSHA, then EVAL if the server does not have the
// script (NOSCRIPT means the first call did not run).
func (s *Store) eval(ctx context.Context, sc *script, keys []string, args ...any) *redis.Cmd {
	sc, args = s.forLocks(ctx, sc, keys, args)
	cmd := evalCmd(ctx, "evalsha", sc.Hash(), keys, args)
	_ = s.rdb.Process(ctx, onceCmd{cmd})
	if isNoScript(cmd.Err()) {
		cmd = evalCmd(ctx, "eval", sc.src, keys, args)
		_ = s.rdb.Process(ctx, onceCmd{cmd})
	}
	return cmd
}

func isNoScript(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") }
