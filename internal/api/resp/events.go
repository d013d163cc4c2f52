package resp

import (
	"context"

	"github.com/counterd/counterd/internal/auth"
)

// EventsCommandName is the RESP command of the pipeline's collector.
const EventsCommandName = "events.add"

// EventsAdder appends a batch of events (a JSON array or NDJSON) to the
// pipeline and returns how many it accepted; errors are typed by the
// pipeline (docs/pipeline.md).
type EventsAdder func(ctx context.Context, batch []byte) (accepted int, err error)

// EVENTS.ADD batch [batch ...]: appends each batch (JSON array or NDJSON)
// and replies with the number of events accepted, once the stream
// acknowledged them. A bad batch is refused whole with
// "-ERR invalid event ..." and stops the command; batches before it stay.
// Registered only when Options.Events is set.
func eventsCommand(add EventsAdder) *command {
	return &command{
		name: EventsCommandName, arity: -2, flags: flagWrite,
		doc: &cmdDoc{"counterd", "Appends batches of events (JSON array or NDJSON) to the pipeline; replies with the number accepted.", "0.1.0", "O(N) events",
			[]argDoc{aMany(aStr("batch"))}},
		fn: func(s *Server, c *client, args [][]byte) {
			n := 0
			for _, b := range args[1:] {
				k, err := add(c.authContext(c.ctx), b)
				if err != nil {
					c.writeError("ERR " + err.Error())
					return
				}
				n += k
			}
			c.writeInt(int64(n))
		},
	}
}

// Events may write any counter the rules name: with --auth it needs write
// on every namespace.
var needWriteAll = access{need: auth.Need{Perm: auth.Write, All: true}}
