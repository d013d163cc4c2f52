package resp

// HyperLogLog commands: PFADD, PFMERGE, PFCOUNT.

import (
	"github.com/counterd/counterd/internal/contract"
)

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
	if err != nil {
		c.writeError(engineError(err))
		return
	}
	c.writeInt(int64(n))
}
