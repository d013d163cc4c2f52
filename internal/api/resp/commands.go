package resp

import (
	"context"
	"errors"
	"math"
	"strings"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/engine"
)

// Redis's error replies, word for word.
const (
	errNotInteger   = "ERR value is not an integer or out of range"
	errOverflow     = "ERR increment or decrement would overflow"
	errWrongType    = "WRONGTYPE Operation against a key holding the wrong kind of value"
	errSyntax       = "ERR syntax error"
	errInvalidCur   = "ERR invalid cursor"
	errDecrOverflow = "ERR decrement would overflow"
)

type cmdFlags uint16

const (
	flagWrite     cmdFlags = 1 << iota // mutates counters
	flagReadonly                       // reads counters
	flagFast                           // O(1) or O(log n)
	flagTxControl                      // runs at once even inside MULTI
	flagAdmin                          // administrative
	flagNoScript                       // "noscript" in COMMAND
	flagLoading                        // "loading", "stale"
)

// command is one entry of the command table.
type command struct {
	name  string // lower case
	arity int    // Redis convention: n exactly, -n at least n (name included)
	flags cmdFlags
	// Key positions for COMMAND (first, last, step; 0 0 0 for none).
	first, last, step int
	doc               *cmdDoc

	fn func(s *Server, c *client, args [][]byte)

	// prep and done, when set, split a write into the engine ops it
	// applies and the reply built from their results, so that EXEC can
	// apply a transaction of such writes as one atomic engine batch. prep
	// returns an error reply instead of ops when the arguments are bad, or
	// batchable false when this invocation needs reads (EXPIRE NX, ...).
	prep func(c *client, args [][]byte, ops []engine.Op) (out []engine.Op, errReply string, batchable bool)
	done func(c *client, args [][]byte, res []engine.Result)

	calls prometheus.Counter  // nil without metrics
	dur   prometheus.Observer // nil without metrics
}

