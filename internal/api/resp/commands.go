package resp

import (
	"context"
	"errors"
	"math"
	"strings"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/quota"
)

// Redis's error replies, word for word.
const (
	errNotInteger   = "ERR value is not an integer or out of range"
	errOverflow     = "ERR increment or decrement would overflow"
	errWrongType    = "WRONGTYPE Operation against a key holding the wrong kind of value"
	errSyntax       = "ERR syntax error"
	errInvalidCur   = "ERR invalid cursor"
	errDecrOverflow = "ERR decrement would overflow"
	errNotFloat     = "ERR value is not a valid float"
	errFloatRange   = "ERR increment would produce NaN or Infinity"
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
	prep func(c *client, args [][]byte, ops []contract.Op) (out []contract.Op, errReply string, batchable bool)
	done func(c *client, args [][]byte, res []contract.Result)

	gate uint8 // scripting gate mode (script.go)

	// wrongKind, when set, words an engine ErrWrongKind for this command
	// as Redis would, by the kinds of its keys (INCR of an hll, PFADD of
	// a counter); nil: WRONGTYPE.
	wrongKind func(s *Server, c *client, args [][]byte) string

	stats cmdStats             // INFO commandstats (stats.go)
	subs  map[string]*cmdStats // a container's subcommands' figures

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

// A write the node cannot make durable (full or failing disk), worded
// like Redis's MISCONF when it cannot persist: the reason goes between.
const (
	errMisconf    = "MISCONF counterd is currently unable to persist to disk ("
	errMisconfEnd = "). Commands that may modify the data set are disabled until it can; reads are served. Please check the counterd logs for details."
)

// engineError words an engine error as Redis would.
func engineError(err error) string {
	switch {
	case errors.Is(err, contract.ErrWrongKind):
		return errWrongType
	case errors.Is(err, contract.ErrOverflow):
		return errOverflow
	case errors.Is(err, contract.ErrNotFloat):
		return errNotFloat
	case errors.Is(err, contract.ErrFloatRange):
		return errFloatRange
	case errors.Is(err, contract.ErrNotInteger):
		if strings.Contains(err.Error(), contract.HashNotInteger) { // HINCRBY of a float field
			return "ERR " + contract.HashNotInteger
		}
		return errNotInteger
	case errors.Is(err, contract.ErrInvalidID):
		return "ERR invalid key: " + errDetail(err, contract.ErrInvalidID)
	case errors.Is(err, contract.ErrVersionConflict):
		return "ERR version conflict: " + errDetail(err, contract.ErrVersionConflict)
	case errors.Is(err, engine.ErrTooLate), errors.Is(err, engine.ErrTooEarly):
		return eventTimeError(err) // ERR too_late: / ERR too_early:
	case errors.Is(err, contract.ErrInvalidArgument):
		return "ERR " + errDetail(err, contract.ErrInvalidArgument)
	case errors.Is(err, contract.ErrBatchTooLarge):
		return "ERR transaction too large: " + errDetail(err, contract.ErrBatchTooLarge)
	case errors.Is(err, contract.ErrNotFound):
		return "ERR no such key"
	case errors.Is(err, contract.ErrClosed), errors.Is(err, context.Canceled):
		return "ERR server is shutting down"
	case errors.Is(err, contract.ErrUnavailable):
		return "TRYAGAIN " + errDetail(err, contract.ErrUnavailable)
	case errors.Is(err, contract.ErrQuotaExceeded):
		// Redis answers OOM when a write would pass maxmemory.
		return "OOM " + quota.Message(err)
	case errors.Is(err, contract.ErrInsufficientStorage):
		return errMisconf + errDetail(err, contract.ErrInsufficientStorage) + errMisconfEnd
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
	var res []contract.Result
	switch len(ops) {
	case 0:
	case 1:
		r, err := s.eng.Apply(c.ctx, ops[0], contract.WriteOptions{})
		if err != nil {
			c.writeError(s.opError(c, cmd, args, err))
			clearOps(ops)
			return
		}
		c.res1[0] = r
		res = c.res1[:]
	default:
		var err error
		res, err = s.eng.ApplyBatch(c.ctx, ops, contract.WriteOptions{})
		if errors.Is(err, contract.ErrBatchTooLarge) {
			// Too many keys for one atomic batch (a huge DEL): apply one
			// by one, as Redis would, without the atomicity.
			res = make([]contract.Result, len(ops))
			for i := range ops {
				if res[i], err = s.eng.Apply(c.ctx, ops[i], contract.WriteOptions{}); err != nil {
					break
				}
			}
		}
		if err != nil {
			c.writeError(s.opError(c, cmd, args, err))
			clearOps(ops)
			return
		}
	}
	cmd.done(c, args, res)
	clearOps(ops)
}

// opError words err, the failure of cmd's engine ops.
func (s *Server) opError(c *client, cmd *command, args [][]byte, err error) string {
	if cmd.wrongKind != nil && errors.Is(err, contract.ErrWrongKind) {
		return cmd.wrongKind(s, c, args)
	}
	return engineError(err)
}

// clearOps drops references to command buffers held in the scratch ops
// (only ops[:len] can hold any: the rest were cleared after earlier use).
func clearOps(ops []contract.Op) {
	clear(ops)
}

// doneChanged replies 1 when the op changed its counter, else 0 (SETNX,
// EXPIRE, PERSIST).
func doneChanged(c *client, args [][]byte, res []contract.Result) {
	if res[0].Changed {
		c.writeInt(1)
	} else {
		c.writeInt(0)
	}
}

// doneOK replies OK (MSET, PFMERGE).
func doneOK(c *client, args [][]byte, res []contract.Result) { c.writeOK() }
