package main

// End-to-end tests of the real counterd binary: built once with go build,
// run as a subprocess, killed with SIGKILL or stopped with SIGTERM.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// e2eVersion is the version stamped into the counterd binary the tests run.
const e2eVersion = "v0.0.0-e2e"

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

func counterdBin(t testing.TB) string {
	t.Helper()
	if _, bench := t.(*testing.B); bench {
		if p := os.Getenv("COUNTERD_BIN"); p != "" {
			return p // a benchmark of another build (an A/B against a base)
		}
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "counterd-e2e")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "counterd")
		// Stamped like make build does (TestVersionStamped checks it).
		out, err := exec.Command("go", "build", "-ldflags", "-X github.com/counterd/counterd/internal/buildinfo.version="+e2eVersion, "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

type proc struct {
	cmd  *exec.Cmd
	addr string // http://host:port
	done chan error
	logs func() string // stderr so far
}

var listenRE = regexp.MustCompile(`msg="http listening" addr=(\S+)`)

// start runs counterd on dataDir with its HTTP API on a free port.
func start(t testing.TB, dataDir string, args ...string) *proc {
	t.Helper()
	args = append([]string{"--data", dataDir, "--http", "127.0.0.1:0", "--resp", "", "--grpc", ""}, args...)
	cmd := exec.Command(counterdBin(t), args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan error, 1)}
	addrc := make(chan string, 1)
	var logs bytes.Buffer
	var logMu sync.Mutex
	p.logs = func() string { logMu.Lock(); defer logMu.Unlock(); return logs.String() }
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logMu.Lock()
			logs.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			if m := listenRE.FindStringSubmatch(sc.Text()); m != nil {
				addrc <- "http://" + m[1]
			}
		}
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		if t.Failed() {
			logMu.Lock()
			t.Logf("counterd log:\n%s", logs.String())
			logMu.Unlock()
		}
	})
	select {
	case p.addr = <-addrc:
	case <-time.After(30 * time.Second):
		t.Fatal("counterd did not start")
	}
	return p
}

func (p *proc) kill(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func (p *proc) term(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("counterd exited with %v after SIGTERM", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("counterd did not stop after SIGTERM")
	}
}

var client = &http.Client{Timeout: 10 * time.Second}

func post(url, key, body string) (int, map[string]any, http.Header, error) {
	req, _ := http.NewRequest("POST", url, bytes.NewBufferString(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	json.Unmarshal(b, &m)
	return resp.StatusCode, m, resp.Header, nil
}

func getValue(t *testing.T, base, id string) int64 {
	t.Helper()
	resp, err := client.Get(base + "/counters/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m struct{ Value int64 }
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m.Value
}

// TestCrashSyncIncrements: concurrent sync increments, SIGKILL mid-flight,
// restart; the stored value is at least the acknowledged count and at most
// the sent count, over several rounds.
func TestCrashSyncIncrements(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	dir := t.TempDir()
	var acked, sent int64
	for round := 0; round < 4; round++ {
		p := start(t, dir, "--durability", "sync")
		if v := getValue(t, p.addr, "crash"); v < acked || v > sent {
			t.Fatalf("round %d start: value %d outside [acked %d, sent %d]", round, v, acked, sent)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var rAcked, rSent atomic.Int64
		for w := 0; w < 16; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					rSent.Add(1)
					code, _, _, err := post(p.addr+"/counters/crash/increment", "", `{"delta": 1}`)
					if err == nil && code == 200 {
						rAcked.Add(1)
					} else if err == nil {
						t.Errorf("increment answered %d", code)
						return
					}
				}
			}()
		}
		// Kill while requests are in flight, after some have landed.
		deadline := time.Now().Add(10 * time.Second)
		for rAcked.Load() < 100 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		p.kill(t)
		cancel()
		wg.Wait()
		acked += rAcked.Load()
		sent += rSent.Load()
		t.Logf("round %d: acked %d sent %d (total acked %d sent %d)", round, rAcked.Load(), rSent.Load(), acked, sent)
	}
	p := start(t, dir)
	v := getValue(t, p.addr, "crash")
	if v < acked || v > sent {
		t.Fatalf("after crashes value %d outside [acked %d, sent %d]", v, acked, sent)
	}
	if acked == 0 {
		t.Fatal("no increment was acknowledged")
	}
}

// TestIdempotentRetryAcrossRestart: a retry with the same key after a crash
// is answered from the first result and not applied again.
func TestIdempotentRetryAcrossRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	dir := t.TempDir()
	p := start(t, dir)
	url := p.addr + "/counters/orders:total/increment?durability=sync"
	code, first, _, err := post(url, "order-7781", `{"delta": 5}`)
	if err != nil || code != 200 || first["value"] != float64(5) {
		t.Fatalf("first: %d %v %v", code, first, err)
	}
	code, again, h, _ := post(url, "order-7781", `{"delta": 5}`)
	if code != 200 || again["value"] != float64(5) || h.Get("Idempotency-Replayed") != "true" {
		t.Fatalf("retry: %d %v replayed=%q", code, again, h.Get("Idempotency-Replayed"))
	}
	p.kill(t)
	p = start(t, dir)
	url = p.addr + "/counters/orders:total/increment?durability=sync"
	code, after, h, _ := post(url, "order-7781", `{"delta": 5}`)
	if code != 200 || after["value"] != float64(5) || h.Get("Idempotency-Replayed") != "true" {
		t.Fatalf("retry after restart: %d %v replayed=%q", code, after, h.Get("Idempotency-Replayed"))
	}
	if v := getValue(t, p.addr, "orders:total"); v != 5 {
		t.Fatalf("value %d after three deliveries of one increment, want 5", v)
	}
}

// TestGracefulShutdownFlushes: async increments acknowledged from memory are
// on disk after SIGTERM.
func TestGracefulShutdownFlushes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	dir := t.TempDir()
	p := start(t, dir, "--durability", "async", "--flush-interval", "1h")
	for i := 0; i < 100; i++ {
		if code, _, _, err := post(p.addr+"/counters/views/increment", "", `{"delta": 2}`); err != nil || code != 200 {
			t.Fatalf("increment: %d %v", code, err)
		}
	}
	p.term(t)
	p = start(t, dir)
	if v := getValue(t, p.addr, "views"); v != 200 {
		t.Fatalf("after SIGTERM views = %d, want 200", v)
	}
}

