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
	sc := newScript("local LT = false\n" + body)
	sc.body = body
	sc.owned = newScript(`local LT = ARGV[#ARGV]
local LA = {}
for i = 1, #ARGV - 1 do LA[i] = ARGV[i] end
local ARGV = LA
` + body)
	return sc
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
