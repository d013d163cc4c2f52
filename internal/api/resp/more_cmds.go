package resp

// The rest of Redis's counter-family commands: INCRBYFLOAT, SETEX,
// PSETEX, GETEX, HSET, HSETNX, HINCRBYFLOAT. Each answers, and fails, as Redis 7.0
// does, in Redis's order of checks (compat_test.go runs the same command
// sequences against counterd and a real redis-server).

import (
	"math"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
)

// moreCommands returns the entries of this file for the command table.
func moreCommands() []*command {
	const (
		w = flagWrite
		f = flagFast
	)
	hset := &command{name: "hset", arity: -4, flags: w | f, first: 1, last: 1, step: 1,
		doc: &cmdDoc{"hash", "Creates or modifies the value (integer or float) of fields in a hash.", "2.0.0", "O(1) for each field/value pair added, so O(N) to add N field/value pairs when the command is called with multiple field/value pairs.",
			[]argDoc{aKey("key"), aMany(aBlock("data", aStr("field"), aInt("value")))}},
		prep: prepHSet(contract.SetAlways), done: doneValue}
	hsetnx := &command{name: "hsetnx", arity: 4, flags: w | f, first: 1, last: 1, step: 1,
		doc:  &cmdDoc{"hash", "Sets the value (integer or float) of a field in a hash only when the field doesn't exist.", "2.0.0", "O(1)", []argDoc{aKey("key"), aStr("field"), aInt("value")}},
		prep: prepHSet(contract.SetIfAbsent), done: doneValue}
	for _, cmd := range []*command{hset, hsetnx} {
		cmd := cmd
		cmd.fn = func(s *Server, c *client, args [][]byte) { hsetCmd(s, c, cmd, args) }
	}
	return []*command{
		{name: "incrbyfloat", arity: 3, flags: w | f, first: 1, last: 1, step: 1,
			doc:  &cmdDoc{"string", "Increment the floating point value of a key by a number. Uses 0 as initial value if the key doesn't exist.", "2.6.0", "O(1)", []argDoc{aKey("key"), {name: "increment", typ: "double"}}},
			prep: prepIncrByFloat, done: doneFloat},
		{name: "setex", arity: 4, flags: w, first: 1, last: 1, step: 1,
			doc:  &cmdDoc{"string", "Sets the integer value and expiration time of a key. Creates the key if it doesn't exist.", "2.0.0", "O(1)", []argDoc{aKey("key"), aInt("seconds"), aInt("value")}},
			prep: prepSetEx("ex", "setex"), done: doneOK},
		{name: "psetex", arity: 4, flags: w, first: 1, last: 1, step: 1,
			doc:  &cmdDoc{"string", "Sets both the integer value and expiration time in milliseconds of a key. The key is created if it doesn't exist.", "2.6.0", "O(1)", []argDoc{aKey("key"), aInt("milliseconds"), aInt("value")}},
			prep: prepSetEx("px", "psetex"), done: doneOK},
		{name: "getex", arity: -2, flags: w | f, first: 1, last: 1, step: 1,
			doc: &cmdDoc{"string", "Returns the value of a key after setting its expiration time.", "6.2.0", "O(1)", []argDoc{aKey("key"),
				aOpt(aOneOf("expiration", aTokInt("EX", "seconds"), aTokInt("PX", "milliseconds"),
					argDoc{name: "unix-time-seconds", typ: "unix-time", token: "EXAT"},
					argDoc{name: "unix-time-milliseconds", typ: "unix-time", token: "PXAT"}, aTok("PERSIST")))}},
			fn: cmdGetEx},
		hset, hsetnx,
		{name: "hincrbyfloat", arity: 4, flags: w | f, first: 1, last: 1, step: 1,
			doc:  &cmdDoc{"hash", "Increments the floating point value of a field by a number. Uses 0 as initial value if the field doesn't exist.", "2.6.0", "O(1)", []argDoc{aKey("key"), aStr("field"), {name: "increment", typ: "double"}}},
			prep: prepHIncrByFloat, done: doneHIncrByFloat},
	}
}

// INCRBYFLOAT key increment. The engine checks the kind before the
// increment (Redis's order); the text travels unparsed so that it is
// added exactly as Redis adds it.
func prepIncrByFloat(c *client, args [][]byte, ops []contract.Op) ([]contract.Op, string, bool) {
	return append(ops, contract.Op{Type: contract.OpAdd, ID: str(args[1]), Kind: contract.KindFloat, Float: string(args[2])}), "", true
}

func doneFloat(c *client, args [][]byte, res []contract.Result) { c.writeBulkString(res[0].Float) }

// SETEX key seconds value, PSETEX key milliseconds value: the expire time
// is checked first, then the value (as Redis does).
func prepSetEx(unit, name string) func(*client, [][]byte, []contract.Op) ([]contract.Op, string, bool) {
	return func(c *client, args [][]byte, ops []contract.Op) ([]contract.Op, string, bool) {
		n, ok := parseInt(args[2])
		if !ok {
			return ops, errNotInteger, true
		}
		ttl, ok := expireTTL([]byte(unit), n)
		if !ok {
			return ops, "ERR invalid expire time in '" + name + "' command", true
		}
		op := contract.Op{Type: contract.OpSet, ID: str(args[1]), TTL: ttl}
		if !setValue(&op, args[3]) {
			return ops, errNotInteger, true
		}
		return append(ops, op), "", true
	}
}

// getexOpt is what GETEX was asked to do to the TTL.
type getexOpt struct {
	unit    string // "ex", "px", "exat", "pxat"; "" for none
	arg     []byte
	persist bool
}

