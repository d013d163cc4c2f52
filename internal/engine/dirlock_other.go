//go:build !unix

package engine

import "os"

// lockDir is a no-op where flock is unavailable: Pebble's own LOCK file
// still refuses a second opener, with a less helpful message.
func lockDir(dir string) (*os.File, error) { return nil, nil }
