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
// one-line message pointing at --help instead of starting a server that
// ignores it; so does an unknown flag, naming the nearest one.
func TestStrayArgumentIsUsageError(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	for _, tc := range []struct{ arg, want, hint string }{
		{"version", `counterd: unexpected argument "version": counterd takes flags only`, "(did you mean --version?)"},
		{"serve", `counterd: unexpected argument "serve": counterd takes flags only`, "counterd takes flags only"},
		{"--bogus", "counterd: unknown flag --bogus", "run counterd --help for the flags"},
		{"--htp", "counterd: unknown flag --htp", "(did you mean --http?)"},
	} {
		cmd := exec.Command(counterdBin(t), "--data", t.TempDir(), "--http", "127.0.0.1:0", "--resp", "", "--grpc", "", tc.arg)
		out, err := cmd.CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 2 {
			t.Fatalf("counterd %s: %v, want exit status 2\n%s", tc.arg, err, out)
		}
		if !strings.Contains(string(out), tc.want) || !strings.Contains(string(out), tc.hint) ||
			!strings.Contains(string(out), "counterd --help") || strings.Count(string(out), "\n") != 1 {
			t.Errorf("counterd %s printed:\n%s\nwant one line with %q, %q and the --help hint", tc.arg, out, tc.want, tc.hint)
		}
	}
}

// TestHelpGrouped: --help prints every flag grouped by topic on standard
// output and exits 0.
func TestHelpGrouped(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	out, err := exec.Command(counterdBin(t), "--help").Output()
	if err != nil {
		t.Fatalf("--help: %v", err)
	}
	last := -1
	for _, g := range []string{"\nListen:\n", "\nAuthentication and TLS:\n", "\nStorage:\n", "\nCluster:\n",
		"\nRegions:\n", "\nEvent pipeline:\n", "\nLimits:\n", "\nLogging and operation:\n"} {
		i := strings.Index(string(out), g)
		if i < 0 || i < last {
			t.Fatalf("--help lacks %q or has it out of order:\n%s", g, out)
		}
		last = i
	}
	for _, f := range []string{"--data string", "--join string", "--config string", "--max-body int"} {
		if !strings.Contains(string(out), f) {
			t.Errorf("--help lacks %q", f)
		}
	}
}

// TestConfigFileFlag: counterd --config FILE takes its settings from the
// file, below the command line's.
func TestConfigFileFlag(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "counterd.yaml")
	// http is overridden by start's --http 127.0.0.1:0; max-body applies.
	if err := os.WriteFile(cfg, []byte("http: 127.0.0.1:1\nmax-body: 64\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, filepath.Join(dir, "data"), "--config", cfg)
	small, err := client.Post(p.addr+"/counters/cfg:a/increment", "application/json", strings.NewReader(`{"delta": 1}`))
	if err != nil {
		t.Fatal(err)
	}
	small.Body.Close()
	big, err := client.Post(p.addr+"/counters/cfg:a/increment", "application/json",
		strings.NewReader(`{"delta": 1, "pad": "`+strings.Repeat("x", 100)+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	big.Body.Close()
	if small.StatusCode != 200 || big.StatusCode != 413 {
		t.Fatalf("with max-body 64 from the file: small %d (want 200), big %d (want 413)", small.StatusCode, big.StatusCode)
	}
	p.term(t)

	if err := os.WriteFile(cfg, []byte("max-bodyy: 64\nhtp: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(counterdBin(t), "--data", filepath.Join(dir, "data"), "--config", cfg).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 ||
		!strings.Contains(string(out), `line 1: unknown setting "max-bodyy" (did you mean --max-body?)`) ||
		!strings.Contains(string(out), `line 2: unknown setting "htp" (did you mean --http?)`) {
		t.Fatalf("bad config file: %v\n%s", err, out)
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
