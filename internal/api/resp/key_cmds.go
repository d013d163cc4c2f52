package resp

// Key commands: DEL, EXISTS, TYPE, the TTL family, SCAN, KEYS, DBSIZE.

import (
	"math"
	"strings"
	"time"

	"github.com/counterd/counterd/internal/contract"
)

// DEL key [key ...]. Keys that are not valid counter ids cannot exist and
// count as not deleted.
func prepDel(c *client, args [][]byte, ops []contract.Op) ([]contract.Op, string, bool) {
	for _, k := range args[1:] {
		id := str(k)
		if contract.ValidateID(id) != nil {
			continue
		}
		ops = append(ops, contract.Op{Type: contract.OpDelete, ID: id})
	}
	return ops, "", true
}

func doneCount(c *client, args [][]byte, res []contract.Result) {
	n := 0
	for i := range res {
		if res[i].Changed {
			n++
		}
	}
	c.writeInt(int64(n))
}

// EXPIRE key seconds [NX|XX|GT|LT], PEXPIRE key ms [...]
func prepExpire(unit time.Duration, name string) func(*client, [][]byte, []contract.Op) ([]contract.Op, string, bool) {
	return func(c *client, args [][]byte, ops []contract.Op) ([]contract.Op, string, bool) {
		ttl, e := parseExpire(args[2], unit, name)
		if e != "" {
			return ops, e, true
		}
		if len(args) > 3 {
			return ops, "", false // conditional: needs a read
		}
		return append(ops, contract.Op{Type: contract.OpExpire, ID: str(args[1]), TTL: ttl}), "", true
	}
}

// parseExpire parses an EXPIRE argument; a non-positive one gives a
// negative TTL, which deletes the key (like Redis).
func parseExpire(b []byte, unit time.Duration, name string) (time.Duration, string) {
	n, ok := parseInt(b)
	if !ok {
		return 0, errNotInteger
	}
	if unit == time.Second && n < math.MinInt64/1000 { // Redis: *1000 would overflow
		return 0, "ERR invalid expire time in '" + name + "' command"
	}
	if n <= 0 {
		return -1, ""
	}
	if n > math.MaxInt64/int64(unit) {
		return 0, "ERR invalid expire time in '" + name + "' command"
	}
	return time.Duration(n) * unit, ""
}

