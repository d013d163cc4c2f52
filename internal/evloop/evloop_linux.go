//go:build linux

// Package evloop holds the machinery the front ends' event loops share
// (the Redis protocol's, internal/api/resp, and HTTP's,
// internal/api/httploop): an epoll set with a wake pipe, the loop's
// blocking wait, raw non-blocking reads and writes, reads with the
// kernel's receive time, moving a TCP connection off Go's network
// poller, and the per-client budget that keeps a round fair between
// clients rather than connections.
//
// Why loops at all, and why raw system calls: see docs/internals.md
// ("Event loops") and the comments of internal/api/resp/loop_linux.go,
// where the model was first measured.
package evloop

import (
	"encoding/binary"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
	_ "unsafe" // go:linkname

	"github.com/counterd/counterd/internal/shed"
)

// Nanotime is the runtime's monotonic clock.
//
//go:linkname Nanotime runtime.nanotime
func Nanotime() int64

// YieldEvery: a loop yields its processor that often (runtime.Gosched,
// every 5 ms),
// so that Go's system monitor does not take it for stuck (see
// internal/api/resp/loop_linux.go, loopYieldEvery).
const YieldEvery = 5 * time.Millisecond

// Poller is an epoll set with a wake pipe in it.
type Poller struct {
	Epfd   int
	wakeR  int
	wakeW  int
	woken  atomic.Bool
	Events []syscall.EpollEvent
}

// NewPoller creates an epoll set reporting up to maxEvents per wait.
func NewPoller(maxEvents int) (*Poller, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_NONBLOCK|syscall.O_CLOEXEC); err != nil {
		syscall.Close(epfd)
		return nil, fmt.Errorf("pipe2: %w", err)
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(p[0])}
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, p[0], &ev); err != nil {
		syscall.Close(epfd)
		syscall.Close(p[0])
		syscall.Close(p[1])
		return nil, fmt.Errorf("epoll_ctl: %w", err)
	}
	return &Poller{Epfd: epfd, wakeR: p[0], wakeW: p[1], Events: make([]syscall.EpollEvent, maxEvents)}, nil
}

// Close closes the epoll set and the wake pipe.
func (p *Poller) Close() {
	syscall.Close(p.Epfd)
	syscall.Close(p.wakeR)
	syscall.Close(p.wakeW)
}

// Wake makes the loop's wait return (IsWake reports the pipe's event).
// Any goroutine may call it.
func (p *Poller) Wake() {
	if p.woken.CompareAndSwap(false, true) {
		syscall.Write(p.wakeW, []byte{1})
	}
}

// IsWake reports whether fd is the wake pipe.
func (p *Poller) IsWake(fd int) bool { return fd == p.wakeR }

// DrainWake empties the wake pipe. Changes made before a Wake that
// follows are seen by the loop after DrainWake returns.
func (p *Poller) DrainWake() {
	var buf [64]byte
	for {
		if n, _ := syscall.Read(p.wakeR, buf[:]); n <= 0 {
			break
		}
	}
	p.woken.Store(false)
}

// Add puts fd into the set with events (level-triggered).
func (p *Poller) Add(fd int, events uint32) error {
	ev := syscall.EpollEvent{Events: events, Fd: int32(fd)}
	return syscall.EpollCtl(p.Epfd, syscall.EPOLL_CTL_ADD, fd, &ev)
}

// Mod changes fd's events.
func (p *Poller) Mod(fd int, events uint32) {
	ev := syscall.EpollEvent{Events: events, Fd: int32(fd)}
	syscall.EpollCtl(p.Epfd, syscall.EPOLL_CTL_MOD, fd, &ev)
}

// Del takes fd out of the set.
func (p *Poller) Del(fd int) {
	syscall.EpollCtl(p.Epfd, syscall.EPOLL_CTL_DEL, fd, nil)
}

// Wait waits up to msec (-1: until an event) for events into p.Events.
func (p *Poller) Wait(msec int) (int, error) { return EpollWait(p.Epfd, p.Events, msec) }

