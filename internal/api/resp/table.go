package resp

import (
	"sort"
	"strings"
	"time"
)

// cmdDoc is what COMMAND DOCS reports (redis-cli builds its hints and HELP
// from it).
type cmdDoc struct {
	group, summary, since, complexity string
	args                              []argDoc
}

// argDoc is one argument in COMMAND DOCS. Type is one of Redis's argument
// types: key, string, integer, pattern, unix-time, pure-token, oneof, block.
type argDoc struct {
	name, typ, token   string
	optional, multiple bool
	args               []argDoc
}

func aKey(name string) argDoc { return argDoc{name: name, typ: "key"} }
func aStr(name string) argDoc { return argDoc{name: name, typ: "string"} }
func aInt(name string) argDoc { return argDoc{name: name, typ: "integer"} }
func aTok(token string) argDoc {
	return argDoc{name: strings.ToLower(token), typ: "pure-token", token: token}
}
func aOpt(a argDoc) argDoc  { a.optional = true; return a }
func aMany(a argDoc) argDoc { a.multiple = true; return a }
func aOneOf(name string, as ...argDoc) argDoc {
	return argDoc{name: name, typ: "oneof", args: as}
}
func aBlock(name string, as ...argDoc) argDoc {
	return argDoc{name: name, typ: "block", args: as}
}
func aTokInt(token, name string) argDoc {
	return argDoc{name: name, typ: "integer", token: token}
}

