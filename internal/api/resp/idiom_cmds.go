package resp

import (
	"errors"
	"math"
	"strconv"
	"time"

	"github.com/counterd/counterd/internal/contract"
)

// The counter idioms of issue 28: EXPIREAT, PEXPIREAT, GETSET, GETDEL,
// SET ... GET, MSETNX, HMSET, HSTRLEN, STRLEN, TOUCH (COMMAND GETKEYS is
// in table.go's COMMAND).
//
// GETSET and SET ... GET read then write with the engine's version check
// (OpSet CheckVersion), retried on a conflict: atomic on every backend
// and front end. GETDEL and MSETNX have no such engine op (a delete or a
// multi-key create conditional on a read): they run under the script
// gate's exclusive side, so no other Redis-protocol client's command
// interleaves (gateExclusive), as a script. In tiered mode all of them
// also lock their keys against the writers of every node (keylocks.go).

func idiomCommands() []*command {
	const (
		w = flagWrite
		r = flagReadonly
		f = flagFast
	)
	expireOpts := aOpt(aOneOf("condition", aTok("NX"), aTok("XX"), aTok("GT"), aTok("LT")))
	hmset := &command{name: "hmset", arity: -4, flags: w | f, first: 1, last: 1, step: 1,
		doc:  &cmdDoc{"hash", "Sets the values of multiple fields (deprecated: HSET with several fields).", "2.0.0", "O(N) where N is the number of fields being set.", []argDoc{aKey("key"), aMany(aBlock("data", aStr("field"), aInt("value")))}},
		prep: prepHSet(contract.SetAlways), done: doneOK}
	hmset.fn = func(s *Server, c *client, args [][]byte) {
		at := len(c.out)
		hsetCmd(s, c, hmset, args)
		if at < len(c.out) && c.out[at] == ':' { // HSET's count: HMSET answers OK
			c.out = c.out[:at]
			c.writeOK()
		}
	}
	return []*command{
		{name: "expireat", arity: -3, flags: w | f, first: 1, last: 1, step: 1,
			doc: &cmdDoc{"generic", "Sets the expiration time of a key to a Unix timestamp.", "1.2.0", "O(1)", []argDoc{aKey("key"), {name: "unix-time-seconds", typ: "unix-time"}, expireOpts}},
			fn:  expireAtCmd(time.Second, "expireat")},
		{name: "pexpireat", arity: -3, flags: w | f, first: 1, last: 1, step: 1,
			doc: &cmdDoc{"generic", "Sets the expiration time of a key to a Unix milliseconds timestamp.", "2.6.0", "O(1)", []argDoc{aKey("key"), {name: "unix-time-milliseconds", typ: "unix-time"}, expireOpts}},
			fn:  expireAtCmd(time.Millisecond, "pexpireat")},
		{name: "getset", arity: 3, flags: w | f, first: 1, last: 1, step: 1,
			doc: &cmdDoc{"string", "Returns the previous value of a key after setting it to a new value.", "1.0.0", "O(1)", []argDoc{aKey("key"), aInt("value")}},
			fn: func(s *Server, c *client, args [][]byte) {
				setGet(s, c, [][]byte{args[0], args[1], args[2]}, contract.Op{Type: contract.OpSet, ID: str(args[1])})
			}},
		{name: "getdel", arity: 2, flags: w | f, first: 1, last: 1, step: 1,
			doc: &cmdDoc{"string", "Returns the value of a key after deleting the key.", "6.2.0", "O(1)", []argDoc{aKey("key")}},
			fn:  cmdGetDel},
		{name: "msetnx", arity: -3, flags: w, first: 1, last: -1, step: 2,
			doc: &cmdDoc{"string", "Atomically sets the integer values of one or more keys only when none of the keys exist.", "1.0.1", "O(N) where N is the number of keys to set.", []argDoc{aMany(aBlock("data", aKey("key"), aInt("value")))}},
			fn:  cmdMSetNX},
		hmset,
		{name: "hstrlen", arity: 3, flags: r | f, first: 1, last: 1, step: 1,
			doc: &cmdDoc{"hash", "Returns the length of the value of a field.", "3.2.0", "O(1)", []argDoc{aKey("key"), aStr("field")}},
			fn:  lengthOf(cmdHGet)},
		{name: "strlen", arity: 2, flags: r | f, first: 1, last: 1, step: 1,
			doc: &cmdDoc{"string", "Returns the length of a string value.", "2.2.0", "O(1)", []argDoc{aKey("key")}},
			fn:  lengthOf(cmdGet)},
		{name: "touch", arity: -2, flags: r | f, first: 1, last: -1, step: 1,
			doc: &cmdDoc{"generic", "Returns the number of existing keys out of those specified (counterd keeps no access time).", "3.2.1", "O(N) where N is the number of keys that will be touched.", []argDoc{aMany(aKey("key"))}},
			fn:  cmdExists},
	}
}