// parseGetEx reads GETEX's options like Redis's
// parseExtendedStringArgumentsOrReply: one of EX, PX, EXAT, PXAT (the same
// one may repeat, the last wins) or PERSIST; anything else is a syntax
// error.
func parseGetEx(args [][]byte) (getexOpt, bool) {
	var o getexOpt
	for i := 2; i < len(args); i++ {
		a := args[i]
		switch {
		case eqFold(a, "persist") && o.unit == "":
			o.persist = true
		case !o.persist && i+1 < len(args) && (eqFold(a, "ex") || eqFold(a, "px") || eqFold(a, "exat") || eqFold(a, "pxat")):
			u := string(lowerASCII(a))
			if o.unit != "" && o.unit != u {
				return o, false
			}
			o.unit, o.arg = u, args[i+1]
			i++
		default:
			return o, false
		}
	}
	return o, true
}

// mustInt is parseInt of an argument already checked.
func mustInt(b []byte) int64 {
	n, _ := parseInt(b)
	return n
}

func lowerASCII(b []byte) []byte {
	out := make([]byte, len(b))
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		out[i] = c
	}
	return out
}

// getexTTL checks GETEX's expire argument like Redis and returns the TTL
// of EX and PX (EXAT and PXAT become the op's ExpireAt), or Redis's error.
func getexTTL(o getexOpt, now time.Time) (time.Duration, string) {
	n, ok := parseInt(o.arg)
	if !ok {
		return 0, errNotInteger
	}
	const invalid = "ERR invalid expire time in 'getex' command"
	if n <= 0 || ((o.unit == "ex" || o.unit == "exat") && n > math.MaxInt64/1000) {
		return 0, invalid
	}
	ms := n
	if o.unit == "ex" || o.unit == "exat" {
		ms *= 1000
	}
	if o.unit == "ex" || o.unit == "px" {
		if ms > math.MaxInt64-now.UnixMilli() {
			return 0, invalid
		}
		ttl, ok := expireTTL([]byte(o.unit), n)
		if !ok { // beyond what a time.Duration holds
			return 0, invalid
		}
		return ttl, ""
	}
	if _, ok := expireTTL([]byte(o.unit), n); !ok { // beyond what a time.Duration holds
		return 0, invalid
	}
	return 0, ""
}

// GETEX key [EX s|PX ms|EXAT t|PXAT t|PERSIST]: the value, then the TTL
// change. The read and the write are two steps (like EXPIRE's options).
func cmdGetEx(s *Server, c *client, args [][]byte) {
	o, ok := parseGetEx(args)
	if !ok {
		c.writeError(errSyntax)
		return
	}
	id := str(args[1])
	v, ok := getString(s, c, id)
	if !ok {
		return
	}
	op := contract.Op{Type: contract.OpExpire, ID: id}
	switch {
	case o.unit != "":
		ttl, e := getexTTL(o, s.eng.Now())
		if e != "" {
			c.writeError(e)
			return
		}
		op.TTL = ttl
		if at, abs := expireAt([]byte(o.unit), mustInt(o.arg)); abs {
			op.ExpireAt = at // at or before now: deleted, as in Redis
		}
	case !o.persist:
		writeStringValue(c, &v)
		return
	}
	if _, err := s.eng.Apply(c.ctx, op, contract.WriteOptions{}); err != nil {
		c.writeError(engineError(err))
		return
	}
	writeStringValue(c, &v)
}

// HSET key field value [field value ...], HSETNX key field value: values
// are int64s or floats in the canonical text INCRBYFLOAT writes (so that
// HGET answers them unchanged). Any other value is Redis's "not an
// integer" error, after the WRONGTYPE check Redis makes first (hsetCmd).
func prepHSet(mode contract.SetMode) func(*client, [][]byte, []contract.Op) ([]contract.Op, string, bool) {
	return func(c *client, args [][]byte, ops []contract.Op) ([]contract.Op, string, bool) {
		if len(args)%2 != 0 {
			return ops, "ERR wrong number of arguments for '" + string(lowerASCII(args[0])) + "' command", true
		}
		fs := make([]counter.FieldDelta, 0, (len(args)-2)/2)
		for i := 2; i < len(args); i += 2 {
			// Field names and texts are copied: the hash keeps them.
			f := counter.FieldDelta{Name: string(args[i])}
			v, ok := parseInt(args[i+1])
			switch {
			case ok:
				f.Delta = v
			case counter.CanonicalFloat(str(args[i+1])):
				f.Float = string(args[i+1])
			default:
				return ops, "", false // the kind decides the error: hsetCmd
			}
			fs = append(fs, f)
		}
		return append(ops, contract.Op{Type: contract.OpHSet, ID: str(args[1]), Fields: fs, SetMode: mode}), "", true
	}
}

// hsetValue reports whether HSET can store b: an int64 or a canonical float.
func hsetValue(b []byte) bool {
	_, ok := parseInt(b)
	return ok || counter.CanonicalFloat(str(b))
}

func hsetCmd(s *Server, c *client, cmd *command, args [][]byte) {
	valid := len(args)%2 == 0 // an arity error is prep's
	for i := 3; i < len(args) && valid; i += 2 {
		valid = hsetValue(args[i])
	}
	if valid || len(args)%2 != 0 {
		s.applyOps(c, cmd, args)
		return
	}
	v, err := s.eng.Get(c.ctx, str(args[1]))
	switch {
	case err != nil:
		c.writeError(engineError(err))
	case v.Exists && v.Kind != contract.KindHash:
		c.writeError(errWrongType)
	default:
		c.writeError(errNotInteger)
	}
}