// str returns b as a string without copying.
//
// This is safe for command arguments because they alias the connection's
// write-once read buffer (see client.in): the bytes never change, so the
// string stays valid for as long as anything references it. Strings that
// may be retained for long (hash field names, client names, watched keys)
// are copied instead, so they do not pin a whole read buffer in memory.
func str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// eqFold reports whether b equals the lower-case ASCII word s, ignoring case.
func eqFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// parseInt parses a decimal int64 the way Redis's string2ll does: an
// optional '-', no '+', no spaces, no leading zeros, no overflow.
func parseInt(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	if len(b) == 1 && b[0] == '0' {
		return 0, true
	}
	neg := false
	i := 0
	if b[0] == '-' {
		neg = true
		i = 1
		if len(b) == 1 {
			return 0, false
		}
	}
	if b[i] < '1' || b[i] > '9' {
		return 0, false
	}
	var u uint64
	for ; i < len(b); i++ {
		c := b[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if u > (math.MaxUint64-d)/10 {
			return 0, false
		}
		u = u*10 + d
	}
	if neg {
		if u > 1<<63 {
			return 0, false
		}
		return -int64(u), true
	}
	if u > math.MaxInt64 {
		return 0, false
	}
	return int64(u), true
}

// engineError words an engine error as Redis would.
func engineError(err error) string {
	switch {
	case errors.Is(err, engine.ErrWrongKind):
		return errWrongType
	case errors.Is(err, engine.ErrOverflow):
		return errOverflow
	case errors.Is(err, engine.ErrInvalidID):
		return "ERR invalid key: " + errDetail(err, engine.ErrInvalidID)
	case errors.Is(err, engine.ErrVersionConflict):
		return "ERR version conflict: " + errDetail(err, engine.ErrVersionConflict)
	case errors.Is(err, engine.ErrInvalidArgument):
		return "ERR " + errDetail(err, engine.ErrInvalidArgument)
	case errors.Is(err, engine.ErrBatchTooLarge):
		return "ERR transaction too large: " + errDetail(err, engine.ErrBatchTooLarge)
	case errors.Is(err, engine.ErrNotFound):
		return "ERR no such key"
	case errors.Is(err, engine.ErrClosed), errors.Is(err, context.Canceled):
		return "ERR server is shutting down"
	case errors.Is(err, engine.ErrUnavailable):
		return "TRYAGAIN " + errDetail(err, engine.ErrUnavailable)
	}
	return "ERR " + err.Error()
}

// errDetail returns what err says after its sentinel's text.
func errDetail(err, sentinel error) string {
	msg, s := err.Error(), sentinel.Error()
	if i := strings.Index(msg, s); i >= 0 {
		rest := strings.TrimPrefix(msg[i+len(s):], ": ")
		if rest != "" {
			return rest
		}
	}
	return strings.TrimPrefix(s, "engine: ")
}

// ---- writes expressed as engine ops ----

// maxScratchOps bounds the scratch op buffer kept between commands.
const maxScratchOps = 64

// applyOps runs a prep/done command outside a transaction.
func (s *Server) applyOps(c *client, cmd *command, args [][]byte) {
	ops, e, _ := cmd.prep(c, args, c.opBuf[:0])
	if cap(ops) <= maxScratchOps {
		c.opBuf = ops[:0]
	}
	if e != "" {
		c.writeError(e)
		return
	}
	var res []engine.Result
	switch len(ops) {
	case 0:
	case 1:
		r, err := s.eng.Apply(s.ctx, ops[0], engine.WriteOptions{})
		if err != nil {
			c.writeError(engineError(err))
			clearOps(ops)
			return
		}
		c.res1[0] = r
		res = c.res1[:]
	default:
		var err error
		res, err = s.eng.ApplyBatch(s.ctx, ops, engine.WriteOptions{})
		if errors.Is(err, engine.ErrBatchTooLarge) {
			// Too many keys for one atomic batch (a huge DEL): apply one
			// by one, as Redis would, without the atomicity.
			res = make([]engine.Result, len(ops))
			for i := range ops {
				if res[i], err = s.eng.Apply(s.ctx, ops[i], engine.WriteOptions{}); err != nil {
					break
				}
			}
		}
		if err != nil {
			c.writeError(engineError(err))
			clearOps(ops)
			return
		}
	}
	cmd.done(c, args, res)
	clearOps(ops)
}

// clearOps drops references to command buffers held in the scratch ops
// (only ops[:len] can hold any: the rest were cleared after earlier use).
func clearOps(ops []engine.Op) {
	clear(ops)
}

func prepIncr(delta int64) func(*client, [][]byte, []engine.Op) ([]engine.Op, string, bool) {
	return func(c *client, args [][]byte, ops []engine.Op) ([]engine.Op, string, bool) {
		return append(ops, engine.Op{Type: engine.OpAdd, ID: str(args[1]), Delta: delta}), "", true
	}
}

func prepIncrBy(neg bool) func(*client, [][]byte, []engine.Op) ([]engine.Op, string, bool) {
	return func(c *client, args [][]byte, ops []engine.Op) ([]engine.Op, string, bool) {
		d, ok := parseInt(args[2])
		if !ok {
			return ops, errNotInteger, true
		}
		if neg {
			if d == math.MinInt64 {
				return ops, errDecrOverflow, true
			}
			d = -d
		}
		return append(ops, engine.Op{Type: engine.OpAdd, ID: str(args[1]), Delta: d}), "", true
	}
}

func doneValue(c *client, args [][]byte, res []engine.Result) { c.writeInt(res[0].Value) }

// SET key value [NX|XX] [EX s|PX ms|EXAT t|PXAT t|KEEPTTL]
func prepSet(c *client, args [][]byte, ops []engine.Op) ([]engine.Op, string, bool) {
	op := engine.Op{Type: engine.OpSet, ID: str(args[1])}
	haveExp := false
	for i := 3; i < len(args); i++ {
		a := args[i]
		switch {
		case eqFold(a, "nx") && op.SetMode != engine.SetIfExists:
			op.SetMode = engine.SetIfAbsent
		case eqFold(a, "xx") && op.SetMode != engine.SetIfAbsent:
			op.SetMode = engine.SetIfExists
		case eqFold(a, "keepttl") && !haveExp:
			op.KeepTTL = true
		case (eqFold(a, "ex") || eqFold(a, "px") || eqFold(a, "exat") || eqFold(a, "pxat")) && !haveExp && !op.KeepTTL && i+1 < len(args):
			n, ok := parseInt(args[i+1])
			if !ok {
				return ops, errNotInteger, true
			}
			ttl, ok := expireTTL(a, n)
			if !ok {
				return ops, "ERR invalid expire time in 'set' command", true
			}
			op.TTL = ttl
			haveExp = true
			i++
		case eqFold(a, "get"):
			return ops, "ERR the GET option of SET is not supported", true
		default:
			return ops, errSyntax, true
		}
	}
	v, ok := parseInt(args[2])
	if !ok {
		return ops, errNotInteger, true
	}
	op.Value = v
	ops = append(ops, op)
	if op.TTL == pastTTL && op.SetMode != engine.SetIfAbsent {
		// EXAT/PXAT in the past: like Redis, the key is gone at once.
		// (With NX the key is only created if it did not exist, and then
		// expires within the engine's clock tick.)
		ops = append(ops, engine.Op{Type: engine.OpExpire, ID: op.ID, TTL: -1})
	}
	return ops, "", true
}

// pastTTL is the TTL given to a SET whose EXAT/PXAT is already past.
const pastTTL = time.Nanosecond

// expireTTL turns the argument of EX, PX, EXAT or PXAT into a TTL. It
// fails where Redis answers "invalid expire time": a non-positive value,
// or one too large (counterd's TTLs are time.Durations, up to ~292 years).
// A time in the past gives pastTTL.
func expireTTL(unit []byte, n int64) (time.Duration, bool) {
	if n <= 0 {
		return 0, false
	}
	switch {
	case eqFold(unit, "ex"):
		if n > math.MaxInt64/int64(time.Second) {
			return 0, false
		}
		return time.Duration(n) * time.Second, true
	case eqFold(unit, "px"):
		if n > math.MaxInt64/int64(time.Millisecond) {
			return 0, false
		}
		return time.Duration(n) * time.Millisecond, true
	}
	var at time.Time
	if eqFold(unit, "exat") {
		if n > math.MaxInt64/int64(time.Second) {
			return 0, false
		}
		at = time.Unix(n, 0)
	} else {
		if n > math.MaxInt64/int64(time.Millisecond) {
			return 0, false
		}
		at = time.UnixMilli(n)
	}
	d := time.Until(at)
	if d <= 0 {
		d = pastTTL
	}
	return d, true
}

func doneSet(c *client, args [][]byte, res []engine.Result) {
	if !res[0].Changed {
		c.writeNull()
		return
	}
	c.writeOK()
}

// SETNX key value
func prepSetNX(c *client, args [][]byte, ops []engine.Op) ([]engine.Op, string, bool) {
	v, ok := parseInt(args[2])
	if !ok {
		return ops, errNotInteger, true
	}
	return append(ops, engine.Op{Type: engine.OpSet, ID: str(args[1]), Value: v, SetMode: engine.SetIfAbsent}), "", true
}

func doneChanged(c *client, args [][]byte, res []engine.Result) {
	if res[0].Changed {
		c.writeInt(1)
	} else {
		c.writeInt(0)
	}
}

// MSET key value [key value ...]
func prepMSet(c *client, args [][]byte, ops []engine.Op) ([]engine.Op, string, bool) {
	if len(args)%2 != 1 {
		return ops, "ERR wrong number of arguments for 'mset' command", true
	}
	for i := 1; i < len(args); i += 2 {
		v, ok := parseInt(args[i+1])
		if !ok {
			return ops, errNotInteger, true
		}
		ops = append(ops, engine.Op{Type: engine.OpSet, ID: str(args[i]), Value: v})
	}
	return ops, "", true
}

func doneOK(c *client, args [][]byte, res []engine.Result) { c.writeOK() }

// DEL key [key ...]. Keys that are not valid counter ids cannot exist and
// count as not deleted.
func prepDel(c *client, args [][]byte, ops []engine.Op) ([]engine.Op, string, bool) {
	for _, k := range args[1:] {
		id := str(k)
		if engine.ValidateID(id) != nil {
			continue
		}
		ops = append(ops, engine.Op{Type: engine.OpDelete, ID: id})
	}
	return ops, "", true
}

func doneCount(c *client, args [][]byte, res []engine.Result) {
	n := 0
	for i := range res {
		if res[i].Changed {
			n++
		}
	}
	c.writeInt(int64(n))
}

// EXPIRE key seconds [NX|XX|GT|LT], PEXPIRE key ms [...]
func prepExpire(unit time.Duration, name string) func(*client, [][]byte, []engine.Op) ([]engine.Op, string, bool) {
	return func(c *client, args [][]byte, ops []engine.Op) ([]engine.Op, string, bool) {
		ttl, e := parseExpire(args[2], unit, name)
		if e != "" {
			return ops, e, true
		}
		if len(args) > 3 {
			return ops, "", false // conditional: needs a read
		}
		return append(ops, engine.Op{Type: engine.OpExpire, ID: str(args[1]), TTL: ttl}), "", true
	}
}

// parseExpire parses an EXPIRE argument; a non-positive one gives a
// negative TTL, which deletes the key (like Redis).
func parseExpire(b []byte, unit time.Duration, name string) (time.Duration, string) {
	n, ok := parseInt(b)
	if !ok {
		return 0, errNotInteger
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
		ttl, e := parseExpire(args[2], unit, cmd.name)
		if e != "" {
			c.writeError(e)
			return
		}
		var nx, xx, gt, lt bool
		for _, a := range args[3:] {
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
		id := str(args[1])
		cur, has, exists, err := s.eng.TTL(s.ctx, id)
		if err != nil {
			c.writeError(engineError(err))
			return
		}
		if !exists {
			c.writeInt(0)
			return
		}
		// A key without TTL counts as an infinite TTL for GT and LT.
		apply := true
		switch {
		case nx:
			apply = !has
		case xx && !has:
			apply = false
		case gt:
			apply = has && ttl > cur
		case lt:
			apply = !has || ttl < cur
		}
		if !apply {
			c.writeInt(0)
			return
		}
		r, err := s.eng.Apply(s.ctx, engine.Op{Type: engine.OpExpire, ID: id, TTL: ttl}, engine.WriteOptions{})
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
func prepPersist(c *client, args [][]byte, ops []engine.Op) ([]engine.Op, string, bool) {
	return append(ops, engine.Op{Type: engine.OpExpire, ID: str(args[1]), TTL: 0}), "", true
}

// HINCRBY key field increment
func prepHIncrBy(c *client, args [][]byte, ops []engine.Op) ([]engine.Op, string, bool) {
	d, ok := parseInt(args[3])
	if !ok {
		return ops, errNotInteger, true
	}
	// The field name is copied: the hash keeps it.
	return append(ops, engine.Op{Type: engine.OpHAdd, ID: str(args[1]),
		Fields: []counter.FieldDelta{{Name: string(args[2]), Delta: d}}}), "", true
}

func doneHIncrBy(c *client, args [][]byte, res []engine.Result) {
	if len(res[0].Fields) == 0 {
		c.writeError("ERR internal error: no field in result")
		return
	}
	c.writeInt(res[0].Fields[0].Value)
}

// HDEL key field [field ...], split in ops of at most engine.MaxItems
// fields (applied atomically together).
func prepHDel(c *client, args [][]byte, ops []engine.Op) ([]engine.Op, string, bool) {
	id := str(args[1])
	names := args[2:]
	for len(names) > 0 {
		n := min(len(names), engine.MaxItems)
		ss := make([]string, n)
		for i := range ss {
			ss[i] = str(names[i])
		}
		ops = append(ops, engine.Op{Type: engine.OpHDel, ID: id, Names: ss})
		names = names[n:]
	}
	return ops, "", true
}

func doneSumValue(c *client, args [][]byte, res []engine.Result) {
	var n int64
	for i := range res {
		n += res[i].Value
	}
	c.writeInt(n)
}

// PFADD key [element ...], split in ops of at most engine.MaxItems items.
func prepPFAdd(c *client, args [][]byte, ops []engine.Op) ([]engine.Op, string, bool) {
	id := str(args[1])
	items := args[2:]
	for {
		n := min(len(items), engine.MaxItems)
		ops = append(ops, engine.Op{Type: engine.OpPFAdd, ID: id, Items: items[:n:n]})
		items = items[n:]
		if len(items) == 0 {
			return ops, "", true
		}
	}
}

func doneAnyChanged(c *client, args [][]byte, res []engine.Result) {
	for i := range res {
		if res[i].Changed {
			c.writeInt(1)
			return
		}
	}
	c.writeInt(0)
}

// PFMERGE destkey [sourcekey ...]
func prepPFMerge(c *client, args [][]byte, ops []engine.Op) ([]engine.Op, string, bool) {
	srcs := make([]string, 0, len(args)-2)
	for _, a := range args[2:] {
		srcs = append(srcs, str(a))
	}
	return append(ops, engine.Op{Type: engine.OpPFMerge, ID: str(args[1]), Sources: srcs}), "", true
}

// ---- reads ----

// GET key: the value of an additive counter (sum for sharded, pn and
// window counters); WRONGTYPE for hashes and hlls.
func cmdGet(s *Server, c *client, args [][]byte) {
	v, err := s.eng.Get(s.ctx, str(args[1]))
	if err != nil {
		c.writeError(engineError(err))
		return
	}
	switch {
	case !v.Exists:
		c.writeNull()
	case v.Kind == engine.KindHash || v.Kind == engine.KindHLL:
		c.writeError(errWrongType)
	default:
		c.writeBulkInt(v.Value)
	}
}

// MGET key [key ...]: nil for missing keys, invalid ids and keys that do
// not hold a plain value (like Redis for non-string types).
func cmdMGet(s *Server, c *client, args [][]byte) {
	c.writeArray(len(args) - 1)
	for _, k := range args[1:] {
		v, err := s.eng.Get(s.ctx, str(k))
		if err != nil || !v.Exists || v.Kind == engine.KindHash || v.Kind == engine.KindHLL {
			c.writeNull()
			continue
		}
		c.writeBulkInt(v.Value)
	}
}

// EXISTS key [key ...]
func cmdExists(s *Server, c *client, args [][]byte) {
	var n int64
	for _, k := range args[1:] {
		_, _, ok, err := s.eng.TTL(s.ctx, str(k))
		if err != nil {
			c.writeError(engineError(err))
			return
		}
		if ok {
			n++
		}
	}
	c.writeInt(n)
}

// TYPE key: "hash" for hashes, "string" for every other kind, "none".
func cmdType(s *Server, c *client, args [][]byte) {
	id := str(args[1])
	if engine.ValidateID(id) != nil {
		c.writeStatus("none")
		return
	}
	v, err := s.eng.Get(s.ctx, id)
	switch {
	case err != nil:
		c.writeError(engineError(err))
	case !v.Exists:
		c.writeStatus("none")
	case v.Kind == engine.KindHash:
		c.writeStatus("hash")
	default:
		c.writeStatus("string")
	}
}

func typeName(k engine.Kind) string {
	if k == engine.KindHash {
		return "hash"
	}
	return "string"
}

// TTL key, PTTL key: -2 missing, -1 no TTL.
func cmdTTL(unit time.Duration) func(s *Server, c *client, args [][]byte) {
	return func(s *Server, c *client, args [][]byte) {
		ttl, has, exists, err := s.eng.TTL(s.ctx, str(args[1]))
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
		ttl, has, exists, err := s.eng.TTL(s.ctx, str(args[1]))
		switch {
		case err != nil:
			c.writeError(engineError(err))
		case !exists:
			c.writeInt(-2)
		case !has:
			c.writeInt(-1)
		default:
			at := time.Now().Add(ttl)
			if unit == time.Second {
				c.writeInt(at.Unix())
			} else {
				c.writeInt(at.UnixMilli())
			}
		}
	}
}

// hashView reads a hash; ok is false after a reply was written (error).
// A missing key reads as an empty hash.
func hashView(s *Server, c *client, key []byte) ([]counter.Field, bool) {
	v, err := s.eng.Get(s.ctx, str(key))
	if err != nil {
		c.writeError(engineError(err))
		return nil, false
	}
	if !v.Exists {
		return nil, true
	}
	if v.Kind != engine.KindHash {
		c.writeError(errWrongType)
		return nil, false
	}
	return v.Fields, true
}

// HGET key field
func cmdHGet(s *Server, c *client, args [][]byte) {
	v, ok, err := s.eng.HGet(s.ctx, str(args[1]), str(args[2]))
	switch {
	case err != nil:
		c.writeError(engineError(err))
	case !ok:
		c.writeNull()
	default:
		c.writeBulkInt(v)
	}
}

// HEXISTS key field
func cmdHExists(s *Server, c *client, args [][]byte) {
	_, ok, err := s.eng.HGet(s.ctx, str(args[1]), str(args[2]))
	switch {
	case err != nil:
		c.writeError(engineError(err))
	case ok:
		c.writeInt(1)
	default:
		c.writeInt(0)
	}
}

// findField finds name in fields, which the engine sorts by name.
func findField(fields []counter.Field, name []byte) (int64, bool) {
	lo, hi := 0, len(fields)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if fields[m].Name < str(name) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(fields) && fields[lo].Name == str(name) {
		return fields[lo].Value, true
	}
	return 0, false
}

// HMGET key field [field ...]
func cmdHMGet(s *Server, c *client, args [][]byte) {
	fields, ok := hashView(s, c, args[1])
	if !ok {
		return
	}
	c.writeArray(len(args) - 2)
	for _, f := range args[2:] {
		if v, ok := findField(fields, f); ok {
			c.writeBulkInt(v)
		} else {
			c.writeNull()
		}
	}
}

// HGETALL key: a map in RESP3, a flat array in RESP2.
func cmdHGetAll(s *Server, c *client, args [][]byte) {
	fields, ok := hashView(s, c, args[1])
	if !ok {
		return
	}
	c.writeMap(len(fields))
	for _, f := range fields {
		c.writeBulkString(f.Name)
		c.writeBulkInt(f.Value)
	}
}

// HKEYS key
func cmdHKeys(s *Server, c *client, args [][]byte) {
	fields, ok := hashView(s, c, args[1])
	if !ok {
		return
	}
	c.writeArray(len(fields))
	for _, f := range fields {
		c.writeBulkString(f.Name)
	}
}

// HVALS key
func cmdHVals(s *Server, c *client, args [][]byte) {
	fields, ok := hashView(s, c, args[1])
	if !ok {
		return
	}
	c.writeArray(len(fields))
	for _, f := range fields {
		c.writeBulkInt(f.Value)
	}
}

// HLEN key
func cmdHLen(s *Server, c *client, args [][]byte) {
	fields, ok := hashView(s, c, args[1])
	if !ok {
		return
	}
	c.writeInt(int64(len(fields)))
}

// PFCOUNT key [key ...]: the estimate of the union.
func cmdPFCount(s *Server, c *client, args [][]byte) {
	ids := make([]string, len(args)-1)
	for i, a := range args[1:] {
		ids[i] = str(a)
	}
	n, _, err := s.eng.PFCount(s.ctx, ids...)
	if err != nil {
		c.writeError(engineError(err))
		return
	}
	c.writeInt(int64(n))
}

// SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]
func cmdScan(s *Server, c *client, args [][]byte) {
	cursor, ok := parseUint(args[1])
	if !ok {
		c.writeError(errInvalidCur)
		return
	}
	match, count, typ := "", 10, ""
	for i := 2; i < len(args); i += 2 {
		if i+1 >= len(args) {
			c.writeError(errSyntax)
			return
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
				return
			}
			if n < 1 {
				c.writeError(errSyntax)
				return
			}
			count = int(min(n, 1<<20))
		case eqFold(a, "type"):
			typ = strings.ToLower(string(args[i+1]))
		default:
			c.writeError(errSyntax)
			return
		}
	}
	ids, next, err := s.eng.Scan(s.ctx, cursor, match, count)
	if err != nil {
		c.writeError(engineError(err))
		return
	}
	if typ != "" {
		kept := ids[:0]
		for _, id := range ids {
			if v, err := s.eng.Get(s.ctx, id); err == nil && v.Exists && typeName(v.Kind) == typ {
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
		ids, next, err := s.eng.Scan(s.ctx, cursor, match, 1000)
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
	n, err := s.eng.Len(s.ctx)
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