// EpollWait waits for events of an epoll set like Redis's event loop:
// one blocking system call per round, made with the scheduler told (the
// P stays with the thread and is taken back without a hand-off when the
// call returns soon, which it does under load).
func EpollWait(epfd int, events []syscall.EpollEvent, msec int) (int, error) {
	r, _, e := syscall.Syscall6(syscall.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), uintptr(msec), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// PollNow polls an epoll set without blocking, as a raw system call.
func PollNow(epfd int, events []syscall.EpollEvent) (int, error) {
	r, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// A loop's reads and writes on its sockets never block, so they are made
// raw: without telling the scheduler, which would otherwise prepare to
// hand the P to another thread around every call.

// RawRead reads a non-blocking descriptor.
func RawRead(fd int, b []byte) (int, error) {
	r, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

// RawWrite writes a non-blocking descriptor.
func RawWrite(fd int, b []byte) (int, error) {
	r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

// WriteOut writes out[off:] to a non-blocking descriptor until it is
// written or the socket takes no more. It returns the new offset;
// blocked: the socket is full (wait for EPOLLOUT); err: the connection
// failed.
func WriteOut(fd int, out []byte, off int) (_ int, blocked bool, err error) {
	for off < len(out) {
		n, err := RawWrite(fd, out[off:])
		if n > 0 {
			off += n
		}
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return off, true, nil
		case err != nil:
			return off, false, err
		}
	}
	return off, false, nil
}

// EnableRxTime turns on receive timestamps (SO_TIMESTAMPNS) for RecvRx.
func EnableRxTime(fd int) error {
	return syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1)
}

// RxOOB is the control buffer RecvRx needs.
type RxOOB [64]byte

// RecvRx reads a non-blocking socket with recvmsg and returns, besides
// the bytes, when the kernel received them (Unix nanoseconds, 0 if
// unknown: EnableRxTime was not called or refused).
func RecvRx(fd int, b []byte, oob *RxOOB) (n int, rxAt int64, err error) {
	var iov syscall.Iovec
	iov.Base = &b[0]
	iov.SetLen(len(b))
	var msg syscall.Msghdr
	msg.Iov = &iov
	msg.Iovlen = 1
	msg.Control = &oob[0]
	msg.SetControllen(len(oob))
	r, _, e := syscall.RawSyscall(syscall.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), 0)
	if e != 0 {
		return -1, 0, e
	}
	n = int(r)
	// One control message: cmsghdr (len uint64, level int32, type
	// int32) and a timespec (sec, nsec int64).
	if oobn := int(msg.Controllen); oobn >= 32 {
		o := oob[:oobn]
		if int32(binary.NativeEndian.Uint32(o[8:])) == syscall.SOL_SOCKET && int32(binary.NativeEndian.Uint32(o[12:])) == syscall.SCM_TIMESTAMPNS {
			rxAt = int64(binary.NativeEndian.Uint64(o[16:]))*1e9 + int64(binary.NativeEndian.Uint64(o[24:]))
		}
	}
	return n, rxAt, nil
}

// Detach moves a TCP connection off Go's network poller: it duplicates
// the descriptor (the duplicate shares the non-blocking mode) and closes
// tc. The caller owns the returned descriptor.
func Detach(tc *net.TCPConn) (int, error) {
	rc, err := tc.SyscallConn()
	if err != nil {
		return -1, err
	}
	nfd := -1
	var derr error
	if err := rc.Control(func(fd uintptr) {
		r, _, e := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_DUPFD_CLOEXEC, 0)
		if e != 0 {
			derr = e
			return
		}
		nfd = int(r)
	}); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, derr
	}
	tc.Close()
	return nfd, nil
}

// Shares is the per-client budget of a loop's round: in one round a
// client runs at most Budget requests (commands); its connections with
// more input are not read until the next round (level-triggered epoll
// reports them again), so a client flooding on many connections delays
// another client by at most about one budget, not one batch per
// connection. A client is a shed.Key, as admission keys it.
type Shares struct {
	Budget int
	round  uint64
	m      map[shed.Key]*Share
}

// Share is one client's part of Shares.
type Share struct {
	conns int
	round uint64
	used  int
}

// Conns is the number of the client's connections on the loop.
func (sh *Share) Conns() int { return sh.conns }

// NewShares returns Shares with the given budget per client and round.
func NewShares(budget int) *Shares {
	return &Shares{Budget: budget, m: make(map[shed.Key]*Share)}
}

// NextRound starts a round.
func (s *Shares) NextRound() { s.round++ }

// Join makes a connection one of client k's; Leave undoes it.
func (s *Shares) Join(k shed.Key) *Share {
	sh := s.m[k]
	if sh == nil {
		sh = &Share{}
		s.m[k] = sh
	}
	sh.conns++
	return sh
}

// Leave undoes Join.
func (s *Shares) Leave(k shed.Key, sh *Share) {
	if sh == nil {
		return
	}
	if sh.conns--; sh.conns == 0 && s.m[k] == sh {
		delete(s.m, k)
	}
}

// Over reports whether sh's client used its budget this round.
func (s *Shares) Over(sh *Share) bool {
	return sh != nil && sh.round == s.round && sh.used >= s.Budget
}

// Used is how many requests sh's client was charged this round.
func (s *Shares) Used(sh *Share) int {
	if sh == nil || sh.round != s.round {
		return 0
	}
	return sh.used
}

// Charge counts n requests against sh's client this round.
func (s *Shares) Charge(sh *Share, n int) {
	if sh == nil {
		return
	}
	if sh.round != s.round {
		sh.round, sh.used = s.round, 0
	}
	sh.used += n
}

// Clients is the number of clients with connections (tests).
func (s *Shares) Clients() int { return len(s.m) }