// buildCommands returns a fresh command table (each Server has its own,
// with its own metric observers).
func buildCommands() map[string]*command {
	const (
		w  = flagWrite
		r  = flagReadonly
		f  = flagFast
		tx = flagTxControl
	)
	expireOpts := aOpt(aOneOf("condition", aTok("NX"), aTok("XX"), aTok("GT"), aTok("LT")))
	list := []*command{
		// strings / counters
		{name: "incr", arity: 2, flags: w | f, first: 1, last: 1, step: 1,
			doc:  &cmdDoc{"string", "Increments the integer value of a key by one. Uses 0 as initial value if the key doesn't exist.", "1.0.0", "O(1)", []argDoc{aKey("key")}},
			prep: prepIncr(1), done: doneValue},
		{name: "decr", arity: 2, flags: w | f, first: 1, last: 1, step: 1,
			doc:  &cmdDoc{"string", "Decrements the integer value of a key by one. Uses 0 as initial value if the key doesn't exist.", "1.0.0", "O(1)", []argDoc{aKey("key")}},
			prep: prepIncr(-1), done: doneValue},
		{name: "incrby", arity: 3, flags: w | f, first: 1, last: 1, step: 1,
			doc:  &cmdDoc{"string", "Increments the integer value of a key by a number. Uses 0 as initial value if the key doesn't exist.", "1.0.0", "O(1)", []argDoc{aKey("key"), aInt("increment")}},
			prep: prepIncrBy(false), done: doneValue},
		{name: "decrby", arity: 3, flags: w | f, first: 1, last: 1, step: 1,
			doc:  &cmdDoc{"string", "Decrements a number from the integer value of a key. Uses 0 as initial value if the key doesn't exist.", "1.0.0", "O(1)", []argDoc{aKey("key"), aInt("decrement")}},
			prep: prepIncrBy(true), done: doneValue},
		{name: "get", arity: 2, flags: r | f, first: 1, last: 1, step: 1,
			doc: &cmdDoc{"string", "Returns the integer value of a key.", "1.0.0", "O(1)", []argDoc{aKey("key")}},
			fn:  cmdGet},
		{name: "set", arity: -3, flags: w, first: 1, last: 1, step: 1,
			doc: &cmdDoc{"string", "Sets the integer value of a key, ignoring its type. The key is created if it doesn't exist.", "1.0.0", "O(1)", []argDoc{
				aKey("key"), aInt("value"),
				aOpt(aOneOf("condition", aTok("NX"), aTok("XX"))),
				aOpt(aOneOf("expiration", aTokInt("EX", "seconds"), aTokInt("PX", "milliseconds"),
					argDoc{name: "unix-time-seconds", typ: "unix-time", token: "EXAT"},
					argDoc{name: "unix-time-milliseconds", typ: "unix-time", token: "PXAT"}, aTok("KEEPTTL"))),
			}},
			prep: prepSet, done: doneSet},
		{name: "setnx", arity: 3, flags: w | f, first: 1, last: 1, step: 1,
			doc:  &cmdDoc{"string", "Set the integer value of a key only when the key doesn't exist.", "1.0.0", "O(1)", []argDoc{aKey("key"), aInt("value")}},
			prep: prepSetNX, done: doneChanged},
		{name: "mget", arity: -2, flags: r | f, first: 1, last: -1, step: 1,
			doc: &cmdDoc{"string", "Atomically returns the integer values of one or more keys.", "1.0.0", "O(N) where N is the number of keys to retrieve.", []argDoc{aMany(aKey("key"))}},
			fn:  cmdMGet},
		{name: "mset", arity: -3, flags: w, first: 1, last: -1, step: 2,
			doc: &cmdDoc{"string", "Atomically creates or modifies the integer values of one or more keys.", "1.0.1", "O(N) where N is the number of keys to set.", []argDoc{
				aMany(aBlock("data", aKey("key"), aInt("value")))}},
			prep: prepMSet, done: doneOK},

		// generic
		{name: "del", arity: -2, flags: w, first: 1, last: -1, step: 1,
			doc:  &cmdDoc{"generic", "Deletes one or more keys.", "1.0.0", "O(N) where N is the number of keys that will be removed.", []argDoc{aMany(aKey("key"))}},
			prep: prepDel, done: doneCount},
		{name: "unlink", arity: -2, flags: w | f, first: 1, last: -1, step: 1,
			doc:  &cmdDoc{"generic", "Deletes one or more keys (same as DEL in counterd).", "4.0.0", "O(N) where N is the number of keys that will be removed.", []argDoc{aMany(aKey("key"))}},
			prep: prepDel, done: doneCount},
		{name: "exists", arity: -2, flags: r | f, first: 1, last: -1, step: 1,
			doc: &cmdDoc{"generic", "Determines whether one or more keys exist.", "1.0.0", "O(N) where N is the number of keys to check.", []argDoc{aMany(aKey("key"))}},
			fn:  cmdExists},
		{name: "type", arity: 2, flags: r | f, first: 1, last: 1, step: 1,
			doc: &cmdDoc{"generic", "Determines the type of value stored at a key.", "1.0.0", "O(1)", []argDoc{aKey("key")}},
			fn:  cmdType},
		{name: "expire", arity: -3, flags: w | f, first: 1, last: 1, step: 1,
			doc:  &cmdDoc{"generic", "Sets the expiration time of a key in seconds.", "1.0.0", "O(1)", []argDoc{aKey("key"), aInt("seconds"), expireOpts}},
			prep: prepExpire(time.Second, "expire"), done: doneChanged},
		{name: "pexpire", arity: -3, flags: w | f, first: 1, last: 1, step: 1,
			doc:  &cmdDoc{"generic", "Sets the expiration time of a key in milliseconds.", "2.6.0", "O(1)", []argDoc{aKey("key"), aInt("milliseconds"), expireOpts}},
			prep: prepExpire(time.Millisecond, "pexpire"), done: doneChanged},
		{name: "persist", arity: 2, flags: w | f, first: 1, last: 1, step: 1,
			doc:  &cmdDoc{"generic", "Removes the expiration time of a key.", "2.2.0", "O(1)", []argDoc{aKey("key")}},
			prep: prepPersist, done: doneChanged},
		{name: "ttl", arity: 2, flags: r | f, first: 1, last: 1, step: 1,
			doc: &cmdDoc{"generic", "Returns the expiration time in seconds of a key.", "1.0.0", "O(1)", []argDoc{aKey("key")}},
			fn:  cmdTTL(time.Second)},
		{name: "pttl", arity: 2, flags: r | f, first: 1, last: 1, step: 1,
			doc: &cmdDoc{"generic", "Returns the expiration time in milliseconds of a key.", "2.6.0", "O(1)", []argDoc{aKey("key")}},
			fn:  cmdTTL(time.Millisecond)},
		{name: "expiretime", arity: 2, flags: r | f, first: 1, last: 1, step: 1,
			doc: &cmdDoc{"generic", "Returns the expiration time of a key as a Unix timestamp.", "7.0.0", "O(1)", []argDoc{aKey("key")}},
			fn:  cmdExpireTime(time.Second)},
		{name: "pexpiretime", arity: 2, flags: r | f, first: 1, last: 1, step: 1,
			doc: &cmdDoc{"generic", "Returns the expiration time of a key as a Unix milliseconds timestamp.", "7.0.0", "O(1)", []argDoc{aKey("key")}},
			fn:  cmdExpireTime(time.Millisecond)},
		{name: "scan", arity: -2, flags: r,
			doc: &cmdDoc{"generic", "Iterates over the key names in the database.", "2.8.0", "O(1) for every call. O(N) for a complete iteration.", []argDoc{
				aInt("cursor"), aOpt(argDoc{name: "pattern", typ: "pattern", token: "MATCH"}),
				aOpt(aTokInt("COUNT", "count")), aOpt(argDoc{name: "type", typ: "string", token: "TYPE"})}},
			fn: cmdScan},
		{name: "keys", arity: 2, flags: r,
			doc: &cmdDoc{"generic", "Returns all key names that match a pattern.", "1.0.0", "O(N) with N being the number of keys in the database.", []argDoc{{name: "pattern", typ: "pattern"}}},
			fn:  cmdKeys},
		{name: "dbsize", arity: 1, flags: r | f,
			doc: &cmdDoc{"server", "Returns the number of keys in the database.", "1.0.0", "O(1)", nil},
			fn:  cmdDBSize},

		// hashes
		{name: "hincrby", arity: 4, flags: w | f, first: 1, last: 1, step: 1,
			doc:  &cmdDoc{"hash", "Increments the integer value of a field in a hash by a number. Uses 0 as initial value if the field doesn't exist.", "2.0.0", "O(1)", []argDoc{aKey("key"), aStr("field"), aInt("increment")}},
			prep: prepHIncrBy, done: doneHIncrBy},
		{name: "hget", arity: 3, flags: r | f, first: 1, last: 1, step: 1,
			doc: &cmdDoc{"hash", "Returns the value of a field in a hash.", "2.0.0", "O(1)", []argDoc{aKey("key"), aStr("field")}},
			fn:  cmdHGet},
		{name: "hmget", arity: -3, flags: r | f, first: 1, last: 1, step: 1,
			doc: &cmdDoc{"hash", "Returns the values of all fields in a hash.", "2.0.0", "O(N) where N is the number of fields being requested.", []argDoc{aKey("key"), aMany(aStr("field"))}},
			fn:  cmdHMGet},
		{name: "hgetall", arity: 2, flags: r, first: 1, last: 1, step: 1,
			doc: &cmdDoc{"hash", "Returns all fields and values in a hash.", "2.0.0", "O(N) where N is the size of the hash.", []argDoc{aKey("key")}},
			fn:  cmdHGetAll},
		{name: "hkeys", arity: 2, flags: r, first: 1, last: 1, step: 1,
			doc: &cmdDoc{"hash", "Returns all fields in a hash.", "2.0.0", "O(N) where N is the size of the hash.", []argDoc{aKey("key")}},
			fn:  cmdHKeys},
		{name: "hvals", arity: 2, flags: r, first: 1, last: 1, step: 1,
			doc: &cmdDoc{"hash", "Returns all values in a hash.", "2.0.0", "O(N) where N is the size of the hash.", []argDoc{aKey("key")}},
			fn:  cmdHVals},
		{name: "hdel", arity: -3, flags: w | f, first: 1, last: 1, step: 1,
			doc:  &cmdDoc{"hash", "Deletes one or more fields and their values from a hash. Deletes the hash if no fields remain.", "2.0.0", "O(N) where N is the number of fields to be removed.", []argDoc{aKey("key"), aMany(aStr("field"))}},
			prep: prepHDel, done: doneSumValue},
		{name: "hlen", arity: 2, flags: r | f, first: 1, last: 1, step: 1,
			doc: &cmdDoc{"hash", "Returns the number of fields in a hash.", "2.0.0", "O(1)", []argDoc{aKey("key")}},
			fn:  cmdHLen},
		{name: "hexists", arity: 3, flags: r | f, first: 1, last: 1, step: 1,
			doc: &cmdDoc{"hash", "Determines whether a field exists in a hash.", "2.0.0", "O(1)", []argDoc{aKey("key"), aStr("field")}},
			fn:  cmdHExists},

		// hyperloglog
		{name: "pfadd", arity: -2, flags: w | f, first: 1, last: 1, step: 1,
			doc:  &cmdDoc{"hyperloglog", "Adds elements to a HyperLogLog key. Creates the key if it doesn't exist.", "2.8.9", "O(1) to add every element.", []argDoc{aKey("key"), aOpt(aMany(aStr("element")))}},
			prep: prepPFAdd, done: doneAnyChanged},
		{name: "pfcount", arity: -2, flags: r, first: 1, last: -1, step: 1,
			doc: &cmdDoc{"hyperloglog", "Returns the approximated cardinality of the set(s) observed by the HyperLogLog key(s).", "2.8.9", "O(1) with a very small average constant time when called with a single key. O(N) with N being the number of keys.", []argDoc{aMany(aKey("key"))}},
			fn:  cmdPFCount},
		{name: "pfmerge", arity: -2, flags: w, first: 1, last: -1, step: 1,
			doc:  &cmdDoc{"hyperloglog", "Merges one or more HyperLogLog values into a single key.", "2.8.9", "O(N) to merge N HyperLogLogs, but with high constant times.", []argDoc{aKey("destkey"), aOpt(aMany(aKey("sourcekey")))}},
			prep: prepPFMerge, done: doneOK},

		// connection
		{name: "ping", arity: -1, flags: f,
			doc: &cmdDoc{"connection", "Returns the server's liveliness response.", "1.0.0", "O(1)", []argDoc{aOpt(aStr("message"))}},
			fn:  cmdPing},
		{name: "echo", arity: 2, flags: f,
			doc: &cmdDoc{"connection", "Returns the given string.", "1.0.0", "O(1)", []argDoc{aStr("message")}},
			fn:  cmdEcho},
		{name: "select", arity: 2, flags: f | flagLoading,
			doc: &cmdDoc{"connection", "Changes the selected database (counterd has only database 0).", "1.0.0", "O(1)", []argDoc{aInt("index")}},
			fn:  cmdSelect},
		{name: "quit", arity: -1, flags: f | tx | flagLoading,
			doc: &cmdDoc{"connection", "Closes the connection.", "1.0.0", "O(1)", nil},
			fn:  cmdQuit},
		{name: "reset", arity: 1, flags: f | tx | flagLoading,
			doc: &cmdDoc{"connection", "Resets the connection.", "6.2.0", "O(1)", nil},
			fn:  cmdReset},
		{name: "hello", arity: -1, flags: f | flagLoading,
			doc: &cmdDoc{"connection", "Handshakes with the server.", "6.0.0", "O(1)", []argDoc{aOpt(aBlock("arguments", aInt("protover"),
				aOpt(argDoc{name: "auth", typ: "block", token: "AUTH", args: []argDoc{aStr("username"), aStr("password")}}),
				aOpt(argDoc{name: "clientname", typ: "string", token: "SETNAME"})))}},
			fn: cmdHello},
		{name: "auth", arity: -2, flags: f | flagLoading | flagNoScript,
			doc: &cmdDoc{"connection", "Authenticates the connection (counterd has no passwords).", "1.0.0", "O(N) where N is the number of passwords defined for the user", []argDoc{aOpt(aStr("username")), aStr("password")}},
			fn:  cmdAuth},
		{name: "client", arity: -2, flags: flagLoading | flagNoScript,
			doc: &cmdDoc{"connection", "A container for client connection commands: ID, SETNAME, GETNAME, SETINFO, INFO, LIST.", "2.4.0", "Depends on subcommand.", []argDoc{aStr("subcommand"), aOpt(aMany(aStr("arg")))}},
			fn:  cmdClient},

		// server
		{name: "cluster", arity: -2, flags: flagLoading,
			doc: &cmdDoc{"cluster", "A container for Redis Cluster commands (counterd is not a cluster).", "3.0.0", "Depends on subcommand.", []argDoc{aStr("subcommand"), aOpt(aMany(aStr("arg")))}},
			fn: func(s *Server, c *client, args [][]byte) {
				c.writeError("ERR This instance has cluster support disabled")
			}},
		{name: "command", arity: -1, flags: flagLoading,
			doc: &cmdDoc{"server", "Returns detailed information about all commands (subcommands: COUNT, DOCS, INFO, LIST).", "2.8.13", "O(N) where N is the total number of Redis commands", []argDoc{aOpt(aStr("subcommand")), aOpt(aMany(aStr("arg")))}},
			fn:  cmdCommand},
		{name: "info", arity: -1, flags: flagLoading,
			doc: &cmdDoc{"server", "Returns information and statistics about the server.", "1.0.0", "O(1)", []argDoc{aOpt(aMany(aStr("section")))}},
			fn:  cmdInfo},
		{name: "config", arity: -2, flags: flagAdmin | flagLoading | flagNoScript,
			doc: &cmdDoc{"server", "A container for server configuration commands (GET answers from a fixed table; SET is refused).", "2.0.0", "Depends on subcommand.", []argDoc{aStr("subcommand"), aOpt(aMany(aStr("arg")))}},
			fn:  cmdConfig},
		{name: "flushall", arity: -1, flags: w | flagAdmin,
			doc: &cmdDoc{"server", "Removes all keys (refused unless counterd allows flushing).", "1.0.0", "O(N) where N is the total number of keys", []argDoc{aOpt(aOneOf("flush-type", aTok("ASYNC"), aTok("SYNC")))}},
			fn:  cmdFlush},
		{name: "flushdb", arity: -1, flags: w | flagAdmin,
			doc: &cmdDoc{"server", "Removes all keys (refused unless counterd allows flushing).", "1.0.0", "O(N) where N is the number of keys in the selected database", []argDoc{aOpt(aOneOf("flush-type", aTok("ASYNC"), aTok("SYNC")))}},
			fn:  cmdFlush},
		{name: "time", arity: 1, flags: f | flagLoading,
			doc: &cmdDoc{"server", "Returns the server time.", "2.6.0", "O(1)", nil},
			fn:  cmdTime},

		// transactions
		{name: "multi", arity: 1, flags: f | tx | flagLoading,
			doc: &cmdDoc{"transactions", "Starts a transaction.", "1.2.0", "O(1)", nil},
			fn:  cmdMulti},
		{name: "exec", arity: 1, flags: tx | flagLoading,
			doc: &cmdDoc{"transactions", "Executes all commands in a transaction.", "1.2.0", "Depends on commands in the transaction", nil},
			fn:  cmdExec},
		{name: "discard", arity: 1, flags: f | tx | flagLoading,
			doc: &cmdDoc{"transactions", "Discards a transaction.", "2.0.0", "O(N), when N is the number of queued commands", nil},
			fn:  cmdDiscard},
		{name: "watch", arity: -2, flags: f | tx | flagLoading, first: 1, last: -1, step: 1,
			doc: &cmdDoc{"transactions", "Monitors changes to keys to determine the execution of a transaction.", "2.2.0", "O(1) for every key.", []argDoc{aMany(aKey("key"))}},
			fn:  cmdWatch},
		{name: "unwatch", arity: 1, flags: f | flagLoading,
			doc: &cmdDoc{"transactions", "Forgets about watched keys of a transaction.", "2.2.0", "O(1)", nil},
			fn:  cmdUnwatch},
	}
	list = append(list, moreCommands()...)
	list = append(list, scriptCommands()...)
	list = append(list, idiomCommands()...)
	list = append(list, keyspaceCommands()...)
	list = append(list, monitorCommands()...)
	list = append(list, eventTimeCommands(0)...) // New sets Options.EventMaxSkew
	m := make(map[string]*command, len(list))
	for _, c := range list {
		c := c
		if c.fn == nil {
			c.fn = func(s *Server, cl *client, args [][]byte) { s.applyOps(cl, c, args) }
		}
		m[c.name] = c
	}
	// EXPIRE and PEXPIRE take NX/XX/GT/LT, which need a read first.
	m["set"].fn = cmdSet(m["set"]) // SET ... GET reads first
	m["expire"].fn = expireCmd(m["expire"], time.Second)
	m["pexpire"].fn = expireCmd(m["pexpire"], time.Millisecond)
	// Redis's texts for a wrong kind of string (issue 28).
	for _, n := range []string{"incr", "decr", "incrby", "decrby", IncrByAtCommandName} {
		m[n].wrongKind = hllAs(errNotInteger)
	}
	m["incrbyfloat"].wrongKind = hllAs(errNotFloat)
	m["pfadd"].wrongKind = pfWrongKind
	m["pfmerge"].wrongKind = pfWrongKind
	m[PFAddAtCommandName].wrongKind = pfWrongKind
	return m
}

