package resp

import (
	"errors"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
)

// Event-time writes (docs/resp.md, "Event time"): an increment or PFADD
// that counts in the window and rollup buckets of an explicit time, so a
// backfill lands where it belongs.
const (
	IncrByAtCommandName = "counterd.incrby"
	PFAddAtCommandName  = "counterd.pfadd"
)

// eventTimeCommands returns COUNTERD.INCRBY and COUNTERD.PFADD; maxSkew
// bounds how far ahead of the clock AT may be (<= 0: the default).
func eventTimeCommands(maxSkew time.Duration) []*command {
	at := argDoc{name: "ts", typ: "string", token: "AT"}
	return []*command{
		{
			name: IncrByAtCommandName, arity: -3, flags: flagWrite | flagFast, first: 1, last: 1, step: 1,
			doc: &cmdDoc{"counterd", "Increments a counter like INCRBY; with AT (RFC 3339 text or Unix milliseconds) the increment counts in that time's window and rollup buckets.", "0.1.0", "O(1)",
				[]argDoc{aKey("key"), aInt("increment"), aOpt(at)}},
			prep: func(c *client, args [][]byte, ops []contract.Op) ([]contract.Op, string, bool) {
				d, ok := parseInt(args[2])
				if !ok {
					return ops, errNotInteger, true
				}
				op := contract.Op{Type: contract.OpAdd, ID: str(args[1]), Delta: d}
				switch {
				case len(args) == 3:
				case len(args) == 5 && eqFold(args[3], "at"):
					a, e := parseAt(args[4], maxSkew)
					if e != "" {
						return ops, e, true
					}
					op.At = a
				default:
					return ops, "ERR syntax error", true
				}
				return append(ops, op), "", true
			},
			done: doneValue,
		},
		{
			name: PFAddAtCommandName, arity: -5, flags: flagWrite | flagFast, first: 1, last: 1, step: 1,
			doc: &cmdDoc{"counterd", "Adds elements to a HyperLogLog like PFADD, counted in the hour and day sketches of the time AT (RFC 3339 text or Unix milliseconds).", "0.1.0", "O(1) to add every element.",
				[]argDoc{aKey("key"), at, aMany(aStr("element"))}},
			prep: func(c *client, args [][]byte, ops []contract.Op) ([]contract.Op, string, bool) {
				if !eqFold(args[2], "at") {
					return ops, "ERR syntax error: COUNTERD.PFADD key AT ts element [element ...]", true
				}
				a, e := parseAt(args[3], maxSkew)
				if e != "" {
					return ops, e, true
				}
				id, items := str(args[1]), args[4:]
				for len(items) > 0 {
					n := min(len(items), contract.MaxItems)
					ops = append(ops, contract.Op{Type: contract.OpPFAdd, ID: id, Items: items[:n:n], At: a})
					items = items[n:]
				}
				return ops, "", true
			},
			done: doneAnyChanged,
		},
	}
}

// parseAt parses AT's argument and checks it against the clock: the
// event time, or an error reply ("ERR invalid argument: ..." for text
// that is not a time, "ERR too_early: ..." past the skew).
func parseAt(b []byte, maxSkew time.Duration) (int64, string) {
	at, err := engine.ParseEventTime(string(b))
	if err == nil {
		err = engine.CheckEventTime(at, time.Now(), maxSkew)
	}
	if err != nil {
		return 0, eventTimeError(err)
	}
	return at, ""
}

// eventTimeError is the reply of an event time refused: "ERR too_late:
// ..." or "ERR too_early: ..." (the codes of the pipeline's dead
// letters), else "ERR invalid argument: ...".
func eventTimeError(err error) string {
	msg := errDetail(err, contract.ErrInvalidArgument)
	switch {
	case errors.Is(err, engine.ErrTooLate):
		return "ERR too_late: " + errDetail(err, engine.ErrTooLate)
	case errors.Is(err, engine.ErrTooEarly):
		return "ERR too_early: " + errDetail(err, engine.ErrTooEarly)
	}
	return "ERR invalid argument: " + msg
}