// lengthOf answers the length of the bulk string read answers (0 for a
// null), or its error: STRLEN from GET, HSTRLEN from HGET.
func lengthOf(read func(s *Server, c *client, args [][]byte)) func(s *Server, c *client, args [][]byte) {
	return func(s *Server, c *client, args [][]byte) {
		at := len(c.out)
		read(s, c, args)
		out := c.out[at:]
		if len(out) == 0 || (out[0] != '$' && out[0] != '_') {
			return // an error
		}
		n := int64(0)
		if out[0] == '$' {
			end := 1
			for end < len(out) && out[end] != '\r' {
				end++
			}
			if l, err := strconv.ParseInt(string(out[1:end]), 10, 64); err == nil && l > 0 {
				n = l
			}
		}
		c.out = c.out[:at]
		c.writeInt(n)
	}
}

// setGet runs SET key value [options] GET (and GETSET): the old value,
// then the write, with the engine's version check so that nothing lands
// in between. op carries the parsed SET (mode, TTL).
func setGet(s *Server, c *client, args [][]byte, op contract.Op) {
	if !setValue(&op, args[2]) {
		c.writeError(errNotInteger)
		return
	}
	id := op.ID
	mode := op.SetMode
	for try := 0; ; try++ {
		v, err := s.eng.Get(c.ctx, id)
		if err != nil {
			c.writeError(engineError(err))
			return
		}
		if v.Exists && (v.Kind == contract.KindHash || v.Kind == contract.KindHLL) {
			c.writeError(errWrongType)
			return
		}
		apply := !(mode == contract.SetIfAbsent && v.Exists) && !(mode == contract.SetIfExists && !v.Exists)
		if apply {
			w := op
			w.SetMode = contract.SetAlways
			w.CheckVersion = true
			if v.Exists {
				w.ExpectedVersion = v.Version
			}
			ops := []contract.Op{w}
			if w.TTL == pastTTL {
				ops = append(ops, contract.Op{Type: contract.OpExpire, ID: id, TTL: -1})
			}
			_, err = s.eng.ApplyBatch(c.ctx, ops, contract.WriteOptions{})
			if errors.Is(err, contract.ErrVersionConflict) && try < 100 {
				continue // written in between: read again
			}
			if err != nil {
				c.writeError(engineError(err))
				return
			}
		}
		if !v.Exists {
			c.writeNull()
			return
		}
		writeStringValue(c, &v)
		return
	}
}

// cmdSet is SET: with GET it reads the old value (setGet), else it is
// the engine write prepSet describes.
func cmdSet(cmd *command) func(s *Server, c *client, args [][]byte) {
	return func(s *Server, c *client, args [][]byte) {
		get := -1
		for i := 3; i < len(args); i++ {
			if eqFold(args[i], "get") {
				get = i
				break
			}
		}
		if get < 0 {
			s.applyOps(c, cmd, args)
			return
		}
		rest := make([][]byte, 0, len(args)-1)
		rest = append(rest, args[:3]...)
		for _, a := range args[3:] {
			if !eqFold(a, "get") { // Redis takes GET more than once
				rest = append(rest, a)
			}
		}
		ops, e, _ := prepSet(c, rest, nil)
		if e != "" {
			c.writeError(e)
			return
		}
		setGet(s, c, rest, ops[0])
	}
}

// GETDEL key (under the gate's exclusive side).
func cmdGetDel(s *Server, c *client, args [][]byte) {
	id := str(args[1])
	v, ok := getString(s, c, id)
	if !ok {
		return
	}
	if _, err := s.eng.Apply(c.ctx, contract.Op{Type: contract.OpDelete, ID: id}, contract.WriteOptions{}); err != nil {
		c.writeError(engineError(err))
		return
	}
	writeStringValue(c, &v)
}

