//go:build !linux

package tiered_test

import "time"

// cpuTime is not measured off Linux (see cpu_linux_test.go).
func cpuTime() time.Duration { return 0 }
