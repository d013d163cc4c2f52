package resp_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/counterd/counterd/internal/api/resp"
	"github.com/counterd/counterd/internal/auth"
	"github.com/counterd/counterd/internal/testutil/redistest"
)

// limiterScript is the classic fixed-window limiter: INCR, and EXPIRE on
// the window's first hit.
const limiterScript = `local c = redis.call('INCR', KEYS[1]) if c == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end return c`

// scriptCase is one EVAL sent to counterd and to redis-server.
type scriptCase struct {
	body string
	args []string // numkeys, keys..., args...
}

// scriptCompatCases covers Redis's conversions both ways, the redis
// library and the error texts (compared byte for byte with redis-server).
func scriptCompatCases() []scriptCase {
	c := func(body string, args ...string) scriptCase {
		if len(args) == 0 {
			args = []string{"0"}
		}
		return scriptCase{body, args}
	}
	return []scriptCase{
		// Lua -> reply
		c("return 1"), c("return 3.99"), c("return -3.7"), c("return 1e30"), c("return -1e30"), c("return 0/0"),
		c("return 'abc'"), c("return ''"), c("return true"), c("return false"), c("return nil"), c("return {}"),
		c("return {1,2,nil,4}"), c("return {1,'a',{2,3},false,true}"), c("return {1.5, 2.5}"), c("return {x=1}"),
		c("return {err='bad'}"), c("return {err='-bad x'}"), c("return {err=''}"), c("return {ok='x'}"),
		c("return {ok='x', err='y'}"), c("return {1, {err='e'}}"), c("return {1, {ok='e'}}"),
		c("return redis.error_reply('bad')"), c("return redis.error_reply('-bad')"), c("return redis.error_reply('MY bad')"),
		c("return redis.error_reply('bad thing')"), c("return redis.error_reply('')"), c("return redis.status_reply('FINE')"),
		c("return redis.status_reply('')"), c("return redis.sha1hex('')"), c("return redis.sha1hex('counterd')"),
		// reply -> Lua
		c("return redis.call('SET', KEYS[1], '5')", "1", "k"), c("return redis.call('INCR', KEYS[1])", "1", "k"),
		c("return type(redis.call('INCR', KEYS[1]))", "1", "k"),
		c("return redis.call('GET', KEYS[1])", "1", "k"), c("return type(redis.call('GET', KEYS[1]))", "1", "k"),
		c("return type(redis.call('GET', 'nokey'))"), c("return redis.call('GET', 'nokey') == false"),
		c("local t = redis.call('SET', KEYS[1], '1') return t['ok']", "1", "k"),
		c("local t = redis.call('MGET', KEYS[1], 'nokey') return {type(t[1]), type(t[2]), #t}", "1", "k"),
		c("return redis.call('MGET', KEYS[1], 'nokey', KEYS[1])", "1", "k"),
		c("redis.call('HINCRBY', KEYS[1], 'a', 3) redis.call('HINCRBY', KEYS[1], 'b', 4) return redis.call('HGETALL', KEYS[1])", "1", "h"),
		c("return redis.call('HGET', KEYS[1], 'zz')", "1", "h"), c("return redis.call('HGETALL', 'nohash')"),
		c("return redis.call('PFADD', KEYS[1], 'a', 'b', 'c')", "1", "p"), c("return redis.call('PFCOUNT', KEYS[1])", "1", "p"),
		c("return redis.call('INCRBYFLOAT', KEYS[1], '0.1')", "1", "f"),
		c("return redis.call('SET', KEYS[1], '7', 'NX')", "1", "k"), c("return redis.call('SET', KEYS[1], '7', 'XX', 'EX', '100')", "1", "k"),
		c("return redis.call('TTL', KEYS[1])", "1", "k"), c("return redis.call('PERSIST', KEYS[1])", "1", "k"),
		c("return redis.call('DEL', KEYS[1], 'nokey')", "1", "k"), c("return redis.call('EXISTS', KEYS[1])", "1", "k"),
		c("return redis.call('DECRBY', KEYS[1], ARGV[1])", "1", "d", "10"), c("return redis.call('incrby', KEYS[1], 2.0)", "1", "d"),
		c("return redis.call('ECHO', 1.5)"), c("return redis.call('ECHO', 1e20)"), c("return redis.call('ECHO', -0.1)"),
		c("return redis.call('PING')"), c("return redis.pcall('SET', 'a', '1')"),
		// KEYS and ARGV
		c("return {KEYS[1], KEYS[2], ARGV[1], ARGV[2], #KEYS, #ARGV}", "2", "a", "b", "x", "y"),
		c("return #ARGV", "0", "x", "y", "z"),
		// the limiter
		c(limiterScript, "1", "rl", "60"), c(limiterScript, "1", "rl", "60"), c("return redis.call('TTL', KEYS[1])", "1", "rl"),
		// errors raised by redis.call, caught by redis.pcall
		c("return redis.call('INCR', KEYS[1], 'x')", "1", "a"), c("return redis.call('nope')"), c("return redis.pcall('nope')"),
		c("return redis.call('incr')"), c("return redis.pcall('incr')"), c("return redis.call()"), c("return redis.call(1)"),
		c("return redis.call('incr', 'k', {})"),
		c("redis.call('HINCRBY', KEYS[1], 'a', 1) return redis.call('INCR', KEYS[1])", "1", "h2"),
		c("return redis.pcall('INCR', KEYS[1])", "1", "h2"),
		c("local t = redis.pcall('INCRBY', 'a', 'x') return t['err']"),
		c("return redis.call('SET', 'a', 'x') and redis.call('INCR', 'a')"),
		c("return redis.call('multi')"), c("return redis.call('eval', 'return 1', 0)"),
		c("return redis.call('exec')"), c("return redis.call('script', 'flush')"),
		// Lua errors
		c("error('boom')"), c("error('x y')"), c("error({err='bad'})"), c("error({err='-bad'})"), c("error({err='X y'})"),
		c("return foo.x"), c("x=1"), c("return os"), c("return io"), c("return loadstring"), c("return dofile"),
		c("\n\nerror('third line')"),
		c("local a = 1\nredis.call('nope')"),
		// math.random is Redis's rand48
		c("math.randomseed(0) return {math.random(100), math.random(100), math.random(1, 10)}"),
		c("math.randomseed(42) return {math.random(1000), math.random(1000)}"),
		c("math.randomseed(7) return tostring(math.floor(math.random() * 1000000))"),
		// EVAL's own argument errors
		{"return 1", []string{"2", "a"}}, {"return 1", []string{"-1"}}, {"return 1", []string{"x"}},
		{"return 1", []string{"1"}},
		// read-only scripts
	}
}

