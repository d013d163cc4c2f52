package resp

import (
	"crypto/sha1"
	"encoding/hex"
	"math"
	"strconv"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// The Lua side of scripting: the VM's sandbox, the redis library and the
// conversions between Redis replies and Lua values, as Redis 7 does them
// (https://redis.io/docs/interact/programmability/lua-api/).

const luaChunkName = "user_script"

func init() {
	// Lua 5.0's implicit "arg" table in vararg functions costs a map per
	// call of every script's main chunk (a third of a short script's
	// run); Lua 5.1 code uses "..." instead. counterd is gopher-lua's
	// only user in the process.
	lua.CompatVarArg = false
}

// newLuaState returns a VM with Lua 5.1's base, table, string and math
// libraries only (no io, os, package, debug or coroutine: nothing that
// reaches the host, the clock or files), the redis library and protected
// globals, like Redis's.
func newLuaState(sc *scripting) *lua.LState {
	L := lua.NewState(lua.Options{SkipOpenLibs: true, IncludeGoStackTrace: false})
	for _, lib := range []struct {
		name string
		fn   lua.LGFunction
	}{
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
		{lua.StringLibName, lua.OpenString},
		{lua.MathLibName, lua.OpenMath},
	} {
		L.Push(L.NewFunction(lib.fn))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	g := L.G.Global
	// Loading code, files and modules is not allowed, as in Redis.
	for _, name := range []string{"dofile", "loadfile", "loadstring", "load", "module", "require", "print", "_printregs", "newproxy", "getfenv", "setfenv"} {
		g.RawSetString(name, lua.LNil)
	}
	// math.random and math.randomseed use Redis's rand48, so a script
	// draws the same numbers as on Redis.
	if m, ok := g.RawGetString("math").(*lua.LTable); ok {
		m.RawSetString("random", L.NewFunction(sc.mathRandom))
		m.RawSetString("randomseed", L.NewFunction(sc.mathRandomseed))
	}
	r := L.NewTable()
	r.RawSetString("call", L.NewFunction(func(L *lua.LState) int { return sc.call(L, true) }))
	r.RawSetString("pcall", L.NewFunction(func(L *lua.LState) int { return sc.call(L, false) }))
	r.RawSetString("error_reply", L.NewFunction(luaErrorReply))
	r.RawSetString("status_reply", L.NewFunction(luaStatusReply))
	r.RawSetString("sha1hex", L.NewFunction(func(L *lua.LState) int {
		if L.GetTop() != 1 {
			L.RaiseError("wrong number of arguments")
		}
		L.Push(lua.LString(sha1hex(L.ToString(1))))
		return 1
	}))
	r.RawSetString("log", L.NewFunction(func(L *lua.LState) int {
		if L.GetTop() < 2 {
			L.RaiseError("redis.log() requires two arguments or more.")
		}
		return 0
	}))
	r.RawSetString("setresp", L.NewFunction(func(L *lua.LState) int {
		if v := L.CheckInt(1); v != 2 {
			L.RaiseError("RESP version must be 2 (counterd scripts speak RESP2 to their commands)")
		}
		return 0
	}))
	r.RawSetString("set_repl", L.NewFunction(func(L *lua.LState) int { return 0 }))
	r.RawSetString("replicate_commands", L.NewFunction(func(L *lua.LState) int { L.Push(lua.LTrue); return 1 }))
	for name, v := range map[string]int{"LOG_DEBUG": 0, "LOG_VERBOSE": 1, "LOG_NOTICE": 2, "LOG_WARNING": 3,
		"REPL_NONE": 0, "REPL_AOF": 1, "REPL_SLAVE": 2, "REPL_REPLICA": 2, "REPL_ALL": 3} {
		r.RawSetString(name, lua.LNumber(v))
	}
	r.RawSetString("REDIS_VERSION", lua.LString(RedisVersion))
	r.RawSetString("REDIS_VERSION_NUM", lua.LNumber(redisVersionNum))
	g.RawSetString("redis", r)

	// Protected globals: reading an undefined one or creating one is an
	// error, as in Redis 7.
	mt := L.NewTable()
	mt.RawSetString("__index", L.NewFunction(func(L *lua.LState) int {
		if L.ToString(2) == "loadstring" { // removed, but reads as nil on Redis
			L.Push(lua.LNil)
			return 1
		}
		L.RaiseError("Script attempted to access nonexistent global variable '%s'", L.ToString(2))
		return 0
	}))
	mt.RawSetString("__newindex", L.NewFunction(func(L *lua.LState) int {
		L.RaiseError("Attempt to modify a readonly table")
		return 0
	}))
	L.SetMetatable(g, mt)
	return L
}

// redisVersionNum is RedisVersion as redis.REDIS_VERSION_NUM
// (0x00MMmmpp).
const redisVersionNum = 0x07000f

func sha1hex(s string) string {
	h := sha1.Sum([]byte(s))
	return hex.EncodeToString(h[:])
}

// luaErrorReply is redis.error_reply: {err=msg}, the message given an
// "ERR " code when it has none (a single word), as Redis 7 does.
func luaErrorReply(L *lua.LState) int {
	if L.GetTop() != 1 || L.Get(1).Type() != lua.LTString {
		L.RaiseError("wrong number or type of arguments")
	}
	msg := strings.TrimPrefix(L.ToString(1), "-")
	if !strings.Contains(msg, " ") {
		msg = "ERR " + msg
	}
	t := L.NewTable()
	t.RawSetString("err", lua.LString(msg))
	L.Push(t)
	return 1
}

// luaStatusReply is redis.status_reply: {ok=msg}.
func luaStatusReply(L *lua.LState) int {
	if L.GetTop() != 1 || L.Get(1).Type() != lua.LTString {
		L.RaiseError("wrong number or type of arguments")
	}
	t := L.NewTable()
	t.RawSetString("ok", L.Get(1))
	L.Push(t)
	return 1
}

// luaArg converts a redis.call argument: strings as they are, numbers as
// Redis formats them ("%.17g"); anything else is refused.
func luaArg(v lua.LValue) ([]byte, bool) {
	switch v := v.(type) {
	case lua.LString:
		return []byte(string(v)), true
	case lua.LNumber:
		f := float64(v)
		if f == math.Trunc(f) && math.Abs(f) < 1e17 {
			return strconv.AppendInt(nil, int64(f), 10), true
		}
		return strconv.AppendFloat(nil, f, 'g', 17, 64), true
	}
	return nil, false
}

// ---- Redis reply (RESP2 bytes) → Lua value ----

// respToLua converts one RESP2 reply at b[0:] to its Lua value, as Redis
// converts a command's reply for redis.call: integer → number, bulk →
// string, null bulk or null array → false, array → table, status →
// {ok=...}, error → {err=...} (isErr set). It returns the bytes consumed.
func respToLua(L *lua.LState, b []byte) (v lua.LValue, n int, isErr bool) {
	if len(b) < 3 {
		return lua.LFalse, len(b), false
	}
	end := 1
	for end < len(b) && b[end] != '\r' {
		end++
	}
	line := b[1:end]
	next := end + 2
	switch b[0] {
	case '+':
		t := L.NewTable()
		t.RawSetString("ok", lua.LString(string(line)))
		return t, next, false
	case '-':
		t := L.NewTable()
		t.RawSetString("err", lua.LString(string(line)))
		return t, next, true
	case ':':
		i, _ := strconv.ParseInt(string(line), 10, 64)
		return lua.LNumber(i), next, false
	case '$':
		l, _ := strconv.Atoi(string(line))
		if l < 0 {
			return lua.LFalse, next, false
		}
		return lua.LString(string(b[next : next+l])), next + l + 2, false
	case '*':
		l, _ := strconv.Atoi(string(line))
		if l < 0 {
			return lua.LFalse, next, false
		}
		t := L.CreateTable(l, 0)
		for i := 0; i < l; i++ {
			e, m, _ := respToLua(L, b[next:])
			next += m
			t.RawSetInt(i+1, e)
		}
		return t, next, false
	}
	return lua.LFalse, len(b), false
}

// ---- Lua value → reply ----

// writeLuaReply writes v as the script's reply, as Redis converts it:
// number → integer (truncated), string → bulk, true → 1, false and nil →
// null, {err=...} → error, {ok=...} → status, other tables → array of
// the elements 1, 2, ... up to the first nil.
func writeLuaReply(c *client, v lua.LValue, depth int) {
	switch v := v.(type) {
	case lua.LNumber:
		c.writeInt(luaToInt(float64(v)))
	case lua.LString:
		c.writeBulkString(string(v))
	case lua.LBool:
		if v {
			c.writeInt(1)
		} else {
			c.writeNull()
		}
	case *lua.LTable:
		if e, ok := v.RawGetString("err").(lua.LString); ok {
			c.out = append(c.out, '-')
			c.out = appendLine(c.out, string(e))
			return
		}
		if s, ok := v.RawGetString("ok").(lua.LString); ok {
			c.writeStatus(string(s))
			return
		}
		if depth > maxLuaReplyDepth {
			c.writeError("ERR reached lua stack limit")
			return
		}
		n := 0
		for v.RawGetInt(n+1) != lua.LNil {
			n++
		}
		c.writeArray(n)
		for i := 1; i <= n; i++ {
			writeLuaReply(c, v.RawGetInt(i), depth+1)
		}
	default:
		c.writeNull()
	}
}

const maxLuaReplyDepth = 1000

// luaToInt truncates like C's (long long) cast of a Lua number, which is
// what Redis does (out-of-range values give INT64_MIN on amd64, as Go's
// conversion does there).
func luaToInt(f float64) int64 {
	if math.IsNaN(f) || f >= 9.223372036854775807e18 || f < -9.223372036854775808e18 {
		return math.MinInt64
	}
	return int64(f)
}

// ---- math.random: Redis's rand48 ----

// rand48 is Redis's redisLrand48 (src/rand.c): the 48-bit linear
// congruential generator of drand48, seeded by redisSrand48.
type rand48 struct{ x uint64 }

func (r *rand48) seed(s int32) { r.x = uint64(uint32(s))<<16 | 0x330E }

func (r *rand48) next() int32 {
	r.x = (0x5DEECE66D*r.x + 0xB) & (1<<48 - 1)
	return int32(r.x >> 17)
}

const rand48Max = math.MaxInt32

func (sc *scripting) mathRandom(L *lua.LState) int {
	r := float64(sc.rand.next()%rand48Max) / float64(rand48Max)
	switch L.GetTop() {
	case 0:
		L.Push(lua.LNumber(r))
	case 1:
		u := L.CheckInt64(1)
		if u < 1 {
			L.ArgError(1, "interval is empty")
		}
		L.Push(lua.LNumber(math.Floor(r*float64(u)) + 1))
	case 2:
		l, u := L.CheckInt64(1), L.CheckInt64(2)
		if l > u {
			L.ArgError(2, "interval is empty")
		}
		L.Push(lua.LNumber(math.Floor(r*float64(u-l+1)) + float64(l)))
	default:
		L.RaiseError("wrong number of arguments")
	}
	return 1
}

func (sc *scripting) mathRandomseed(L *lua.LState) int {
	sc.rand.seed(int32(L.CheckInt64(1)))
	return 0
}
