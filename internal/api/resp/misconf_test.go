package resp

import (
	"fmt"
	"strings"
	"testing"

	"github.com/counterd/counterd/internal/contract"
)

// A write the node cannot make durable is answered like Redis answers when
// it cannot persist: a MISCONF error, with the reason, on one line.
func TestEngineErrorMisconf(t *testing.T) {
	err := fmt.Errorf("%w: 700 KiB free on the data directory's filesystem, below --min-free-disk 1024 KiB", contract.ErrInsufficientStorage)
	got := engineError(err)
	if !strings.HasPrefix(got, "MISCONF ") {
		t.Fatalf("%q does not start with MISCONF", got)
	}
	if !strings.Contains(got, "unable to persist to disk (700 KiB free on the data directory's filesystem, below --min-free-disk 1024 KiB)") {
		t.Fatalf("%q does not give the reason", got)
	}
	if strings.ContainsAny(got, "\r\n") {
		t.Fatalf("%q spans lines", got)
	}
	// Across a cluster peer call the sentinel is kept (remote errors
	// unwrap to it), so the wording is the same.
	if got := engineError(fmt.Errorf("cluster: node b: %w", err)); !strings.HasPrefix(got, "MISCONF ") {
		t.Fatalf("wrapped: %q", got)
	}
}