// MSETNX key value [key value ...] (under the gate's exclusive side): 1
// and every key set, or 0 and none when one exists.
func cmdMSetNX(s *Server, c *client, args [][]byte) {
	if len(args)%2 != 1 {
		c.writeError("ERR wrong number of arguments for 'msetnx' command")
		return
	}
	ops, e, _ := prepMSet(c, args, nil)
	if e != "" {
		c.writeError(e)
		return
	}
	for i := 1; i < len(args); i += 2 {
		_, _, exists, err := s.eng.TTL(c.ctx, str(args[i]))
		if err != nil {
			c.writeError(engineError(err))
			return
		}
		if exists {
			c.writeInt(0)
			return
		}
	}
	if _, err := s.eng.ApplyBatch(c.ctx, ops, contract.WriteOptions{}); err != nil {
		c.writeError(engineError(err))
		return
	}
	c.writeInt(1)
}

// expireAtCmd is EXPIREAT/PEXPIREAT [NX|XX|GT|LT]: an absolute expiry
// (in the past: the key is deleted, as in Redis).
func expireAtCmd(unit time.Duration, name string) func(s *Server, c *client, args [][]byte) {
	return func(s *Server, c *client, args [][]byte) {
		nx, xx, gt, lt, ok := expireOptions(c, args[3:])
		if !ok {
			return
		}
		n, ok := parseInt(args[2])
		if !ok {
			c.writeError(errNotInteger)
			return
		}
		invalid := "ERR invalid expire time in '" + name + "' command"
		if unit == time.Second && (n > math.MaxInt64/1000 || n < math.MinInt64/1000) {
			c.writeError(invalid) // Redis: seconds * 1000 overflows
			return
		}
		op := contract.Op{Type: contract.OpExpire, ID: str(args[1])}
		if n <= 0 {
			op.TTL = -1 // long past: delete
		} else if n > math.MaxInt64/int64(unit) {
			c.writeError(invalid) // beyond a unix-nanosecond time (year 2262)
			return
		} else {
			op.ExpireAt = n * int64(unit)
		}
		if nx || xx || gt || lt {
			cur, has, exists, err := s.eng.TTL(c.ctx, op.ID)
			if err != nil {
				c.writeError(engineError(err))
				return
			}
			if !exists {
				c.writeInt(0)
				return
			}
			ttl := time.Duration(op.ExpireAt - s.eng.Now().UnixNano())
			if op.ExpireAt == 0 {
				ttl = -1
			}
			if !expireApplies(nx, xx, gt, lt, has, ttl, cur) {
				c.writeInt(0)
				return
			}
		}
		r, err := s.eng.Apply(c.ctx, op, contract.WriteOptions{})
		if err != nil {
			c.writeError(engineError(err))
			return
		}
		if r.Changed {
			c.writeInt(1)
		} else {
			c.writeInt(0)
		}
	}
}

// cmdCommandGetKeys is COMMAND GETKEYS command [arg ...].
func cmdCommandGetKeys(s *Server, c *client, args [][]byte) {
	if len(args) < 4 {
		c.writeError(subArityError("command", "getkeys"))
		return
	}
	argv := args[2:]
	cmd := s.lookup(c, argv[0])
	if cmd == nil {
		c.writeError("ERR Invalid command specified")
		return
	}
	if cmd.first <= 0 && !isScriptCmd(cmd.name) { // before the arity, as Redis
		c.writeError("ERR The command has no key arguments")
		return
	}
	if cmd.arity > 0 && len(argv) != cmd.arity || cmd.arity < 0 && len(argv) < -cmd.arity {
		c.writeError("ERR Invalid number of arguments specified for command")
		return
	}
	var keys [][]byte
	if isScriptCmd(cmd.name) {
		if nk, ok := parseInt(argv[2]); ok && nk > 0 && nk <= int64(len(argv)-3) {
			keys = argv[3 : 3+nk]
		}
		c.writeArray(len(keys))
	} else {
		if cmd.first <= 0 {
			c.writeError("ERR The command has no key arguments")
			return
		}
		keys = commandKeys(cmd, argv)
		c.writeArray(len(keys))
	}
	for _, k := range keys {
		c.writeBulk(k)
	}
}
