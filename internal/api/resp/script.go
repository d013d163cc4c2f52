package resp

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"

	"github.com/counterd/counterd/internal/auth"
	"github.com/counterd/counterd/internal/contract"
)

// Lua scripting: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT.
//
// Atomicity. A script runs under the exclusive side of the server's
// script gate, a read-write lock whose shared side every data command of
// the Redis-protocol front end (flagWrite or flagReadonly, and EXEC) holds
// while it runs. So no other RESP client's command runs on this node
// while a script does, as on Redis, where a script blocks the server.
// MULTI/EXEC's own mechanism (one engine batch) cannot serve scripts,
// since a script's writes depend on the replies of its earlier commands
// (the limiter's EXPIRE runs only when INCR answered 1), and the Backend
// has no lock a front end could hold across several calls. The HTTP API's
// writes take the gate's shared side too (GateWrites, scriptgate.go);
// the event pipeline's writes, peer regions' merges, and in a cluster or
// in tiered mode the commands served by other nodes, are not held back
// by it (docs/resp.md, "Scripting", says exactly what that leaves). In
// tiered mode a script also locks the keys it touches in the shared
// Redis (Options.KeyLocker: see run and call), which holds back every
// other writer of those keys, on every node.
//
// A script's commands go through the same command table as the client's,
// on a scratch connection speaking RESP2, so their replies are the ones a
// client gets; the RESP2 bytes are then converted to Lua values.

const (
	errBusyScript   = "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."
	errNoScript     = "NOSCRIPT No matching script. Please use EVAL."
	errNotBusy      = "NOTBUSY No scripts in execution right now."
	errUnkillable   = "UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command."
	errCrossSlot    = "CROSSSLOT Keys in request don't hash to the same slot"
	errScriptKilled = "ERR Script killed by user with SCRIPT KILL..."
)

// DefaultLuaTimeLimit is Redis's lua-time-limit: after it, a running
// script makes other clients' commands fail with BUSY and can be stopped
// with SCRIPT KILL if it has not written.
const DefaultLuaTimeLimit = 5 * time.Second

// maxScripts bounds the script cache (Redis's is unbounded): beyond it,
// EVAL runs scripts without caching them and SCRIPT LOAD is refused
// until SCRIPT FLUSH.
const maxScripts = 10000

// Gate modes of a command (command.gate).
const (
	gateNone      uint8 = iota // runs without the gate (PING, CLIENT, SCRIPT, EVAL: it takes the exclusive side itself)
	gateShared                 // a data command: the gate's shared side
	gateExec                   // EXEC: shared, or exclusive when it runs scripts
	gateExclusive              // a read then a write no engine op makes atomic (GETDEL, MSETNX, RENAME, RENAMENX, COPY)
)

// scripting is a server's script cache, Lua VM and gate.
type scripting struct {
	s    *Server
	gate sync.RWMutex
	// order admits one exclusive holder of the gate at a time (a script
	// or an exclusive EXEC), so that lock can wait for the gate with a
	// blocking Lock: readers only are left to wait for, and writes
	// arriving meanwhile wait, so a stream of them cannot starve scripts.
	order sync.Mutex
	// done is closed when the gate's current exclusive holder releases it
	// (set under order, before the gate is taken): GateWrites's writes
	// wait on it instead of polling.
	done  atomic.Pointer[chan struct{}]
	limit time.Duration
	// holder is the connection whose EXEC holds the gate exclusively (a
	// script inside it must not take it again).
	holder atomic.Pointer[client]

	mu    sync.Mutex
	cache map[string]*lua.FunctionProto // by SHA1 (lower-case hex)

	// The running script: the fields below are used under the gate's
	// exclusive side, except start, wrote, killed and cancel (SCRIPT KILL
	// and other connections read them).
	L       *lua.LState
	rand    rand48
	caller  *client
	scratch *client // runs the script's commands
	ro      bool
	sha     string
	owner   string // cluster: the owner of the declared keys ("" this node)
	line    int    // the line of the last redis.call that raised
	// locker locks a script's keys against the writers of other nodes
	// (the tiered mode; nil otherwise); locks are the running script's.
	locker contract.KeyLocker
	locks  contract.KeyLocks

	start  atomic.Int64 // nanotime when the running script started; 0: none
	killMu sync.Mutex   // orders SCRIPT KILL against the script's first write
	wrote  bool         // under killMu
	killed bool         // under killMu
	cancel context.CancelFunc
}