// rawEval sends EVAL body args... on r and returns the wire reply.
func rawDo(r *rawConn, args ...string) string {
	r.t.Helper()
	r.send(cmd(args...))
	return r.reply()
}

// TestScriptCompat runs every case on counterd and on redis-server, in
// RESP2 and RESP3, and requires the same bytes.
func TestScriptCompat(t *testing.T) {
	ts := start(t, resp.Options{AllowFlush: true})
	real := redistest.New(t)
	for _, proto := range []string{"2", "3"} {
		t.Run("resp"+proto, func(t *testing.T) {
			c, r := dialRaw(t, ts.addr), dialRaw(t, real.Addr)
			for _, x := range []*rawConn{c, r} {
				rawDo(x, "HELLO", proto)
				rawDo(x, "FLUSHALL")
				rawDo(x, "SCRIPT", "FLUSH")
			}
			for _, k := range scriptCompatCases() {
				args := append([]string{"EVAL", k.body}, k.args...)
				got, want := rawDo(c, args...), rawDo(r, args...)
				if got != want {
					t.Errorf("EVAL %q %q\n  counterd: %q\n  redis:    %q", k.body, k.args, got, want)
				}
			}
			more := [][]string{
				{"SCRIPT", "LOAD", limiterScript}, {"EVALSHA", "4d8f8a3ad7d84a5f9d13e1e4e9a1d63b4f7a0000", "0"},
				{"EVALSHA", sha1hex(limiterScript), "1", "rl2", "10"},
				{"EVALSHA", strings.ToUpper(sha1hex(limiterScript)), "1", "rl2", "10"},
				{"SCRIPT", "EXISTS", sha1hex(limiterScript), "ffff"},
				{"EVAL_RO", "return redis.call('GET', KEYS[1])", "1", "rl2"},
				{"EVAL_RO", "return redis.call('INCR', KEYS[1])", "1", "rl2"},
				{"EVALSHA_RO", sha1hex(limiterScript), "1", "rl2", "10"},
				{"SCRIPT", "FLUSH"}, {"SCRIPT", "EXISTS", sha1hex(limiterScript)},
				{"EVALSHA", sha1hex(limiterScript), "1", "rl2", "10"},
				{"SCRIPT", "FLUSH", "ASYNC"}, {"SCRIPT", "FLUSH", "SYNC"}, {"SCRIPT", "FLUSH", "NOW"},
				{"SCRIPT", "KILL"}, {"SCRIPT", "NOPE"}, {"SCRIPT"}, {"SCRIPT", "LOAD"}, {"SCRIPT", "EXISTS"},
				{"EVAL", "return 1"}, {"EVALSHA", "x"},
				{"MULTI"}, {"EVAL", limiterScript, "1", "rl3", "10"}, {"INCR", "rl3"}, {"EVAL", limiterScript, "1", "rl3", "10"}, {"EXEC"},
			}
			for _, args := range more {
				got, want := rawDo(c, args...), rawDo(r, args...)
				if got != want {
					t.Errorf("%q\n  counterd: %q\n  redis:    %q", args, got, want)
				}
			}
		})
	}
}

