package engine

import (
	"errors"
	"fmt"
)

// ErrDirInUse is matched (errors.Is) by the error Open returns when
// another engine has the data directory open.
var ErrDirInUse = errors.New("engine: data directory in use")

// DirInUseError says which directory is taken and, when its lock file
// records one, by which process.
type DirInUseError struct {
	Dir string
	PID int // 0 when unknown
}

func (e *DirInUseError) Error() string {
	if e.PID > 0 {
		return fmt.Sprintf("data directory %s is in use by another counterd (pid %d)", e.Dir, e.PID)
	}
	return fmt.Sprintf("data directory %s is in use by another counterd", e.Dir)
}

// Is makes errors.Is(err, ErrDirInUse) true.
func (e *DirInUseError) Is(target error) bool { return target == ErrDirInUse }
