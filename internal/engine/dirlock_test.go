//go:build unix

package engine

import (
	"errors"
	"fmt"
	"github.com/counterd/counterd/internal/contract"
	"os"
	"testing"
)

// TestSecondOpenOfDirIsRefused: while one engine has a data directory
// open, a second Open fails with ErrDirInUse and a message naming the
// directory and the holder's pid; once the first closes, the directory
// opens again with its data.
func TestSecondOpenOfDirIsRefused(t *testing.T) {
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.Dir = dir
	e1, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, e1, contract.Op{Type: contract.OpAdd, ID: "a", Delta: 3})

	_, err = Open(cfg)
	if !errors.Is(err, ErrDirInUse) {
		t.Fatalf("second Open: %v, want ErrDirInUse", err)
	}
	want := fmt.Sprintf("data directory %s is in use by another counterd (pid %d)", dir, os.Getpid())
	if err.Error() != want {
		t.Fatalf("second Open: %q, want %q", err, want)
	}
	if v := mustGet(t, e1, "a"); v.Value != 3 {
		t.Fatalf("first engine's counter after refused open: %d", v.Value)
	}
	if err := e1.Close(); err != nil {
		t.Fatal(err)
	}
	e2 := mustOpen(t, cfg)
	if v := mustGet(t, e2, "a"); v.Value != 3 {
		t.Fatalf("after reopen: %d, want 3", v.Value)
	}
}
