package resp

import "github.com/counterd/counterd/internal/tracing"

// runTraced runs a command inside a server span named after it: the
// engine calls it makes (with c.ctx) are its children. A Redis-protocol
// command carries no trace context, so each starts a trace (sampled at
// --trace-sample-ratio).
func (s *Server) runTraced(c *client, cmd *command, args [][]byte) {
	parent := c.ctx
	ctx, span := s.opts.Tracer.Start(parent, "RESP", tracing.KindServer)
	if span.Recording() {
		span.SetName("RESP " + cmd.name)
		span.SetString("db.system", "redis")
		span.SetString("db.operation.name", cmd.name)
	}
	c.ctx = ctx
	defer func() {
		c.ctx = parent
		span.End()
	}()
	s.run(c, cmd, args)
}