// expireCmd is EXPIRE/PEXPIRE with the Redis 7 NX/XX/GT/LT options, which
// read the current TTL first (not atomic with the write that follows).
func expireCmd(cmd *command, unit time.Duration) func(s *Server, c *client, args [][]byte) {
	return func(s *Server, c *client, args [][]byte) {
		if len(args) == 3 {
			s.applyOps(c, cmd, args)
			return
		}
		nx, xx, gt, lt, ok := expireOptions(c, args[3:])
		if !ok {
			return
		}
		// Redis checks the options, then the time.
		ttl, e := parseExpire(args[2], unit, cmd.name)
		if e != "" {
			c.writeError(e)
			return
		}
		id := str(args[1])
		cur, has, exists, err := s.eng.TTL(c.ctx, id)
		if err != nil {
			c.writeError(engineError(err))
			return
		}
		if !exists {
			c.writeInt(0)
			return
		}
		if !expireApplies(nx, xx, gt, lt, has, ttl, cur) {
			c.writeInt(0)
			return
		}
		r, err := s.eng.Apply(c.ctx, contract.Op{Type: contract.OpExpire, ID: id, TTL: ttl}, contract.WriteOptions{})
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

// PERSIST key
func prepPersist(c *client, args [][]byte, ops []contract.Op) ([]contract.Op, string, bool) {
	return append(ops, contract.Op{Type: contract.OpExpire, ID: str(args[1]), TTL: 0}), "", true
}

// EXISTS key [key ...]
func cmdExists(s *Server, c *client, args [][]byte) {
	var n int64
	for _, k := range args[1:] {
		_, _, ok, err := s.eng.TTL(c.ctx, str(k))
		if err != nil {
			c.writeError(engineError(err))
			return
		}
		c.lookedUp(ok)
		if ok {
			n++
		}
	}
	c.writeInt(n)
}

// TYPE key: "hash" for hashes, "string" for every other kind, "none".
func cmdType(s *Server, c *client, args [][]byte) {
	id := str(args[1])
	if contract.ValidateID(id) != nil {
		c.writeStatus("none")
		return
	}
	v, err := s.eng.Get(c.ctx, id)
	if err == nil {
		c.lookedUp(v.Exists)
	}
	switch {
	case err != nil:
		c.writeError(engineError(err))
	case !v.Exists:
		c.writeStatus("none")
	case v.Kind == contract.KindHash:
		c.writeStatus("hash")
	default:
		c.writeStatus("string")
	}
}

func typeName(k contract.Kind) string {
	if k == contract.KindHash {
		return "hash"
	}
	return "string"
}

// TTL key, PTTL key: -2 missing, -1 no TTL.
func cmdTTL(unit time.Duration) func(s *Server, c *client, args [][]byte) {
	return func(s *Server, c *client, args [][]byte) {
		ttl, has, exists, err := s.eng.TTL(c.ctx, str(args[1]))
		if err == nil {
			c.lookedUp(exists)
		}
		switch {
		case err != nil:
			c.writeError(engineError(err))
		case !exists:
			c.writeInt(-2)
		case !has:
			c.writeInt(-1)
		default:
			// Rounded like Redis: (ms+500)/1000 for TTL.
			c.writeInt(int64((ttl + unit/2) / unit))
		}
	}
}

// EXPIRETIME key, PEXPIRETIME key: absolute Unix expiry, -2 missing, -1 none.
func cmdExpireTime(unit time.Duration) func(s *Server, c *client, args [][]byte) {
	return func(s *Server, c *client, args [][]byte) {
		id := str(args[1])
		if contract.ValidateID(id) != nil {
			c.writeInt(-2)
			return
		}
		v, err := s.eng.Get(c.ctx, id)
		switch {
		case err != nil:
			c.writeError(engineError(err))
		case !v.Exists:
			c.writeInt(-2)
		case v.ExpiresAt.IsZero():
			c.writeInt(-1)
		default:
			// The stored expiry, exact after EXAT/PXAT.
			at := v.ExpiresAt
			if unit == time.Second {
				c.writeInt(at.Unix())
			} else {
				c.writeInt(at.UnixMilli())
			}
		}
	}
}

// scanOptions parses the options of SCAN (typeOK: TYPE too) and HSCAN,
// name and value pairs: MATCH (a match-all "*" is ""), COUNT (default 10,
// at most 1<<20) and TYPE (lower-cased). On a bad option it answers Redis's
// error and returns ok false.
func scanOptions(c *client, args [][]byte, typeOK bool) (match string, count int, typ string, ok bool) {
	count = 10
	for i := 0; i < len(args); i += 2 {
		if i+1 >= len(args) {
			c.writeError(errSyntax)
			return "", 0, "", false
		}
		switch a := args[i]; {
		case eqFold(a, "match"):
			match = string(args[i+1])
			if match == "*" {
				match = ""
			}
		case eqFold(a, "count"):
			n, ok := parseInt(args[i+1])
			if !ok {
				c.writeError(errNotInteger)
				return "", 0, "", false
			}
			if n < 1 {
				c.writeError(errSyntax)
				return "", 0, "", false
			}
			count = int(min(n, 1<<20))
		case typeOK && eqFold(a, "type"):
			typ = strings.ToLower(string(args[i+1]))
		default:
			c.writeError(errSyntax)
			return "", 0, "", false
		}
	}
	return match, count, typ, true
}

// SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]
func cmdScan(s *Server, c *client, args [][]byte) {
	cursor, ok := parseUint(args[1])
	if !ok {
		c.writeError(errInvalidCur)
		return
	}
	match, count, typ, ok := scanOptions(c, args[2:], true)
	if !ok {
		return
	}
	ids, next, err := s.eng.Scan(c.ctx, cursor, match, count)
	if err != nil {
		c.writeError(engineError(err))
		return
	}
	if typ != "" {
		kept := ids[:0]
		for _, id := range ids {
			if v, err := s.eng.Get(c.ctx, id); err == nil && v.Exists && typeName(v.Kind) == typ {
				kept = append(kept, id)
			}
		}
		ids = kept
	}
	c.writeArray(2)
	c.scratch = appendUint(c.scratch[:0], next)
	c.writeBulk(c.scratch)
	c.writeArray(len(ids))
	for _, id := range ids {
		c.writeBulkString(id)
	}
}

// KEYS pattern
func cmdKeys(s *Server, c *client, args [][]byte) {
	match := string(args[1])
	if match == "*" {
		match = ""
	}
	var all []string
	var cursor uint64
	for {
		ids, next, err := s.eng.Scan(c.ctx, cursor, match, 1000)
		if err != nil {
			c.writeError(engineError(err))
			return
		}
		all = append(all, ids...)
		if next == 0 {
			break
		}
		cursor = next
	}
	c.writeArray(len(all))
	for _, id := range all {
		c.writeBulkString(id)
	}
}

// DBSIZE
func cmdDBSize(s *Server, c *client, args [][]byte) {
	n, err := s.eng.Len(c.ctx)
	if err != nil {
		c.writeError(engineError(err))
		return
	}
	c.writeInt(int64(n))
}

func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var u uint64
	for _, ch := range b {
		if ch < '0' || ch > '9' {
			return 0, false
		}
		d := uint64(ch - '0')
		if u > (math.MaxUint64-d)/10 {
			return 0, false
		}
		u = u*10 + d
	}
	return u, true
}

func appendUint(b []byte, u uint64) []byte {
	var tmp [20]byte
	i := len(tmp)
	for {
		i--
		tmp[i] = byte('0' + u%10)
		u /= 10
		if u == 0 {
			break
		}
	}
	return append(b, tmp[i:]...)
}

// expireOptions parses EXPIRE's and EXPIREAT's NX|XX|GT|LT; on a bad or
// incompatible option it answers Redis's error and reports false.
func expireOptions(c *client, opts [][]byte) (nx, xx, gt, lt, ok bool) {
	for _, a := range opts {
		switch {
		case eqFold(a, "nx"):
			nx = true
		case eqFold(a, "xx"):
			xx = true
		case eqFold(a, "gt"):
			gt = true
		case eqFold(a, "lt"):
			lt = true
		default:
			c.writeError("ERR Unsupported option " + string(a))
			return
		}
	}
	if nx && (xx || gt || lt) {
		c.writeError("ERR NX and XX, GT or LT options at the same time are not compatible")
		return
	}
	if gt && lt {
		c.writeError("ERR GT and LT options at the same time are not compatible")
		return
	}
	return nx, xx, gt, lt, true
}

// expireApplies decides EXPIRE's and EXPIREAT's NX|XX|GT|LT for a key
// that has (has) or lacks a TTL cur, given the new TTL ttl. A key without
// TTL counts as an infinite TTL for GT and LT.
func expireApplies(nx, xx, gt, lt, has bool, ttl, cur time.Duration) bool {
	switch {
	case nx:
		return !has
	case xx && !has:
		return false
	case gt:
		return has && ttl > cur
	case lt:
		return !has || ttl < cur
	}
	return true
}

// getString reads id for a command on string values (GETDEL, GETEX):
// false when it already answered (nil for a missing key, WRONGTYPE for a
// hash or an hll, or the engine's error).
func getString(s *Server, c *client, id string) (contract.View, bool) {
	v, err := s.eng.Get(c.ctx, id)
	if err == nil {
		c.lookedUp(v.Exists)
	}
	switch {
	case err != nil:
		c.writeError(engineError(err))
		return v, false
	case !v.Exists:
		c.writeNull()
		return v, false
	case v.Kind == contract.KindHash || v.Kind == contract.KindHLL:
		c.writeError(errWrongType)
		return v, false
	}
	return v, true
}
