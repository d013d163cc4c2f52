package main

import (
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestStrayArgumentIsUsageError: "counterd version" exits 2 with a
// message and the usage instead of starting a server that ignores it.
func TestStrayArgumentIsUsageError(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	for _, tc := range []struct{ arg, hint string }{
		{"version", "(did you mean --version?)"},
		{"serve", "counterd takes flags only"},
	} {
		cmd := exec.Command(counterdBin(t), "--data", t.TempDir(), "--http", "127.0.0.1:0", "--resp", "", "--grpc", "", tc.arg)
		out, err := cmd.CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 2 {
			t.Fatalf("counterd %s: %v, want exit status 2\n%s", tc.arg, err, out)
		}
		want := fmt.Sprintf("counterd: unexpected argument %q: counterd takes flags only", tc.arg)
		if !strings.Contains(string(out), want) || !strings.Contains(string(out), tc.hint) || !strings.Contains(string(out), "-data string") {
			t.Errorf("counterd %s printed:\n%s\nwant %q, %q and the usage", tc.arg, out, want, tc.hint)
		}
	}
}

// TestVersionStamped: --version prints what -ldflags -X stamped into
// internal/buildinfo, as make build does with git describe (the shared
// test binary is built that way).
func TestVersionStamped(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the counterd binary")
	}
	out, err := exec.Command(counterdBin(t), "--version").CombinedOutput()
	if err != nil || string(out) != "counterd "+e2eVersion+"\n" {
		t.Fatalf("--version: %q, %v; want %q", out, err, "counterd "+e2eVersion+"\n")
	}
}

// TestSecondInstanceOnDataDir: a second counterd on a data directory in
// use exits 1 naming the directory and the first one's pid.
func TestSecondInstanceOnDataDir(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	dir := t.TempDir()
	p := start(t, dir)
	cmd := exec.Command(counterdBin(t), "--data", dir, "--http", "127.0.0.1:0", "--resp", "", "--grpc", "")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("second counterd: %v, want exit status 1\n%s", err, out)
	}
	want := fmt.Sprintf("data directory %s is in use by another counterd (pid %d)", dir, p.cmd.Process.Pid)
	if !strings.Contains(string(out), want) {
		t.Fatalf("second counterd printed:\n%s\nwant %q", out, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "counterd.pid")); err != nil {
		t.Fatal(err)
	}
	p.term(t)
}

// TestREADMETieredExampleIsolated: the README's tiered example points at
// a database and a Redis DB of counterd's own, not the shared defaults
// (postgres, DB 0), so copying it pollutes nothing.
func TestREADMETieredExampleIsolated(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^counterd --redis (redis://\S+) --postgres '(postgres://[^']+)'$`).FindSubmatch(readme)
	if m == nil {
		t.Fatal("README has no tiered example line (counterd --redis URL --postgres 'DSN')")
	}
	ru, err := url.Parse(string(m[1]))
	if err != nil {
		t.Fatal(err)
	}
	if db := strings.Trim(ru.Path, "/"); db == "" || db == "0" {
		t.Errorf("tiered example uses Redis DB %q: give counterd a DB of its own", db)
	}
	pu, err := url.Parse(string(m[2]))
	if err != nil {
		t.Fatal(err)
	}
	if db := strings.Trim(pu.Path, "/"); db == "" || db == "postgres" {
		t.Errorf("tiered example uses PostgreSQL database %q: give counterd a database of its own", db)
	}
	if !strings.Contains(string(readme), "createdb -h 127.0.0.1 -U postgres "+strings.Trim(pu.Path, "/")) {
		t.Errorf("README does not say how to create the database %s", pu.Path)
	}
}