// TestREADMEExamples runs every curl, redis-cli and counterctl line of the
// README's sh blocks against a fresh counterd (ports rewritten to the test's
// own) and fails if one exits non-zero or answers an error.
func TestREADMEExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	respPort := freePort(t)
	p := start(t, t.TempDir(), "--resp", "127.0.0.1:"+respPort)
	httpHostPort := strings.TrimPrefix(p.addr, "http://")
	ctl := counterctlBin(t) // built once per test binary
	blocks := regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	ran := 0
	for _, b := range blocks {
		for _, line := range strings.Split(b[1], "\n") {
			line = strings.TrimSpace(line)
			switch {
			case line == "" || strings.HasPrefix(line, "#"), line == "make test", strings.HasPrefix(line, "go run ./cmd/counterd"):
				continue
			case strings.HasPrefix(line, "redis-cli"):
				if _, err := exec.LookPath("redis-cli"); err != nil {
					if os.Getenv("COUNTERD_REQUIRE_SERVICES") == "1" {
						t.Fatal("redis-cli not installed (scripts/install-deps.sh installs it)")
					}
					t.Logf("skip (no redis-cli): %s", line)
					continue
				}
			}
			cmdline := strings.ReplaceAll(line, "localhost:8080", httpHostPort)
			cmdline = strings.ReplaceAll(cmdline, "-p 6380", "-p "+respPort)
			cmdline = strings.ReplaceAll(cmdline, "go run ./cmd/counterctl", ctl+" --addr "+p.addr)
			if strings.Contains(cmdline, " bench ") {
				cmdline = strings.ReplaceAll(cmdline, "--duration 5s", "--duration 1s --no-progress")
			}
			out, err := exec.Command("sh", "-c", cmdline).CombinedOutput()
			if err != nil || strings.Contains(string(out), `"status":"error"`) || strings.HasPrefix(string(out), "(error)") || strings.HasPrefix(string(out), "ERR") {
				t.Errorf("README line failed: %s\n%v\n%s", line, err, out)
			}
			ran++
		}
	}
	if ran < 20 {
		t.Fatalf("ran only %d README lines: did the README lose its examples?", ran)
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	return freePorts(t, 1)[0]
}
