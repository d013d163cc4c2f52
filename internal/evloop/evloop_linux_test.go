//go:build linux

package evloop

import (
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/shed"
)

// TestShares: a client is over its budget once it used it in a round,
// and has it again in the next; clients are counted apart.
func TestShares(t *testing.T) {
	s := NewShares(10)
	a, b := shed.ClientKey(netip.MustParseAddr("127.0.0.1")), shed.ClientKey(netip.MustParseAddr("127.0.0.2"))
	sa, sa2, sb := s.Join(a), s.Join(a), s.Join(b)
	if sa != sa2 || s.Clients() != 2 {
		t.Fatalf("connections of one client share: %p %p, %d clients", sa, sa2, s.Clients())
	}
	s.NextRound()
	s.Charge(sa, 6)
	s.Charge(sa2, 4)
	if !s.Over(sa) || s.Over(sb) {
		t.Fatalf("over: a %v b %v", s.Over(sa), s.Over(sb))
	}
	s.NextRound()
	if s.Over(sa) {
		t.Fatal("budget not renewed in the next round")
	}
	s.Leave(a, sa)
	s.Leave(a, sa2)
	if s.Clients() != 1 {
		t.Fatalf("%d clients after a left", s.Clients())
	}
}

// TestDetachRecvRx: a detached connection is read with the kernel's
// receive time, and written with WriteOut; the poller reports its input
// and a Wake.
func TestDetachRecvRx(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cli, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	srv, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	fd, err := Detach(srv.(*net.TCPConn))
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := EnableRxTime(fd); err != nil {
		t.Fatal(err)
	}
	p, err := NewPoller(8)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Add(fd, syscall.EPOLLIN); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	cli.Write([]byte("ping"))
	n, err := p.Wait(5000)
	if err != nil || n != 1 || int(p.Events[0].Fd) != fd {
		t.Fatalf("wait: %d %v", n, err)
	}
	var oob RxOOB
	buf := make([]byte, 16)
	n, rx, err := RecvRx(fd, buf, &oob)
	if err != nil || string(buf[:n]) != "ping" {
		t.Fatalf("RecvRx: %q %v", buf[:max(n, 0)], err)
	}
	// Some kernels (gVisor among them) accept SO_TIMESTAMPNS but attach
	// no control message; RecvRx then says 0 ("unknown") and its callers
	// fall back to the loop's clock. A time it does give must be right.
	if rx == 0 {
		t.Logf("this kernel gave no receive time (SO_TIMESTAMPNS accepted, no control message)")
	} else if at := time.Unix(0, rx); at.Before(sent.Add(-time.Second)) || at.After(time.Now()) {
		t.Fatalf("receive time %v, sent at %v", at, sent)
	}
	if off, blocked, err := WriteOut(fd, []byte("pong"), 0); off != 4 || blocked || err != nil {
		t.Fatalf("WriteOut: %d %v %v", off, blocked, err)
	}
	got := make([]byte, 4)
	cli.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := cli.Read(got); err != nil || string(got) != "pong" {
		t.Fatalf("client read %q %v", got, err)
	}
	p.Wake()
	n, err = p.Wait(5000)
	if err != nil || n != 1 || !p.IsWake(int(p.Events[0].Fd)) {
		t.Fatalf("wake: %d %v", n, err)
	}
	p.DrainWake()
	if n, _ := p.Wait(0); n != 0 {
		t.Fatalf("%d events after the wake pipe was drained", n)
	}
}
