// Package redistest gives tests a real Redis server.
//
// New returns the server named by COUNTERD_TEST_REDIS (host:port or a
// redis:// URL) when that is set. Otherwise it starts a private
// redis-server from PATH for the calling test (about 10 ms): bound to
// 127.0.0.1 on a free port, with persistence off and its working directory
// in t.TempDir(), stopped by t.Cleanup. A private server gives each test
// full isolation and lets failure tests Stop, Start and Restart it. When
// neither is available the test is skipped, or fails when
// COUNTERD_REQUIRE_SERVICES=1 (as in CI).
//
// NewCluster does the same for a Redis Cluster: COUNTERD_TEST_REDIS_CLUSTER,
// or three private masters (about 2 s to start, most of it Redis' own
// delay before a fresh master serves), with AddReplica and Failover for
// failover tests.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/testutil/ports"
)

// Environment variables read by New.
const (
	EnvRedis           = "COUNTERD_TEST_REDIS"
	EnvRequireServices = "COUNTERD_REQUIRE_SERVICES"
)

// startTimeout bounds how long a private server may take to answer PING.
const startTimeout = 10 * time.Second

// Server is a Redis server for one test. Its methods are safe for
// concurrent use; t.Cleanup stops a private server.
type Server struct {
	// Addr is host:port. URL is the redis:// URL to pass to clients,
	// including the database number of an external server.
	Addr string
	URL  string

	external bool
	bin      string
	dir      string
	extra    []string // more redis-server arguments

	mu  sync.Mutex // guards cmd
	cmd *exec.Cmd  // nil while stopped or external
}

// New returns a Redis server for t, as described in the package comment.
// With an external server (COUNTERD_TEST_REDIS) the database is flushed
// first, so tests sharing one must not run in parallel.
func New(t testing.TB) *Server {
	t.Helper()
	return NewArgs(t)
}

// NewArgs is New with extra redis-server arguments for the private
// server, such as "--cluster-enabled", "yes". It skips the test when the
// server is the external one, which the arguments cannot apply to.
func NewArgs(t testing.TB, extra ...string) *Server {
	t.Helper()
	if env := os.Getenv(EnvRedis); env != "" {
		s := external(t, env)
		if len(extra) > 0 {
			t.Skipf("redistest: cannot apply %q to the external server %s", extra, s.Addr)
		}
		s.FlushAll(t)
		return s
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		unavailable(t, EnvRedis, "no redis-server on PATH and "+EnvRedis+" is not set")
	}
	s := &Server{bin: bin, dir: t.TempDir(), extra: extra}
	t.Cleanup(func() { s.stop() })
	var lastErr error
	for range 3 { // a free port can be taken between probing and binding
		port, err := freePort()
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		s.URL = "redis://" + s.Addr + "/0"
		if lastErr = s.start(); lastErr == nil {
			return s
		}
	}
	t.Fatalf("redistest: start redis-server: %v", lastErr)
	return nil
}

func external(t testing.TB, env string) *Server {
	if !strings.Contains(env, "://") {
		env = "redis://" + env
	}
	u, err := url.Parse(env)
	if err != nil || u.Host == "" {
		t.Fatalf("redistest: %s=%q is not host:port or a redis:// URL", EnvRedis, env)
	}
	s := &Server{Addr: u.Host, URL: env, external: true}
	if err := ping(s.Addr, time.Second); err != nil {
		unavailable(t, EnvRedis, fmt.Sprintf("%s=%s does not answer: %v", EnvRedis, env, err))
	}
	return s
}

// unavailable skips t, or fails it under COUNTERD_REQUIRE_SERVICES=1;
// env is the variable that would name an external server.
func unavailable(t testing.TB, env, why string) {
	t.Helper()
	if os.Getenv(EnvRequireServices) == "1" {
		t.Fatalf("redistest: %s (%s=1)", why, EnvRequireServices)
	}
	t.Skipf("redistest: %s; skipping (install redis-server or set %s)", why, env)
}

// External reports whether the server is the shared one from
// COUNTERD_TEST_REDIS, which Stop, Start and Restart cannot control.
func (s *Server) External() bool { return s.external }

// FlushAll removes every key (FLUSHALL on a private server, FLUSHDB on an
// external one, which may hold other databases).
func (s *Server) FlushAll(t testing.TB) {
	t.Helper()
	cmd := "FLUSHALL"
	if s.external {
		cmd = "FLUSHDB"
	}
	if _, err := s.Do(cmd); err != nil {
		t.Fatalf("redistest: %s: %v", cmd, err)
	}
}

// Stop kills a private server; its data is lost (persistence is off).
// Clients see connection errors until Start.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.mustControl(t)
	s.stop()
}

// Start starts a stopped private server again on the same address.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	s.mustControl(t)
	if err := s.start(); err != nil {
		t.Fatalf("redistest: restart on %s: %v", s.Addr, err)
	}
}

// Restart is Stop then Start: the server comes back empty.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop(t)
	s.Start(t)
}

func (s *Server) mustControl(t testing.TB) {
	t.Helper()
	if s.external {
		t.Skipf("redistest: cannot stop the external server %s", s.Addr)
	}
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil
	}
	_, port, _ := net.SplitHostPort(s.Addr)
	cmd := exec.Command(s.bin,
		"--port", port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--protected-mode", "no", "--loglevel", "warning")
	cmd.Args = append(cmd.Args, s.extra...)
	cmd.SysProcAttr = sysProcAttr()
	out, err := os.Create(s.dir + "/redis.log")
	if err != nil {
		return err
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(startTimeout)
	for {
		if err := ping(s.Addr, 200*time.Millisecond); err == nil {
			s.cmd = cmd
			return nil
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(s.dir + "/redis.log")
			return fmt.Errorf("redis-server exited: %s", strings.TrimSpace(string(log)))
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("no answer to PING on %s within %v", s.Addr, startTimeout)
		}
	}
}

func (s *Server) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	// Wait until the port is closed so that Start can bind it again.
	for i := 0; i < 1000 && ping(s.Addr, 50*time.Millisecond) == nil; i++ {
		time.Sleep(time.Millisecond)
	}
	s.cmd = nil
}

// Do sends one command (inline arguments without spaces) and returns the
// first line of the reply; a Redis error reply is returned as an error.
// It needs no client library, so tests can poke the server directly.
func (s *Server) Do(args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", s.Addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if u, err := url.Parse(s.URL); err == nil && len(u.Path) > 1 && u.Path != "/0" {
		// Select the external server's database first.
		db := strings.TrimPrefix(u.Path, "/")
		if _, err := fmt.Fprintf(c, "*2\r\n$6\r\nSELECT\r\n$%d\r\n%s\r\n", len(db), db); err != nil {
			return "", err
		}
		if _, err := readLine(bufio.NewReader(c)); err != nil {
			return "", err
		}
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	return readLine(bufio.NewReader(c))
}

func readLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if strings.HasPrefix(line, "-") {
		return "", fmt.Errorf("redis: %s", line[1:])
	}
	if strings.HasPrefix(line, "$") && line != "$-1" {
		v, err := r.ReadString('\n')
		return strings.TrimRight(v, "\r\n"), err
	}
	return line, nil
}

func ping(addr string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// freePort picks a port below the kernel's ephemeral range (see package
// ports), so no other process's connection takes it before the server binds.
func freePort() (int, error) { return ports.One() }