func newScripting(s *Server, limit time.Duration) *scripting {
	if limit <= 0 {
		limit = DefaultLuaTimeLimit
	}
	sc := &scripting{s: s, limit: limit, cache: make(map[string]*lua.FunctionProto)}
	sc.rand.seed(0)
	sc.L = newLuaState(sc)
	sc.scratch = &client{s: s, proto: 2, first: false, fd0: -1}
	sc.scratch.respVer.Store(2)
	return sc
}

// scriptCommands returns the scripting commands' table entries.
func scriptCommands() []*command {
	evalArgs := []argDoc{aStr("script"), aInt("numkeys"), aOpt(aMany(aKey("key"))), aOpt(aMany(aStr("arg")))}
	shaArgs := []argDoc{aStr("sha1"), aInt("numkeys"), aOpt(aMany(aKey("key"))), aOpt(aMany(aStr("arg")))}
	return []*command{
		{name: "eval", arity: -3, flags: flagNoScript,
			doc: &cmdDoc{"scripting", "Executes a server-side Lua script.", "2.6.0", "Depends on the script that is executed.", evalArgs},
			fn:  cmdEval(false, false)},
		{name: "evalsha", arity: -3, flags: flagNoScript,
			doc: &cmdDoc{"scripting", "Executes a server-side Lua script by SHA1 digest.", "2.6.0", "Depends on the script that is executed.", shaArgs},
			fn:  cmdEval(false, true)},
		{name: "eval_ro", arity: -3, flags: flagNoScript | flagReadonly,
			doc: &cmdDoc{"scripting", "Executes a read-only server-side Lua script.", "7.0.0", "Depends on the script that is executed.", evalArgs},
			fn:  cmdEval(true, false)},
		{name: "evalsha_ro", arity: -3, flags: flagNoScript | flagReadonly,
			doc: &cmdDoc{"scripting", "Executes a read-only server-side Lua script by SHA1 digest.", "7.0.0", "Depends on the script that is executed.", shaArgs},
			fn:  cmdEval(true, true)},
		{name: "script", arity: -2, flags: flagNoScript,
			doc: &cmdDoc{"scripting", "A container for Lua scripts management commands: LOAD, EXISTS, FLUSH, KILL.", "2.6.0", "Depends on subcommand.", []argDoc{aStr("subcommand"), aOpt(aMany(aStr("arg")))}},
			fn:  cmdScript},
	}
}

// isScriptCmd: the commands that run a script.
func isScriptCmd(name string) bool {
	switch name {
	case "eval", "evalsha", "eval_ro", "evalsha_ro":
		return true
	}
	return false
}

// scriptRefused: commands a script may not call (besides flagNoScript
// ones), as Redis refuses them: transactions, scripts, the connection's
// own state.
func scriptRefused(cmd *command) bool {
	if cmd.flags&flagNoScript != 0 {
		return true
	}
	switch cmd.name {
	case "multi", "exec", "discard", "watch", "unwatch", "hello", "quit", "reset", EventsCommandName:
		return true
	}
	return false
}

// setGates gives every command its gate mode.
func setGates(cmds map[string]*command) {
	for _, cmd := range cmds {
		switch {
		case cmd.name == "exec":
			cmd.gate = gateExec
		case isScriptCmd(cmd.name):
			cmd.gate = gateNone
		case cmd.name == "getdel" || cmd.name == "msetnx" || cmd.name == "rename" || cmd.name == "renamenx" || cmd.name == "copy":
			cmd.gate = gateExclusive
		case cmd.flags&(flagWrite|flagReadonly) != 0:
			cmd.gate = gateShared
		}
	}
}

