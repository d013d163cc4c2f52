//go:build linux

package server

import (
	"encoding/binary"
	"io"
	"net"
	"os"
	"syscall"
	"time"
)

// rxReader reads a TCP connection with recvmsg and reports when the
// kernel received the bytes read (SO_TIMESTAMPNS), so admission knows
// how long a request waited before the server got to it: in the socket
// while the node was busy, which no clock in the server sees otherwise.
type rxReader struct {
	rc  syscall.RawConn
	fn  func(fd uintptr) bool // bound once: no allocation per read
	p   []byte
	oob [64]byte
	n   int
	at  time.Time
	err error
}

// newRxReader turns on receive timestamps for c; nil if c is not TCP or
// the option is refused (admission then counts no wait before the read).
func newRxReader(c net.Conn) *rxReader {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1)
	}); err != nil || serr != nil {
		return nil
	}
	r := &rxReader{rc: rc}
	r.fn = r.recv
	return r
}

func (r *rxReader) recv(fd uintptr) bool {
	n, oobn, _, _, err := syscall.Recvmsg(int(fd), r.p, r.oob[:], 0)
	if err == syscall.EAGAIN || err == syscall.EINTR {
		return false
	}
	r.n, r.err, r.at = n, err, time.Time{}
	// One control message: cmsghdr (len uint64, level int32, type
	// int32) and a timespec (sec, nsec int64).
	if err == nil && oobn >= 32 {
		o := r.oob[:oobn]
		if int32(binary.NativeEndian.Uint32(o[8:])) == syscall.SOL_SOCKET && int32(binary.NativeEndian.Uint32(o[12:])) == syscall.SCM_TIMESTAMPNS {
			r.at = time.Unix(int64(binary.NativeEndian.Uint64(o[16:])), int64(binary.NativeEndian.Uint64(o[24:])))
		}
	}
	return true
}

// read reads into p like net.Conn's Read and returns when the kernel
// received the last of the bytes (zero if unknown).
func (r *rxReader) read(p []byte) (int, time.Time, error) {
	r.p = p
	err := r.rc.Read(r.fn)
	r.p = nil
	if err != nil { // deadline or closed connection
		return 0, time.Time{}, &net.OpError{Op: "read", Net: "tcp", Err: err}
	}
	if r.err != nil {
		return 0, time.Time{}, &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("recvmsg", r.err)}
	}
	if r.n == 0 && len(p) > 0 {
		return 0, time.Time{}, io.EOF
	}
	return r.n, r.at, nil
}
