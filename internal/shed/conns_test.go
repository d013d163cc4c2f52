package shed

import (
	"net"
	"net/netip"
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

// TestConnCounterConns: Conns counts a client's connections taken and
// not given back; nil counters and uncounted addresses hold none.
func TestConnCounterConns(t *testing.T) {
	cc := NewConnCounter(3, nil)
	ip := netip.MustParseAddr("192.0.2.7")
	var got []netip.Addr
	for range 2 {
		c, ok := cc.TakeIP(ip)
		if !ok {
			t.Fatal("refused within the cap")
		}
		got = append(got, c)
	}
	if n := cc.Conns(got[0]); n != 2 {
		t.Fatalf("Conns = %d, want 2", n)
	}
	cc.Give(got[0])
	if n := cc.Conns(got[1]); n != 1 {
		t.Fatalf("Conns after one Give = %d, want 1", n)
	}
	var none *ConnCounter
	if none.Conns(got[1]) != 0 || cc.Conns(netip.Addr{}) != 0 {
		t.Fatal("a nil counter or the zero Addr counted connections")
	}
}
