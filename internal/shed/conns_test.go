package shed

import (
	"net"
	"testing"
)

// TestAddrIP: a TCP address gives its IP, an IPv4-mapped IPv6 address the
// IPv4 one, another address type with a host:port its IP, and an address
// without an IP (a Unix socket, nil) the zero Addr; the same client
// reached through a mapped address is counted once.
func TestAddrIP(t *testing.T) {
	for _, c := range []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 80}, "10.1.2.3"},
		{&net.TCPAddr{IP: net.ParseIP("::ffff:10.1.2.3"), Port: 80}, "10.1.2.3"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 80}, "2001:db8::1"},
		{&net.UDPAddr{IP: net.ParseIP("::ffff:192.0.2.7"), Port: 53}, "192.0.2.7"},
		{&net.UnixAddr{Name: "/tmp/s.sock", Net: "unix"}, "invalid IP"},
		{nil, "invalid IP"},
	} {
		if got := AddrIP(c.addr).String(); got != c.want {
			t.Errorf("AddrIP(%v) = %s, want %s", c.addr, got, c.want)
		}
	}
	cc := NewConnCounter(1, nil)
	if _, ok := cc.Take(&net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 1}); !ok {
		t.Fatal("first connection refused")
	}
	if _, ok := cc.Take(&net.TCPAddr{IP: net.ParseIP("::ffff:10.1.2.3"), Port: 2}); ok {
		t.Fatal("the same client through an IPv4-mapped address was counted apart")
	}
	if _, ok := cc.Take(&net.UnixAddr{Name: "/tmp/s.sock", Net: "unix"}); !ok {
		t.Fatal("a connection without an IP is not counted, never refused")
	}
}
