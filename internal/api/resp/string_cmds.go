package resp

// String commands: counters read and written as Redis strings (INCR, SET,
// GET, ...).

import (
	"math"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
)

func prepIncr(delta int64) func(*client, [][]byte, []contract.Op) ([]contract.Op, string, bool) {
	return func(c *client, args [][]byte, ops []contract.Op) ([]contract.Op, string, bool) {
		return append(ops, contract.Op{Type: contract.OpAdd, ID: str(args[1]), Delta: delta}), "", true
	}
}

func prepIncrBy(neg bool) func(*client, [][]byte, []contract.Op) ([]contract.Op, string, bool) {
	return func(c *client, args [][]byte, ops []contract.Op) ([]contract.Op, string, bool) {
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
		return append(ops, contract.Op{Type: contract.OpAdd, ID: str(args[1]), Delta: d}), "", true
	}
}

func doneValue(c *client, args [][]byte, res []contract.Result) { c.writeInt(res[0].Value) }

// SET key value [NX|XX] [EX s|PX ms|EXAT t|PXAT t|KEEPTTL]
func prepSet(c *client, args [][]byte, ops []contract.Op) ([]contract.Op, string, bool) {
	op := contract.Op{Type: contract.OpSet, ID: str(args[1])}
	haveExp := false
	for i := 3; i < len(args); i++ {
		a := args[i]
		switch {
		case eqFold(a, "nx") && op.SetMode != contract.SetIfExists:
			op.SetMode = contract.SetIfAbsent
		case eqFold(a, "xx") && op.SetMode != contract.SetIfAbsent:
			op.SetMode = contract.SetIfExists
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
			if at, abs := expireAt(a, n); abs && ttl != pastTTL {
				op.TTL, op.ExpireAt = 0, at // exact, for EXPIRETIME
			}
			haveExp = true
			i++
		case eqFold(a, "get"):
			return ops, "", false // reads first: cmdSet (idiom_cmds.go)
		default:
			return ops, errSyntax, true
		}
	}
	if !setValue(&op, args[2]) {
		return ops, errNotInteger, true
	}
	ops = append(ops, op)
	if op.TTL == pastTTL && op.SetMode != contract.SetIfAbsent {
		// EXAT/PXAT in the past: like Redis, the key is gone at once.
		// (With NX the key is only created if it did not exist, and then
		// expires within the engine's clock tick.)
		ops = append(ops, contract.Op{Type: contract.OpExpire, ID: op.ID, TTL: -1})
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

// expireAt is the unix ns of EXAT or PXAT n (validated by expireTTL), and
// false for the relative units.
func expireAt(unit []byte, n int64) (int64, bool) {
	switch {
	case eqFold(unit, "exat"):
		return n * int64(time.Second), true
	case eqFold(unit, "pxat"):
		return n * int64(time.Millisecond), true
	}
	return 0, false
}

func doneSet(c *client, args [][]byte, res []contract.Result) {
	if !res[0].Changed {
		c.writeNull()
		return
	}
	c.writeOK()
}

// SETNX key value
func prepSetNX(c *client, args [][]byte, ops []contract.Op) ([]contract.Op, string, bool) {
	op := contract.Op{Type: contract.OpSet, ID: str(args[1]), SetMode: contract.SetIfAbsent}
	if !setValue(&op, args[2]) {
		return ops, errNotInteger, true
	}
	return append(ops, op), "", true
}

// setValue sets op's value from a SET-family argument: an int64, or a
// float in the canonical text INCRBYFLOAT writes (a float counter, whose
// GET answers that text unchanged). Anything else is false (Redis would
// store any string; counterd's values are numbers).
func setValue(op *contract.Op, b []byte) bool {
	if v, ok := parseInt(b); ok {
		op.Value = v
		return true
	}
	if counter.CanonicalFloat(str(b)) {
		op.Float = string(b)
		return true
	}
	return false
}

// MSET key value [key value ...]
func prepMSet(c *client, args [][]byte, ops []contract.Op) ([]contract.Op, string, bool) {
	if len(args)%2 != 1 {
		return ops, "ERR wrong number of arguments for 'mset' command", true
	}
	for i := 1; i < len(args); i += 2 {
		op := contract.Op{Type: contract.OpSet, ID: str(args[i])}
		if !setValue(&op, args[i+1]) {
			return ops, errNotInteger, true
		}
		ops = append(ops, op)
	}
	return ops, "", true
}

// GET key: the value of an additive counter (sum for sharded, pn and
// window counters); WRONGTYPE for hashes and hlls.
func cmdGet(s *Server, c *client, args [][]byte) {
	v, err := s.eng.Get(c.ctx, str(args[1]))
	if err != nil {
		c.writeError(engineError(err))
		return
	}
	c.lookedUp(v.Exists)
	switch {
	case !v.Exists:
		c.writeNull()
	case v.Kind == contract.KindHash || v.Kind == contract.KindHLL:
		c.writeError(errWrongType)
	default:
		writeStringValue(c, &v)
	}
}

// writeStringValue writes the value of a counter read as a Redis string:
// a float counter's text, every other kind's int64.
func writeStringValue(c *client, v *contract.View) {
	if v.Kind == contract.KindFloat {
		c.writeBulkString(v.Float)
		return
	}
	c.writeBulkInt(v.Value)
}

// MGET key [key ...]: nil for missing keys, invalid ids and keys that do
// not hold a plain value (like Redis for non-string types).
func cmdMGet(s *Server, c *client, args [][]byte) {
	c.writeArray(len(args) - 1)
	for _, k := range args[1:] {
		v, err := s.eng.Get(c.ctx, str(k))
		c.lookedUp(err == nil && v.Exists)
		if err != nil || !v.Exists || v.Kind == contract.KindHash || v.Kind == contract.KindHLL {
			c.writeNull()
			continue
		}
		writeStringValue(c, &v)
	}
}