func sha1hex(s string) string {
	return redis.NewScript(s).Hash()
}

// TestScriptGoRedis: go-redis's Script helper (EVALSHA, then EVAL on
// NOSCRIPT) runs the limiter. TestScriptIoredis and TestScriptRedisPy
// (clientlibs_test.go) run ioredis's and redis-py's helpers.
func TestScriptGoRedis(t *testing.T) {
	ts := start(t, resp.Options{})
	ctx := context.Background()
	for _, proto := range []int{2, 3} {
		rdb := newGoRedis(t, ts.addr, proto)
		lim := redis.NewScript(limiterScript)
		key := fmt.Sprintf("rl:%d", proto)
		exists, err := lim.Exists(ctx, rdb).Result()
		mustOK(t, "SCRIPT EXISTS", err)
		if proto == 2 && exists[0] {
			t.Fatal("script cached before its first run")
		}
		for i := int64(1); i <= 5; i++ {
			n, err := lim.Run(ctx, rdb, []string{key}, 60).Int64()
			mustOK(t, "Run", err)
			mustEqual(t, "count", n, i)
		}
		ttl, err := rdb.TTL(ctx, key).Result()
		mustOK(t, "TTL", err)
		if ttl <= 0 || ttl > 60*time.Second {
			t.Fatalf("TTL = %v, want (0, 60s]", ttl)
		}
		exists, err = lim.Exists(ctx, rdb).Result()
		mustOK(t, "SCRIPT EXISTS", err)
		mustEqual(t, "cached after Run", exists[0], true)
		// RunRO: EVALSHA_RO, EVAL_RO on NOSCRIPT
		mustOK(t, "SCRIPT FLUSH", rdb.ScriptFlush(ctx).Err())
		get := redis.NewScript(`return redis.call('GET', KEYS[1])`)
		v, err := get.RunRO(ctx, rdb, []string{key}).Text()
		mustOK(t, "RunRO", err)
		mustEqual(t, "GET from script", v, "5")
		_, err = redis.NewScript(limiterScript).RunRO(ctx, rdb, []string{key}, 60).Result()
		if err == nil || !strings.HasPrefix(err.Error(), "ERR Write commands are not allowed from read-only scripts.") {
			t.Fatalf("write from EVAL_RO: %v", err)
		}
	}
}

