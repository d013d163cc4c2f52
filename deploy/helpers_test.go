package deploy

import (
	"os"
	"os/exec"
	"testing"
)

// needTool returns the path of the command name, or skips t naming the
// Debian package that provides it; under COUNTERD_REQUIRE_SERVICES=1 (CI,
// after scripts/install-deps.sh) a missing tool fails t instead.
func needTool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	msg := name + " not installed (Debian package " + pkg + "; scripts/install-deps.sh installs it)"
	if os.Getenv("COUNTERD_REQUIRE_SERVICES") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// run runs a command and fails t with its output if it fails.
func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}
