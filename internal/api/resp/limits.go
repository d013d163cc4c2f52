package resp

import (
	"bytes"
	"errors"
)

// Limits on what clients may make a connection hold or do.
//
// Cross-protocol attacks: a web page can make a browser POST to
// http://127.0.0.1:6380/ with a body the page chooses. Like Redis, a
// connection whose commands look like HTTP (a "POST" or "Host:" command,
// or a first line "<METHOD> <target> HTTP/x") is closed before anything in
// it runs, with "Possible SECURITY ATTACK detected" in the log.
//
// Query buffers: each connection's read buffer is at most MaxCommandBytes
// (one command), and all buffers larger than the normal 64 KiB together at
// most MaxQueryBufferTotal, so N connections each sending half of a huge
// command cannot hold N times MaxCommandBytes. A connection that would go
// over the shared budget is answered an error and closed.

// errQueryBudget ends a connection whose read buffer would exceed the
// shared query-buffer budget.
var errQueryBudget = errors.New("resp: query buffer budget exhausted")

const (
	errBudgetReply = "ERR max query buffer memory reached, closing connection"
	errBusyReply   = "BUSY server overloaded, retry later"
	// errBusyClientReply: the client's own admission queue is full while
	// other clients are served (shed.ShedClient).
	errBusyClientReply = "BUSY too many commands of this client waiting, retry later"
	securityLogMsg     = "resp: Possible SECURITY ATTACK detected. It looks like somebody is sending POST or Host: commands to counterd. This is likely due to an attacker attempting to use Cross Protocol Scripting to compromise your counterd instance. Connection aborted."
)

// httpMethods are the request-line methods of HTTP/1.x.
var httpMethods = []string{"get", "post", "put", "delete", "head", "options", "patch", "connect", "trace"}

// looksLikeHTTP reports whether a command is part of an HTTP request:
// Redis's "post" and "host:" commands anywhere, and on a connection's
// first command an inline "<METHOD> <target> HTTP/..." line (GET is a
// command of its own, so it needs the protocol word to be recognised).
func looksLikeHTTP(args [][]byte, first, inline bool) bool {
	if len(args) == 0 {
		return false
	}
	name := args[0]
	if bytes.EqualFold(name, []byte("post")) || bytes.EqualFold(name, []byte("host:")) {
		return true
	}
	if !first || !inline || len(args) != 3 || !bytes.HasPrefix(args[2], []byte("HTTP/")) {
		return false
	}
	for _, m := range httpMethods {
		if bytes.EqualFold(name, []byte(m)) {
			return true
		}
	}
	return false
}

// reserveBuffer accounts a read buffer of size bytes for c in the shared
// budget, replacing what c held; buffers up to maxReadBuf are not counted
// (MaxConns bounds them). It reports false, changing nothing, when the
// budget would be exceeded.
func (s *Server) reserveBuffer(c *client, size int) bool {
	want := 0
	if size > maxReadBuf {
		want = size
	}
	delta := int64(want - c.held)
	if delta > 0 && s.queryBytes.Add(delta) > int64(s.opts.MaxQueryBufferTotal) {
		s.queryBytes.Add(-delta)
		return false
	}
	if delta < 0 {
		s.queryBytes.Add(delta)
	}
	c.held = want
	return true
}
