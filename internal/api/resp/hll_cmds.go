package resp

// HyperLogLog commands: PFADD, PFMERGE, PFCOUNT.

import (
	"errors"

	"github.com/counterd/counterd/internal/contract"
)

// errNotHLL is Redis's answer for a string key that is not a
// HyperLogLog (a hash gets the usual WRONGTYPE).
const errNotHLL = "WRONGTYPE Key is not a valid HyperLogLog string value."

// pfWrongKind words a wrong-kind failure of PFADD, PFCOUNT or PFMERGE
// (whose keys are args[1:]) as Redis does: the first key that exists and
// is not an hll decides, a hash with WRONGTYPE's usual text, any other
// kind (a string in Redis) with errNotHLL.
func pfWrongKind(s *Server, c *client, args [][]byte) string {
	last := len(args) - 1
	if eqFold(args[0], "pfadd") || eqFold(args[0], PFAddAtCommandName) {
		last = 1
	}
	for _, k := range args[1 : last+1] {
		v, err := s.eng.Get(c.ctx, str(k))
		if err != nil || !v.Exists || v.Kind == contract.KindHLL {
			continue
		}
		if v.Kind == contract.KindHash {
			return errWrongType
		}
		return errNotHLL
	}
	return errWrongType
}

// hllAs words a wrong-kind failure of INCR and its family (answer) or of
// INCRBYFLOAT (errNotFloat) on an hll as Redis, for which a HyperLogLog
// is a string that is not a number; other kinds keep WRONGTYPE.
func hllAs(answer string) func(s *Server, c *client, args [][]byte) string {
	return func(s *Server, c *client, args [][]byte) string {
		if v, err := s.eng.Get(c.ctx, str(args[1])); err == nil && v.Exists && v.Kind == contract.KindHLL {
			return answer
		}
		return errWrongType
	}
}

// PFADD key [element ...], split in ops of at most contract.MaxItems items.
func prepPFAdd(c *client, args [][]byte, ops []contract.Op) ([]contract.Op, string, bool) {
	id := str(args[1])
	items := args[2:]
	for {
		n := min(len(items), contract.MaxItems)
		ops = append(ops, contract.Op{Type: contract.OpPFAdd, ID: id, Items: items[:n:n]})
		items = items[n:]
		if len(items) == 0 {
			return ops, "", true
		}
	}
}

func doneAnyChanged(c *client, args [][]byte, res []contract.Result) {
	for i := range res {
		if res[i].Changed {
			c.writeInt(1)
			return
		}
	}
	c.writeInt(0)
}

// PFMERGE destkey [sourcekey ...]
func prepPFMerge(c *client, args [][]byte, ops []contract.Op) ([]contract.Op, string, bool) {
	srcs := make([]string, 0, len(args)-2)
	for _, a := range args[2:] {
		srcs = append(srcs, str(a))
	}
	return append(ops, contract.Op{Type: contract.OpPFMerge, ID: str(args[1]), Sources: srcs}), "", true
}

// PFCOUNT key [key ...]: the estimate of the union.
func cmdPFCount(s *Server, c *client, args [][]byte) {
	ids := make([]string, len(args)-1)
	for i, a := range args[1:] {
		ids[i] = str(a)
	}
	n, _, err := s.eng.PFCount(c.ctx, ids...)
	if errors.Is(err, contract.ErrWrongKind) {
		c.writeError(pfWrongKind(s, c, args))
		return
	}
	if err != nil {
		c.writeError(engineError(err))
		return
	}
	c.writeInt(int64(n))
}
