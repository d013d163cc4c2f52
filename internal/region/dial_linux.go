package region

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// userTimeoutControl sets TCP_USER_TIMEOUT on a region link's socket: when
// sent data stays unacknowledged for d (a cut link: routes withdrawn,
// packets dropped), the kernel drops the connection instead of
// retransmitting with a growing backoff for minutes. gRPC then reconnects
// (its backoff capped at one interval), so a healed link carries the next
// push within about an interval instead of waiting for the next
// retransmission of the stuck one, which comes seconds after the heal.
func userTimeoutControl(d time.Duration) func(network, address string, c syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d.Milliseconds()))
		})
		if err != nil {
			return err
		}
		return serr
	}
}
