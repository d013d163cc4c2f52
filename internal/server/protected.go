package server

import (
	"errors"
	"fmt"
	"net"
	"strings"
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
	if err := c.validatePeerLinks(); err != nil {
		return err
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

// validatePeerLinks refuses node-to-node links that leave loopback without
// peer authentication, even with --auth: tokens do not guard them. A node
// has such links in a cluster (--join: peer gRPC and gossip) and with peer
// regions (--peer-regions: region gRPC). Its --grpc beyond loopback needs
// mutual TLS (--peer-ca), its --gossip --gossip-key-file; so do the
// addresses it dials. A node with neither serves only clients, for which
// --auth suffices.
func (c *Config) validatePeerLinks() error {
	if c.Join == "" && c.PeerRegions == "" {
		return nil
	}
	links := "--join"
	if c.Join == "" {
		links = "--peer-regions"
	}
	if c.PeerCA == "" {
		if c.GRPC != "" && !isLoopback(c.GRPC) {
			return fmt.Errorf("%w: --grpc %s is not a loopback address and this node's peer traffic (%s) on it would be unauthenticated and unencrypted, even with --auth; set --peer-ca FILE with --tls-cert and --tls-key (mutual TLS, docs/security.md), or --insecure to serve it anyway", ErrProtectedMode, c.GRPC, links)
		}
		if addr, ok := firstRemote(splitPeerAddrs(c.PeerRegions)); ok {
			return fmt.Errorf("%w: --peer-regions dials %s, not a loopback address, and the region link would be unauthenticated and unencrypted; set --peer-ca FILE with --tls-cert and --tls-key (mutual TLS, docs/security.md), or --insecure to use it anyway", ErrProtectedMode, addr)
		}
	}
	if c.Join != "" && c.GossipKeyFile == "" {
		if c.Gossip != "" && !isLoopback(c.Gossip) {
			return fmt.Errorf("%w: --gossip %s is not a loopback address and gossip would be unauthenticated and unencrypted, even with --auth: anyone reaching it could join or declare members dead; set --gossip-key-file FILE (docs/security.md), or --insecure to serve it anyway", ErrProtectedMode, c.Gossip)
		}
		if addr, ok := firstRemote(splitList(c.Join)); ok {
			return fmt.Errorf("%w: --join %s is not a loopback address and gossip would be unauthenticated and unencrypted; set --gossip-key-file FILE (docs/security.md), or --insecure to use it anyway", ErrProtectedMode, addr)
		}
	}
	return nil
}

// splitPeerAddrs lists the addresses of a --peer-regions list (invalid
// items are reported by validateRegions).
func splitPeerAddrs(list string) []string {
	var out []string
	for _, item := range splitList(list) {
		if _, addr, ok := strings.Cut(item, "="); ok {
			out = append(out, addr)
		}
	}
	return out
}

// firstRemote returns the first of addrs that is not a loopback address.
func firstRemote(addrs []string) (string, bool) {
	for _, a := range addrs {
		if !isLoopback(a) {
			return a, true
		}
	}
	return "", false
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