// TestScriptLimiterConcurrent: many clients running the limiter on one key
// get every count exactly once, and the key has its TTL: no other
// client's INCR or EXPIRE interleaves with a script.
func TestScriptLimiterConcurrent(t *testing.T) {
	ts := start(t, resp.Options{})
	ctx := context.Background()
	const clients, runs = 16, 100
	rdb := redis.NewClient(&redis.Options{Addr: ts.addr, PoolSize: clients, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	lim := redis.NewScript(limiterScript)
	seen := make([]int, clients*runs+1)
	var mu sync.Mutex
	var wg sync.WaitGroup
	errc := make(chan error, clients)
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < runs; j++ {
				n, err := lim.Run(ctx, rdb, []string{"hot"}, 3600).Int64()
				if err == nil && (n < 1 || n > clients*runs) {
					err = fmt.Errorf("count %d out of range", n)
				}
				if err != nil {
					errc <- err
					return
				}
				// A plain command in between, as other clients would send.
				if err := rdb.Get(ctx, "hot").Err(); err != nil {
					errc <- err
					return
				}
				mu.Lock()
				seen[n]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	for n := 1; n <= clients*runs; n++ {
		if seen[n] != 1 {
			t.Fatalf("count %d returned %d times", n, seen[n])
		}
	}
	v, err := rdb.Get(ctx, "hot").Int()
	mustOK(t, "GET", err)
	mustEqual(t, "final count", v, clients*runs)
	ttl, err := rdb.TTL(ctx, "hot").Result()
	mustOK(t, "TTL", err)
	if ttl <= 0 {
		t.Fatalf("TTL = %v: the first run's EXPIRE was lost", ttl)
	}
}

// TestScriptGrants: a token with write on nsA only cannot reach nsB from a
// script, declared or not; the script's other commands ran as the
// caller's.
func TestScriptGrants(t *testing.T) {
	const tok = "token-of-user-a-0123456789"
	table, err := auth.Parse(strings.NewReader(fmt.Sprintf("users:\n  a:\n    tokens: [%s]\n    grants: {\"nsA:*\": write}\n", auth.Hash([]byte(tok)))))
	if err != nil {
		t.Fatal(err)
	}
	ts := start(t, resp.Options{Auth: auth.NewStore(table)})
	r := dialRaw(t, ts.addr)
	if got := rawDo(r, "EVAL", "return 1", "0"); !strings.HasPrefix(got, "-NOAUTH") {
		t.Fatalf("EVAL before AUTH: %q", got)
	}
	mustEqual(t, "AUTH", rawDo(r, "AUTH", "a", tok), "+OK\r\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"EVAL", limiterScript, "1", "nsA:rl", "60"}, ":1\r\n"},
		{[]string{"EVAL", limiterScript, "1", "nsB:rl", "60"}, "-NOPERM No permissions to access a key\r\n"},
		// undeclared key of another namespace
		{[]string{"EVAL", "return redis.call('INCR', 'nsB:x')", "0"}, "-NOPERM No permissions to access a key script: " + sha1hex("return redis.call('INCR', 'nsB:x')") + ", on @user_script:1.\r\n"},
		{[]string{"EVAL", "return redis.pcall('INCR', 'nsB:x')", "0"}, "-NOPERM No permissions to access a key\r\n"},
		{[]string{"EVAL", "return redis.call('INCR', ARGV[1])", "1", "nsA:k", "nsB:y"}, "-NOPERM No permissions to access a key script: " + sha1hex("return redis.call('INCR', ARGV[1])") + ", on @user_script:1.\r\n"},
		// deleting is admin, inside a script too
		{[]string{"EVAL", "return redis.call('DEL', KEYS[1])", "1", "nsA:rl"}, "-NOPERM this user has no permissions to run the 'del' command script: " + sha1hex("return redis.call('DEL', KEYS[1])") + ", on @user_script:1.\r\n"},
		{[]string{"SCRIPT", "FLUSH"}, "-NOPERM this user has no permissions to run the 'script' command\r\n"},
		{[]string{"EVAL", "return redis.call('GET', 'nsA:rl')", "0"}, "$1\r\n1\r\n"},
	} {
		if got := rawDo(r, tc.args...); got != tc.want {
			t.Errorf("%q\n  got  %q\n  want %q", tc.args, got, tc.want)
		}
	}
	for _, id := range []string{"nsB:rl", "nsB:x", "nsB:y"} {
		if _, err := ts.eng.Get(id); err == nil {
			if v, _ := ts.eng.Get(id); v.Exists {
				t.Errorf("%s was written", id)
			}
		}
	}
}

// TestScriptCrossSlot: in a cluster, a script's keys must have one owner,
// and so must every key it calls.
func TestScriptCrossSlot(t *testing.T) {
	owner := func(key string) (bool, string) {
		if strings.HasPrefix(key, "{b}") {
			return false, "127.0.0.1:9"
		}
		return true, ""
	}
	ts := start(t, resp.Options{KeyOwner: owner})
	r := dialRaw(t, ts.addr)
	body := "return redis.call('INCR', ARGV[1])"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"EVAL", "return 1", "2", "{a}x", "{b}y"}, "-CROSSSLOT Keys in request don't hash to the same slot\r\n"},
		{[]string{"EVAL", "return 1", "2", "{a}x", "{a}y"}, ":1\r\n"},
		{[]string{"EVAL", body, "1", "{a}x", "{a}z"}, ":1\r\n"},
		{[]string{"EVAL", body, "1", "{a}x", "{b}z"}, "-ERR Script attempted to access a non local key in a cluster node script script: " + sha1hex(body) + ", on @user_script:1.\r\n"},
	} {
		if got := rawDo(r, tc.args...); got != tc.want {
			t.Errorf("%q\n  got  %q\n  want %q", tc.args, got, tc.want)
		}
	}
}