// enter takes the gate for cmd (its mode is not gateNone); false means c
// was answered BUSY. leave releases what enter took.
func (sc *scripting) enter(c *client, cmd *command) (exclusive, ok bool) {
	if cmd.gate == gateExclusive || cmd.gate == gateExec && queueNeedsExclusive(c.queue) && c.multi {
		if !sc.lock(c) {
			return false, false
		}
		sc.holder.Store(c)
		return true, true
	}
	if sc.gate.TryRLock() {
		return false, true
	}
	for {
		if sc.busy() {
			c.writeError(errBusyScript)
			return false, false
		}
		time.Sleep(50 * time.Microsecond)
		if sc.gate.TryRLock() {
			return false, true
		}
	}
}

func (sc *scripting) leave(exclusive bool) {
	if exclusive {
		sc.holder.Store(nil)
		sc.unlock()
		return
	}
	sc.gate.RUnlock()
}

// queueNeedsExclusive: an EXEC whose transaction runs a script or a
// command of the gate's exclusive side (GETDEL, MSETNX, RENAME, COPY)
// takes the gate exclusively.
func queueNeedsExclusive(q []queued) bool {
	for _, e := range q {
		if isScriptCmd(e.cmd.name) || e.cmd.gate == gateExclusive {
			return true
		}
	}
	return false
}

// busy reports whether a script has run for longer than the time limit.
func (sc *scripting) busy() bool {
	st := sc.start.Load()
	return st != 0 && time.Duration(nanotime()-st) > sc.limit
}

// lock takes the gate exclusively for a script; false means c was
// answered BUSY (another script is past the time limit). unlock releases
// it.
func (sc *scripting) lock(c *client) bool {
	for !sc.order.TryLock() {
		if sc.busy() {
			c.writeError(errBusyScript)
			return false
		}
		time.Sleep(50 * time.Microsecond)
	}
	done := make(chan struct{})
	sc.done.Store(&done)
	// Only readers (data commands, gated writes: none waits for a script)
	// can hold the gate now; Lock waits for them and holds new ones back.
	sc.gate.Lock()
	return true
}

func (sc *scripting) unlock() {
	sc.gate.Unlock()
	close(*sc.done.Load())
	sc.order.Unlock()
}

// compile parses and compiles a script body.
func compileScript(body string) (*lua.FunctionProto, error) {
	chunk, err := parse.Parse(strings.NewReader(body), luaChunkName)
	if err != nil {
		return nil, err
	}
	return lua.Compile(chunk, luaChunkName)
}

