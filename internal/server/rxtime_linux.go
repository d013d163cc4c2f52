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
	rc syscall.RawConn
	fn func(fd uintptr) bool // bound once: no allocation per read
	// tryFn is fn that does not wait (tryRead), setting empty.
	tryFn func(fd uintptr) bool
	empty bool
	p     []byte
	oob   [64]byte
	n     int
	at    time.Time
	err   error
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
	r.fn, r.tryFn = r.recv, r.tryRecv
	return r
}

func (r *rxReader) recv(fd uintptr) bool {
	n, oobn, _, _, err := syscall.Recvmsg(int(fd), r.p, r.oob[:], 0)
	if err == syscall.EAGAIN || err == syscall.EINTR {
		return false
	}
	r.got(n, oobn, err)
	return true
}

// tryRecv is recv that does not wait: an empty socket sets empty.
func (r *rxReader) tryRecv(fd uintptr) bool {
	n, oobn, _, _, err := syscall.Recvmsg(int(fd), r.p, r.oob[:], 0)
	if err == syscall.EAGAIN || err == syscall.EINTR {
		r.empty = true
		return true
	}
	r.got(n, oobn, err)
	return true
}

func (r *rxReader) got(n, oobn int, err error) {
	r.n, r.err, r.at = n, err, time.Time{}
	// One control message: cmsghdr (len uint64, level int32, type
	// int32) and a timespec (sec, nsec int64).
	if err == nil && oobn >= 32 {
		o := r.oob[:oobn]
		if int32(binary.NativeEndian.Uint32(o[8:])) == syscall.SOL_SOCKET && int32(binary.NativeEndian.Uint32(o[12:])) == syscall.SCM_TIMESTAMPNS {
			r.at = time.Unix(int64(binary.NativeEndian.Uint64(o[16:])), int64(binary.NativeEndian.Uint64(o[24:])))
		}
	}
}

// read reads into p like net.Conn's Read and returns when the kernel
// received the last of the bytes (zero if unknown).
func (r *rxReader) read(p []byte) (int, time.Time, error) {
	return r.readWith(p, r.fn)
}

// tryRead is read that does not wait for bytes: empty when the socket
// has none (n is 0 then).
func (r *rxReader) tryRead(p []byte) (n int, at time.Time, empty bool, err error) {
	r.empty = false
	n, at, err = r.readWith(p, r.tryFn)
	if r.empty {
		return 0, time.Time{}, true, nil
	}
	return n, at, false, err
}

// quietLowat is the receive low-water mark of a quiet socket: more than
// any request that is not pipelined, so that one request arriving does
// not signal it readable.
const quietLowat = 64 << 10

// quiet turns the socket's readiness signals off (on) or back on. A
// connection parked at the gate is not waiting in the network poller,
// but the poller still hears of every request its client sends, and
// hands them out at most 128 at a time, oldest first: with thousands of
// parked connections, the request of a connection that does wait in the
// poller was found only after all of theirs, tens of milliseconds later.
// A quiet socket (SO_RCVLOWAT above any request) is not reported
// readable until it holds quietLowat bytes or its peer closes; setting
// the mark back to 1 reports it at once if it holds bytes. Errors are
// ignored: a socket left loud is only slower to find.
func (r *rxReader) quiet(on bool) {
	v := 1
	if on {
		v = quietLowat
	}
	_ = r.rc.Control(func(fd uintptr) {
		_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, v)
	})
}

func (r *rxReader) readWith(p []byte, fn func(uintptr) bool) (int, time.Time, error) {
	r.p = p
	err := r.rc.Read(fn)
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
