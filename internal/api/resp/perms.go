package resp

import (
	"github.com/counterd/counterd/internal/api/ratelimitapi"
	"github.com/counterd/counterd/internal/auth"
)

// access is what a command requires. Its keys are found at the command
// table's key positions (first, last, step), like Redis's ACL key checks,
// unless pattern says where the command's glob is.
type access struct {
	need auth.Need
	// pattern returns the glob a listing command covers (SCAN MATCH,
	// KEYS): the principal needs the permission on all of it.
	pattern func(args [][]byte) string
	// sourcesRead: only the first key is written, the others are read
	// (PFMERGE dest src...).
	sourcesRead bool
	// keyPerms, when set, is the permission on each key position in
	// turn (RENAME deletes its first key: admin; writes its second).
	keyPerms []auth.Perm
	// sub, when set, decides by subcommand (CLIENT LIST shows every
	// connection's address, CLIENT SETNAME only this one).
	sub func(args [][]byte) auth.Need
}

var (
	needPublic   = access{need: auth.Need{Perm: auth.Public}}
	needRead     = access{need: auth.Need{Perm: auth.Read}}
	needWrite    = access{need: auth.Need{Perm: auth.Write}}
	needAdmin    = access{need: auth.Need{Perm: auth.Admin}}
	needAdminAll = access{need: auth.Need{Perm: auth.Admin, All: true}}
)

// commandAccess maps every command to exactly one permission;
// TestCommandAccessCoversTable checks it against the command table. With
// --auth, a command missing here is refused.
var commandAccess = map[string]access{
	// counters
	"incr": needWrite, "decr": needWrite, "incrby": needWrite, "decrby": needWrite,
	"get": needRead, "set": needWrite, "setnx": needWrite,
	"mget": needRead, "mset": needWrite,
	"del": needAdmin, "unlink": needAdmin, // deleting a counter is admin
	"exists": needRead, "type": needRead,
	"expire": needWrite, "pexpire": needWrite, "persist": needWrite,
	"ttl": needRead, "pttl": needRead, "expiretime": needRead, "pexpiretime": needRead,
	"scan":        {need: auth.Need{Perm: auth.Read}, pattern: scanPattern},
	"keys":        {need: auth.Need{Perm: auth.Read}, pattern: func(args [][]byte) string { return string(args[1]) }},
	"dbsize":      needRead, // a count only
	"incrbyfloat": needWrite, "setex": needWrite, "psetex": needWrite, "getex": needWrite,
	"hset": needWrite, "hsetnx": needWrite,
	"hincrby": needWrite, "hincrbyfloat": needWrite, "hdel": needWrite,
	"hget": needRead, "hmget": needRead, "hgetall": needRead, "hkeys": needRead,
	"hvals": needRead, "hlen": needRead, "hexists": needRead,
	"pfadd": needWrite, "pfcount": needRead,
	"pfmerge":                    {need: auth.Need{Perm: auth.Write}, sourcesRead: true},
	ratelimitapi.RESPCommandName: needWrite, // consumes the key's limit
	EventsCommandName:            needWriteAll,
	ScopedGetCommandName:         needReadKey,
	IncrByAtCommandName:          needWrite,
	PFAddAtCommandName:           needWrite,

	// connection: AUTH, HELLO, QUIT and RESET work before authentication,
	// as in Redis; the rest need an authenticated user.
	"auth": needPublic, "hello": needPublic, "quit": needPublic, "reset": needPublic,
	"ping": needRead, "echo": needRead, "select": needRead, "time": needRead,
	"client":  {sub: clientNeed},
	"cluster": needRead, "command": needRead, "info": needRead,
	"multi": needRead, "exec": needRead, "discard": needRead,
	"watch": needRead, "unwatch": needRead,

	"expireat": needWrite, "pexpireat": needWrite, "getset": needWrite,
	"getdel": needAdmin, // deletes, like DEL
	"msetnx": needWrite, "hmset": needWrite,
	"hstrlen": needRead, "strlen": needRead, "touch": needRead,
	// RENAME deletes its source (admin, like DEL) and writes the
	// destination; COPY reads the source. RANDOMKEY may name any key:
	// read on everything, as KEYS *.
	"rename":     {need: auth.Need{Perm: auth.Admin}, keyPerms: []auth.Perm{auth.Admin, auth.Write}},
	"renamenx":   {need: auth.Need{Perm: auth.Admin}, keyPerms: []auth.Perm{auth.Admin, auth.Write}},
	"copy":       {need: auth.Need{Perm: auth.Write}, keyPerms: []auth.Perm{auth.Read, auth.Write}},
	"randomkey":  {need: auth.Need{Perm: auth.Read}, pattern: func([][]byte) string { return "*" }},
	"hrandfield": needRead, "hscan": needRead,

	// scripting: each key a script declares needs read, and each command
	// it calls is checked like a client's (script.go)
	"eval": needRead, "evalsha": needRead, "eval_ro": needRead, "evalsha_ro": needRead,
	"script": {sub: scriptNeed},

	// monitoring: OBJECT and MEMORY USAGE need read on their key; the
	// slow log shows other users' commands and their arguments
	"role": needRead, "lastsave": needRead, "latency": needRead,
	"object": needRead, "memory": {need: auth.Need{Perm: auth.Read}, sub: memoryNeed},
	"slowlog": needAdminAll,

	// node-wide
	"config":   needAdminAll,
	"flushall": needAdminAll, "flushdb": needAdminAll,
}

// scanPattern is SCAN's MATCH pattern ("*" without one).
func scanPattern(args [][]byte) string {
	pat := "*"
	for i := 2; i+1 < len(args); i += 2 {
		if eqFold(args[i], "match") {
			pat = string(args[i+1])
		}
	}
	return pat
}

func clientNeed(args [][]byte) auth.Need {
	if eqFold(args[1], "list") || eqFold(args[1], "kill") {
		return auth.Need{Perm: auth.Admin, All: true}
	}
	return auth.Need{Perm: auth.Read}
}

// scriptNeed: SCRIPT FLUSH and KILL act on every user's scripts.
func scriptNeed(args [][]byte) auth.Need {
	if eqFold(args[1], "flush") || eqFold(args[1], "kill") {
		return auth.Need{Perm: auth.Admin, All: true}
	}
	return auth.Need{Perm: auth.Read}
}

// memoryNeed: MEMORY PURGE runs a garbage collection of the whole node.
func memoryNeed(args [][]byte) auth.Need {
	if eqFold(args[1], "purge") {
		return auth.Need{Perm: auth.Admin, All: true}
	}
	return auth.Need{Perm: auth.Read}
}