// load returns body's SHA1 and compiled function, caching it if there is
// room (cached false: the cache is full).
func (sc *scripting) load(body string) (sha string, proto *lua.FunctionProto, cached bool, err error) {
	sha = sha1hex(body)
	sc.mu.Lock()
	proto = sc.cache[sha]
	sc.mu.Unlock()
	if proto != nil {
		return sha, proto, true, nil
	}
	if proto, err = compileScript(body); err != nil {
		return sha, nil, false, err
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if len(sc.cache) < maxScripts {
		sc.cache[sha] = proto
		cached = true
	}
	return sha, proto, cached, nil
}

func (sc *scripting) lookup(sha string) *lua.FunctionProto {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.cache[strings.ToLower(sha)]
}

func cmdEval(ro, bySHA bool) func(s *Server, c *client, args [][]byte) {
	return func(s *Server, c *client, args [][]byte) {
		sc := s.lua
		nk, ok := parseInt(args[2])
		switch {
		case !ok:
			c.writeError(errNotInteger)
			return
		case nk < 0:
			c.writeError("ERR Number of keys can't be negative")
			return
		case nk > int64(len(args)-3):
			c.writeError("ERR Number of keys can't be greater than number of args")
			return
		}
		var proto *lua.FunctionProto
		var sha string
		if bySHA {
			sha = strings.ToLower(string(args[1]))
			if proto = sc.lookup(sha); proto == nil {
				c.writeError(errNoScript)
				return
			}
		} else {
			var err error
			if sha, proto, _, err = sc.load(string(args[1])); err != nil {
				c.writeError("ERR Error compiling script (new function): " + err.Error())
				return
			}
		}
		keys, argv := args[3:3+nk], args[3+nk:]
		if s.opts.Auth != nil {
			// Every declared key must be readable; each command the script
			// calls is then checked like a client's (its permission on
			// every key it names, declared or not).
			p := c.principal(s.opts.Auth)
			if p == nil {
				c.writeError(errNoAuth)
				return
			}
			for _, k := range keys {
				if !p.Can(auth.Read, str(k)) {
					s.opts.Auth.Failed("resp", auth.ReasonForbidden)
					c.writeError(errNoPermKey)
					return
				}
			}
		}
		owner := ""
		if s.opts.KeyOwner != nil && len(keys) > 0 {
			owner = ownerOf(s.opts.KeyOwner, str(keys[0]))
			for _, k := range keys[1:] {
				if ownerOf(s.opts.KeyOwner, str(k)) != owner {
					c.writeError(errCrossSlot)
					return
				}
			}
		}
		if sc.holder.Load() != c {
			if !sc.lock(c) {
				return
			}
			defer sc.unlock()
		}
		sc.run(c, proto, sha, keys, argv, ro, owner)
		sc.scratch.flushHits() // the script's key reads count in INFO
	}
}

// ownerOf names key's owner: "" for this node, else its address.
func ownerOf(f func(string) (bool, string), key string) string {
	self, addr := f(key)
	if self {
		return ""
	}
	return addr
}

// run executes a compiled script for c and writes its reply. The caller
// holds the gate exclusively. With a KeyLocker (tiered mode) the
// declared keys are locked, in sorted order, before the script starts
// (holdKeys), and every other key when a command of the script first
// names it (call); all are released when it ends (or, in an EXEC, when
// the EXEC does).
func (sc *scripting) run(c *client, proto *lua.FunctionProto, sha string, keys, argv [][]byte, ro bool, owner string) {
	L := sc.L
	// The VM's context is the server's (a plain cancel context: deriving
	// from the connection's, which carries an admission ticket, would
	// cost a goroutine per script); the script's commands use the
	// connection's.
	ctx, cancel := context.WithCancel(sc.s.ctx)
	sc.caller, sc.ro, sc.sha, sc.owner, sc.line = c, ro, sha, owner, 0
	x := sc.scratch
	x.ctx, x.auth, x.key, x.id, x.addr = c.ctx, c.auth, c.key, c.id, c.addr
	sc.killMu.Lock()
	sc.wrote, sc.killed, sc.cancel = false, false, cancel
	sc.killMu.Unlock()

	g := L.G.Global
	g.RawSetString("KEYS", luaStrings(L, keys))
	g.RawSetString("ARGV", luaStrings(L, argv))
	L.SetContext(ctx)
	sc.start.Store(nanotime())
	defer func() {
		sc.start.Store(0)
		sc.killMu.Lock()
		sc.cancel = nil
		sc.killMu.Unlock()
		cancel()
		sc.caller = nil
		x.ctx, x.auth = nil, authState{}
		x.out = x.out[:0]
		if r := recover(); r != nil {
			// The VM may be left in any state: start afresh.
			sc.L = newLuaState(sc)
			panic(r)
		}
		L.RemoveContext()
		L.SetTop(0)
	}()
	if sc.locker != nil {
		// c's locks: its own, or those of the EXEC this script runs in.
		release, err := sc.holdKeys(c, ctx, keys)
		sc.locks, x.ctx = c.locks, c.ctx
		defer func() {
			sc.locks = nil
			release()
		}()
		if err != nil {
			c.writeError(engineError(err))
			return
		}
	}
	L.Push(L.NewFunctionFromProto(proto))
	if err := L.PCall(0, 1, nil); err != nil {
		c.writeError(sc.errorText(err))
		return
	}
	writeLuaReply(c, L.Get(-1), 0)
}

func luaStrings(L *lua.LState, bs [][]byte) *lua.LTable {
	t := L.CreateTable(len(bs), 0)
	for i, b := range bs {
		t.RawSetInt(i+1, lua.LString(string(b)))
	}
	return t
}

// errorText words a failed script's error as Redis 7 does: the error,
// then " script: <sha>, on @user_script:<line>.".
func (sc *scripting) errorText(err error) string {
	sc.killMu.Lock()
	killed := sc.killed
	sc.killMu.Unlock()
	msg, line := "", sc.line
	ae, ok := err.(*lua.ApiError)
	switch {
	case killed:
		msg = errScriptKilled
		if ok {
			line = firstLine(ae.Object.String(), firstLine(ae.StackTrace, line))
		}
	case !ok:
		msg = "ERR Error running script: " + err.Error()
	default:
		switch o := ae.Object.(type) {
		case *lua.LTable:
			if e, isStr := o.RawGetString("err").(lua.LString); isStr {
				msg = string(e)
			} else {
				msg = "ERR Error running script: unknown error"
			}
			if line == 0 {
				line = firstLine(ae.StackTrace, 0)
			}
		default:
			s := ae.Object.String()
			line = firstLine(s, firstLine(ae.StackTrace, line))
			msg = "ERR " + s
		}
	}
	if line == 0 {
		line = 1
	}
	return msg + " script: " + sc.sha + ", on @user_script:" + strconv.Itoa(line) + "."
}

// firstLine finds "user_script:<n>" in s and returns n, or def.
func firstLine(s string, def int) int {
	i := strings.Index(s, luaChunkName+":")
	if i < 0 {
		return def
	}
	s = s[i+len(luaChunkName)+1:]
	j := 0
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	if n, err := strconv.Atoi(s[:j]); err == nil {
		return n
	}
	return def
}

// call is redis.call (raise true) and redis.pcall.
func (sc *scripting) call(L *lua.LState, raise bool) int {
	fail := func(msg string) int {
		t := L.NewTable()
		t.RawSetString("err", lua.LString(msg))
		if raise {
			sc.line = firstLine(L.Where(1), 0)
			L.Error(t, 0)
			return 0
		}
		L.Push(t)
		return 1
	}
	n := L.GetTop()
	if n == 0 {
		return fail("ERR Please specify at least one argument for this redis lib call")
	}
	args := make([][]byte, n)
	for i := range args {
		b, ok := luaArg(L.Get(i + 1))
		if !ok {
			return fail("ERR Lua redis lib command arguments must be strings or integers")
		}
		args[i] = b
	}
	s := sc.s
	cmd := s.cmds[strings.ToLower(string(args[0]))]
	if cmd == nil {
		return fail("ERR Unknown Redis command called from script")
	}
	if cmd.arity > 0 && n != cmd.arity || cmd.arity < 0 && n < -cmd.arity {
		return fail("ERR Wrong number of args calling Redis command from script")
	}
	if scriptRefused(cmd) {
		return fail("ERR This Redis command is not allowed from script")
	}
	write := cmd.flags&flagWrite != 0
	if write && sc.ro {
		return fail("ERR Write commands are not allowed from read-only scripts.")
	}
	if s.opts.Auth != nil {
		if e := s.accessError(sc.caller, cmd, args); e != "" {
			s.opts.Auth.Failed("resp", authFailureReason(e))
			return fail(e)
		}
	}
	if s.opts.KeyOwner != nil {
		for _, k := range commandKeys(cmd, args) {
			if ownerOf(s.opts.KeyOwner, str(k)) != sc.owner {
				return fail("ERR Script attempted to access a non local key in a cluster node script")
			}
		}
	}
	if sc.locks != nil {
		if ks := commandKeys(cmd, args); len(ks) > 0 {
			if err := sc.locks.Lock(L.Context(), sortedIDs(ks), sc.lockWait()); err != nil {
				return fail(engineError(err))
			}
		}
	}
	if write {
		sc.killMu.Lock()
		killed := sc.killed
		sc.wrote = true
		sc.killMu.Unlock()
		if killed {
			return fail(errScriptKilled)
		}
	}
	x := sc.scratch
	x.out = x.out[:0]
	x.tstart = nanotime()
	s.run(x, cmd, args)
	v, _, isErr := respToLua(L, x.out)
	if isErr && raise {
		sc.line = firstLine(L.Where(1), 0)
		L.Error(v, 0)
		return 0
	}
	L.Push(v)
	return 1
}

// commandKeys returns the keys at cmd's key positions.
func commandKeys(cmd *command, args [][]byte) [][]byte {
	if cmd.first <= 0 {
		return nil
	}
	last := cmd.last
	if last < 0 {
		last += len(args)
	}
	var keys [][]byte
	for i := cmd.first; i <= last && i < len(args); i += cmd.step {
		keys = append(keys, args[i])
	}
	return keys
}

func cmdScript(s *Server, c *client, args [][]byte) {
	sc := s.lua
	sub := strings.ToLower(string(args[1]))
	wrongArgs := func() { c.writeError("ERR wrong number of arguments for 'script|" + sub + "' command") }
	switch sub {
	case "load":
		if len(args) != 3 {
			wrongArgs()
			return
		}
		sha, _, cached, err := sc.load(string(args[2]))
		if err != nil {
			c.writeError("ERR Error compiling script (new function): " + err.Error())
			return
		}
		if !cached {
			c.writeError("ERR script cache full (" + strconv.Itoa(maxScripts) + " scripts): SCRIPT FLUSH to clear it")
			return
		}
		c.writeBulkString(sha)
	case "exists":
		if len(args) < 3 {
			wrongArgs()
			return
		}
		c.writeArray(len(args) - 2)
		for _, a := range args[2:] {
			if sc.lookup(string(a)) != nil {
				c.writeInt(1)
			} else {
				c.writeInt(0)
			}
		}
	case "flush":
		if len(args) > 3 {
			wrongArgs()
			return
		}
		if len(args) == 3 && !eqFold(args[2], "sync") && !eqFold(args[2], "async") {
			c.writeError("ERR SCRIPT FLUSH only support SYNC|ASYNC option")
			return
		}
		sc.mu.Lock()
		sc.cache = make(map[string]*lua.FunctionProto)
		sc.mu.Unlock()
		c.writeOK()
	case "kill":
		if len(args) != 2 {
			wrongArgs()
			return
		}
		if e := sc.kill(); e != "" {
			c.writeError(e)
			return
		}
		c.writeOK()
	case "help":
		lines := []string{
			"SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
			"EXISTS <sha1> [<sha1> ...]",
			"    Return information about the existence of the scripts in the script cache.",
			"FLUSH [ASYNC|SYNC]",
			"    Flush the Lua scripts cache. Very dangerous on replicas.",
			"    When called without the optional mode argument, the behavior is determined by the",
			"    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
			"    * ASYNC: Asynchronously flush the scripts cache.",
			"    * SYNC: Synchronously flush the scripts cache.",
			"KILL",
			"    Kill the currently executing Lua script.",
			"LOAD <script>",
			"    Load a script into the scripts cache without executing it.",
			"HELP",
			"    Prints this help.",
		}
		c.writeArray(len(lines))
		for _, l := range lines {
			c.writeStatus(l)
		}
	default:
		c.writeError("ERR unknown subcommand '" + string(truncate(args[1], 128)) + "'. Try SCRIPT HELP.")
	}
}

// kill stops the running script if it has not written; it returns the
// reply ("" is OK).
func (sc *scripting) kill() string {
	sc.killMu.Lock()
	defer sc.killMu.Unlock()
	if sc.start.Load() == 0 || sc.cancel == nil {
		return errNotBusy
	}
	if sc.wrote {
		return errUnkillable
	}
	sc.killed = true
	sc.cancel()
	return ""
}

// cached is the number of scripts in the cache (INFO's
// number_of_cached_scripts).
func (sc *scripting) cached() int {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return len(sc.cache)
}