// TestScriptBusyAndKill: past the time limit other clients get BUSY; SCRIPT
// KILL stops a script that has not written and refuses one that has.
func TestScriptBusyAndKill(t *testing.T) {
	ts := start(t, resp.Options{LuaTimeLimit: 20 * time.Millisecond})
	a, b := dialRaw(t, ts.addr), dialRaw(t, ts.addr)
	mustEqual(t, "SCRIPT KILL idle", rawDo(b, "SCRIPT", "KILL"), "-NOTBUSY No scripts in execution right now.\r\n")

	loop := "local i = 0 while true do i = i + 1 end"
	a.send(cmd("EVAL", loop, "0"))
	waitBusy(t, b)
	mustEqual(t, "SCRIPT KILL", rawDo(b, "SCRIPT", "KILL"), "+OK\r\n")
	mustEqual(t, "killed script's reply", a.reply(), "-ERR Script killed by user with SCRIPT KILL... script: "+sha1hex(loop)+", on @user_script:1.\r\n")
	mustEqual(t, "after kill", rawDo(b, "INCR", "k"), ":1\r\n")

	// A script that wrote cannot be killed; it runs to its end.
	wloop := "redis.call('INCR', 'k') local i = 0 while i < 3000000 do i = i + 1 end return i"
	a.send(cmd("EVAL", wloop, "0"))
	waitBusy(t, b)
	mustEqual(t, "SCRIPT KILL of a writer", rawDo(b, "SCRIPT", "KILL"), "-UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.\r\n")
	a.c.SetReadDeadline(time.Now().Add(time.Minute))
	got, err := readReply(a.rd)
	mustOK(t, "writer's reply", err)
	mustEqual(t, "writer's reply", got, ":3000000\r\n")
	mustEqual(t, "after the writer", rawDo(b, "GET", "k"), "$1\r\n2\r\n")
}

// waitBusy sends GET until the server answers BUSY.
func waitBusy(t *testing.T, b *rawConn) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		b.send(cmd("GET", "k"))
		b.c.SetReadDeadline(time.Now().Add(30 * time.Second))
		got, err := readReply(b.rd)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(got, "-BUSY Redis is busy running a script.") {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("never BUSY")
}

// BenchmarkLimiter compares the limiter as a script (EVALSHA) with the
// same two commands pipelined (INCR, EXPIRE NX), one key per client.
func BenchmarkLimiter(b *testing.B) {
	ts := start(b, resp.Options{})
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: ts.addr, MaxRetries: -1})
	b.Cleanup(func() { rdb.Close() })
	lim := redis.NewScript(limiterScript)
	if err := lim.Load(ctx, rdb).Err(); err != nil {
		b.Fatal(err)
	}
	b.Run("evalsha", func(b *testing.B) {
		keys := []string{"bench:evalsha"}
		for i := 0; i < b.N; i++ {
			if err := lim.EvalSha(ctx, rdb, keys, 3600).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("incr+expire-pipelined", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			p := rdb.Pipeline()
			p.Incr(ctx, "bench:pipe")
			p.ExpireNX(ctx, "bench:pipe", time.Hour)
			if _, err := p.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("incr", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if err := rdb.Incr(ctx, "bench:incr").Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
