package server

import (
	"errors"
	"fmt"
	"net"
)

// ErrProtectedMode is returned by Validate for a non-loopback front end
// without authentication (Redis's protected mode).
var ErrProtectedMode = errors.New("server: protected mode")

// validateProtectedMode refuses to serve the API to the network with no
// --auth, unless --insecure says so: anyone who can reach the port could
// read, change and delete every counter. Loopback stays open so the
// README's first commands need no token.
func (c *Config) validateProtectedMode() error {
	if c.Insecure {
		return nil
	}
	// Tokens do not guard the admin listener: pprof there shows the
	// command line, --postgres password included.
	if c.Pprof && c.Admin != "" && !isLoopback(c.Admin) {
		return fmt.Errorf("%w: --admin %s is not a loopback address and the admin listener (pprof) has no authentication, even with --auth; bind it to loopback, or set --insecure to serve it anyway", ErrProtectedMode, c.Admin)
	}
	if c.Auth != "" {
		return nil
	}
	for _, a := range []struct{ flag, addr string }{{"--http", c.HTTP}, {"--resp", c.RESP}, {"--grpc", c.GRPC}} {
		if a.addr != "" && !isLoopback(a.addr) {
			return fmt.Errorf("%w: %s %s is not a loopback address and no --auth tokens file is set, so anyone who can reach it could read, change and delete every counter; set --auth FILE (docs/security.md), or --insecure to serve it without authentication", ErrProtectedMode, a.flag, a.addr)
		}
	}
	return nil
}

// isLoopback reports whether addr (host:port) binds only a loopback
// interface. An empty host binds every interface; a host name other than
// localhost is not trusted to resolve to loopback.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
