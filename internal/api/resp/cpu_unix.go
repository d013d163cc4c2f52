//go:build unix

package resp

import "syscall"

// cpuTimes is the process's and its children's system and user CPU time
// in seconds (INFO cpu).
func cpuTimes() (sys, user, childSys, childUser float64) {
	var self, kids syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &self) == nil {
		sys, user = seconds(self.Stime), seconds(self.Utime)
	}
	if syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids) == nil {
		childSys, childUser = seconds(kids.Stime), seconds(kids.Utime)
	}
	return
}

func seconds(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