func (s *Server) sortedCommands() []*command {
	out := make([]*command, 0, len(s.cmds))
	for _, c := range s.cmds {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// COMMAND [COUNT | DOCS [name...] | INFO [name...] | LIST | HELP]
func cmdCommand(s *Server, c *client, args [][]byte) {
	if len(args) == 1 {
		cs := s.sortedCommands()
		c.writeArray(len(cs))
		for _, cmd := range cs {
			writeCommandInfo(c, cmd)
		}
		return
	}
	sub := args[1]
	switch {
	case eqFold(sub, "getkeys"):
		cmdCommandGetKeys(s, c, args)
	case eqFold(sub, "count"):
		if len(args) != 2 {
			c.writeError(subArityError("command", "count"))
			return
		}
		c.writeInt(int64(len(s.cmds)))
	case eqFold(sub, "list"):
		cs := s.sortedCommands()
		c.writeArray(len(cs))
		for _, cmd := range cs {
			c.writeBulkString(cmd.name)
		}
	case eqFold(sub, "info"):
		if len(args) == 2 {
			cs := s.sortedCommands()
			c.writeArray(len(cs))
			for _, cmd := range cs {
				writeCommandInfo(c, cmd)
			}
			return
		}
		c.writeArray(len(args) - 2)
		for _, n := range args[2:] {
			if cmd := s.cmds[strings.ToLower(string(n))]; cmd != nil {
				writeCommandInfo(c, cmd)
			} else {
				c.writeNull()
			}
		}
	case eqFold(sub, "docs"):
		var cs []*command
		if len(args) == 2 {
			cs = s.sortedCommands()
		} else {
			for _, n := range args[2:] {
				if cmd := s.cmds[strings.ToLower(string(n))]; cmd != nil {
					cs = append(cs, cmd)
				}
			}
		}
		c.writeMap(len(cs))
		for _, cmd := range cs {
			c.writeBulkString(cmd.name)
			writeCommandDoc(c, cmd)
		}
	case eqFold(sub, "help"):
		writeHelp(c, "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
			"(no subcommand)", "    Return details about all commands.",
			"COUNT", "    Return the total number of commands.",
			"DOCS [<command-name> ...]", "    Return documentary information about commands.",
			"INFO [<command-name> ...]", "    Return details about the given commands, or all of them.",
			"LIST", "    Return the names of all commands.",
			"HELP", "    Print this help.")
	default:
		c.writeError(subcommandError(args))
	}
}

// writeCommandInfo writes one COMMAND INFO entry in Redis 7's ten-element
// form.
func writeCommandInfo(c *client, cmd *command) {
	c.writeArray(10)
	c.writeBulkString(cmd.name)
	c.writeInt(int64(cmd.arity))
	var flags []string
	if cmd.flags&flagWrite != 0 {
		flags = append(flags, "write", "denyoom")
	}
	if cmd.flags&flagReadonly != 0 {
		flags = append(flags, "readonly")
	}
	if cmd.flags&flagAdmin != 0 {
		flags = append(flags, "admin")
	}
	if cmd.flags&flagNoScript != 0 {
		flags = append(flags, "noscript")
	}
	if cmd.flags&flagLoading != 0 {
		flags = append(flags, "loading", "stale")
	}
	if cmd.flags&flagFast != 0 {
		flags = append(flags, "fast")
	}
	c.writeSet(len(flags))
	for _, fl := range flags {
		c.writeStatus(fl)
	}
	c.writeInt(int64(cmd.first))
	c.writeInt(int64(cmd.last))
	c.writeInt(int64(cmd.step))
	cats := []string{}
	if cmd.flags&flagWrite != 0 {
		cats = append(cats, "@write")
	}
	if cmd.flags&flagReadonly != 0 {
		cats = append(cats, "@read")
	}
	if cmd.doc != nil {
		cats = append(cats, "@"+cmd.doc.group)
	}
	if cmd.flags&flagFast != 0 {
		cats = append(cats, "@fast")
	} else {
		cats = append(cats, "@slow")
	}
	c.writeSet(len(cats))
	for _, cat := range cats {
		c.writeStatus(cat)
	}
	c.writeSet(0)   // tips
	c.writeArray(0) // key specs
	c.writeArray(0) // subcommands
}

// writeCommandDoc writes one COMMAND DOCS entry.
func writeCommandDoc(c *client, cmd *command) {
	d := cmd.doc
	if d == nil {
		d = &cmdDoc{group: "server", summary: "", since: "1.0.0", complexity: "O(1)"}
	}
	n := 4
	if len(d.args) > 0 {
		n++
	}
	c.writeMap(n)
	c.writeBulkString("summary")
	c.writeBulkString(d.summary)
	c.writeBulkString("since")
	c.writeBulkString(d.since)
	c.writeBulkString("group")
	c.writeBulkString(d.group)
	c.writeBulkString("complexity")
	c.writeBulkString(d.complexity)
	if len(d.args) > 0 {
		c.writeBulkString("arguments")
		writeArgDocs(c, d.args)
	}
}

func writeArgDocs(c *client, args []argDoc) {
	c.writeArray(len(args))
	for _, a := range args {
		n := 2
		if a.token != "" {
			n++
		}
		if a.optional || a.multiple {
			n++
		}
		if len(a.args) > 0 {
			n++
		}
		c.writeMap(n)
		c.writeBulkString("name")
		c.writeBulkString(a.name)
		c.writeBulkString("type")
		c.writeBulkString(a.typ)
		if a.token != "" {
			c.writeBulkString("token")
			c.writeBulkString(a.token)
		}
		if a.optional || a.multiple {
			var fl []string
			if a.optional {
				fl = append(fl, "optional")
			}
			if a.multiple {
				fl = append(fl, "multiple")
			}
			c.writeBulkString("flags")
			c.writeSet(len(fl))
			for _, x := range fl {
				c.writeStatus(x)
			}
		}
		if len(a.args) > 0 {
			c.writeBulkString("arguments")
			writeArgDocs(c, a.args)
		}
	}
}
