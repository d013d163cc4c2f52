//go:build !unix

package resp

// cpuTimes is not measured on this system: INFO cpu reports 0.
func cpuTimes() (sys, user, childSys, childUser float64) { return }
