//go:build unix

package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// dirLockName is the file in the data directory that an open engine
// holds an exclusive flock on and writes its process id to.
const dirLockName = "counterd.pid"

// lockDir takes the data directory's lock, creating dir if needed. It
// fails with ErrDirInUse, naming the holder's pid, when another engine
// (in this process or another) has dir open. The lock goes with the
// returned file: close it to release.
func lockDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("engine: open %s: %w", dir, err)
	}
	path := filepath.Join(dir, dirLockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("engine: open %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, dirInUse(dir, path)
		}
		return nil, fmt.Errorf("engine: lock %s: %w", dir, err)
	}
	// Record our pid for the next one to name; a failure here only
	// makes that message less precise.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// dirInUse builds the error for a locked dir, naming the pid recorded in
// its lock file when there is one.
func dirInUse(dir, path string) error {
	e := &DirInUseError{Dir: dir}
	b, _ := os.ReadFile(path)
	if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
		e.PID = pid
	}
	return e
}
