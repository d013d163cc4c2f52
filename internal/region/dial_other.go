//go:build !linux

package region

import (
	"syscall"
	"time"
)

// userTimeoutControl: TCP_USER_TIMEOUT is Linux's; elsewhere a cut link is
// noticed by gRPC's own deadlines only.
func userTimeoutControl(time.Duration) func(network, address string, c syscall.RawConn) error {
	return nil
}
