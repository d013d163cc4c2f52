package redistest

import "syscall"

// sysProcAttr kills the server when the test binary dies without cleanup.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
