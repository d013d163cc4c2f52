package shed

import (
	"net"
	"net/netip"
	"sync"
)

// ConnCounter caps the connections of each client address (ClientAddr:
// an IPv6 /64 is one client), so that one address cannot take every
// connection slot of a listener. Addresses in its trusted prefixes (the
// --trusted-proxies, through which many clients connect) are not
// counted. Safe for concurrent use; a nil *ConnCounter caps nothing.
type ConnCounter struct {
	max     int
	trusted []netip.Prefix
	mu      sync.Mutex
	n       map[netip.Addr]int
}

// NewConnCounter returns a cap of max connections per client address,
// nil for none (max <= 0).
func NewConnCounter(max int, trusted []netip.Prefix) *ConnCounter {
	if max <= 0 {
		return nil
	}
	return &ConnCounter{max: max, trusted: trusted, n: map[netip.Addr]int{}}
}

// Clone returns an empty ConnCounter with cc's cap and trusted
// prefixes (nil for nil).
func (cc *ConnCounter) Clone() *ConnCounter {
	if cc == nil {
		return nil
	}
	return NewConnCounter(cc.max, cc.trusted)
}

// Take counts a connection from addr. ok is false when its client is at
// the cap (nothing counted then). client is what Give must be passed
// when the connection ends (the zero Addr when nothing was counted).
func (cc *ConnCounter) Take(addr net.Addr) (client netip.Addr, ok bool) {
	if cc == nil {
		return netip.Addr{}, true
	}
	return cc.TakeIP(AddrIP(addr))
}

// AddrIP is the IP of a connection's address (the zero Addr when it has
// none, as a Unix socket's).
func AddrIP(a net.Addr) netip.Addr {
	switch a := a.(type) {
	case *net.TCPAddr:
		return a.AddrPort().Addr().Unmap()
	case nil:
		return netip.Addr{}
	default:
		ap, err := netip.ParseAddrPort(a.String())
		if err != nil {
			return netip.Addr{}
		}
		return ap.Addr().Unmap()
	}
}

// TakeIP is Take of a connection from ip; an invalid ip is not counted
// (ok).
func (cc *ConnCounter) TakeIP(ip netip.Addr) (client netip.Addr, ok bool) {
	if cc == nil || !ip.IsValid() || InPrefixes(cc.trusted, ip) {
		return netip.Addr{}, true
	}
	client = ClientAddr(ip)
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.n[client] >= cc.max {
		return netip.Addr{}, false
	}
	cc.n[client]++
	return client, true
}

// Give uncounts a connection Take counted; the zero Addr does nothing.
func (cc *ConnCounter) Give(client netip.Addr) {
	if cc == nil || !client.IsValid() {
		return
	}
	cc.mu.Lock()
	if cc.n[client]--; cc.n[client] <= 0 {
		delete(cc.n, client)
	}
	cc.mu.Unlock()
}

// Conns returns how many connections client (as TakeIP returned it)
// holds now; 0 for a nil ConnCounter or the zero Addr.
func (cc *ConnCounter) Conns(client netip.Addr) int {
	if cc == nil || !client.IsValid() {
		return 0
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.n[client]
}

// Clients returns how many client addresses hold connections now.
func (cc *ConnCounter) Clients() int {
	if cc == nil {
		return 0
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return len(cc.n)
}

// InPrefixes reports whether ip is in one of ps.
func InPrefixes(ps []netip.Prefix, ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, p := range ps {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}
