package main

import (
	"strings"
	"testing"
)

// TestClusterUsage: bad cluster subcommands are usage errors (exit 2) and
// a node without cluster mode answers with an error (exit 1). Forget
// against a real cluster is tested in cmd/counterd (TestClusterForget).
func TestClusterUsage(t *testing.T) {
	addr := startServer(t) // embedded: no /cluster routes
	for _, args := range [][]string{
		{"cluster"},
		{"cluster", "nope"},
		{"cluster", "forget"},
		{"cluster", "status", "extra"},
		{"cluster", "forget", "n1", "n2"},
	} {
		if code, _, errOut := ctl(t, addr, args...); code != 2 || !strings.Contains(errOut, "usage: counterctl cluster") {
			t.Errorf("%v: exit %d, stderr %q; want a usage error", args, code, errOut)
		}
	}
	if code, _, errOut := ctl(t, addr, "cluster", "forget", "n2"); code != 1 || errOut == "" {
		t.Errorf("forget on an embedded node: exit %d, stderr %q; want an error", code, errOut)
	}
}
