//go:build linux

package server

import (
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestRxReaderQuiet: a quiet socket holding a request is not reported
// readable (so the poller does not hand it out), its bytes are still read
// by tryRead, and once loud again a socket holding bytes is reported at
// once; tryRead on an empty socket says so without waiting.
func TestRxReaderQuiet(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	r := newRxReader(server)
	if r == nil {
		t.Skip("no receive timestamps on this kernel")
	}
	readable := func() bool {
		var ready bool
		r.rc.Control(func(fd uintptr) {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, _ := unix.Poll(fds, 50)
			ready = n == 1 && fds[0].Revents&unix.POLLIN != 0
		})
		return ready
	}
	buf := make([]byte, 4096)
	if n, _, empty, err := r.tryRead(buf); !empty || n != 0 || err != nil {
		t.Fatalf("tryRead on an empty socket: %d %v %v", n, empty, err)
	}
	req := []byte(post("/a"))
	r.quiet(true)
	client.Write(req)
	time.Sleep(20 * time.Millisecond) // let it arrive
	if readable() {
		t.Fatal("a quiet socket holding one request was reported readable")
	}
	// (Its receive time may be unknown: the kernel stamps TCP segments
	// only once timestamps are on system-wide, which it does lazily.)
	n, _, empty, err := r.tryRead(buf)
	if empty || err != nil || n != len(req) {
		t.Fatalf("tryRead on a quiet socket: n=%d empty=%v err=%v", n, empty, err)
	}
	client.Write(req)
	time.Sleep(20 * time.Millisecond)
	r.quiet(false)
	if !readable() {
		t.Fatal("a socket made loud again, holding a request, was not reported readable")
	}
}
