// Package pgtest gives tests a real PostgreSQL database.
//
// New (and DSN) return a fresh, uniquely named database per test, so tests
// are isolated and may run in parallel. The server is, in order of
// preference:
//
//  1. the one named by COUNTERD_TEST_POSTGRES (a DSN whose user may CREATE
//     DATABASE; the test databases are dropped again after each test);
//  2. a private server started from the installed binaries
//     (/usr/lib/postgresql/*/bin/initdb and pg_ctl, or initdb on PATH) on a
//     free 127.0.0.1 port in a temporary directory, once per test binary.
//     As root the binaries are run as the "postgres" user (runuser).
//
// When neither is available the test is skipped, or fails when
// COUNTERD_REQUIRE_SERVICES=1 (CI).
//
// Test packages that use the shared private server should call Main from
// TestMain so that the server is stopped when the tests end:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// A test that needs to stop or restart the server (crash/restart tests)
// starts its own with StartServer; that never disturbs other tests.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/testutil/ports"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// EnvDSN names an existing server to use instead of a private one.
const EnvDSN = "COUNTERD_TEST_POSTGRES"

// EnvRequire, when "1", turns "no PostgreSQL available" into a test failure.
const EnvRequire = "COUNTERD_REQUIRE_SERVICES"

var (
	sharedOnce sync.Once
	shared     *Server
	sharedErr  error
	dbSeq      atomic.Int64
)

// Main runs the tests and then stops the shared private server (if one was
// started) before exiting with m.Run's code.
func Main(m *testing.M) {
	code := m.Run()
	if shared != nil {
		shared.stop("immediate")
		_ = os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

// Unavailable skips the test with msg, or fails it when
// COUNTERD_REQUIRE_SERVICES=1.
func Unavailable(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("PostgreSQL required (%s=1) but unavailable: %s", EnvRequire, msg)
	}
	t.Skipf("PostgreSQL unavailable, skipping: %s (set %s to a DSN or install PostgreSQL server binaries)", msg, EnvDSN)
}

// New returns a pool on a fresh database created for this test. The pool is
// closed when the test ends.
func New(t testing.TB) *pgxpool.Pool {
	t.Helper()
	dsn := DSN(t)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("pgtest: parse dsn: %v", err)
	}
	cfg.MaxConns = 4
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// DSN creates a fresh database for this test and returns its DSN.
func DSN(t testing.TB) string {
	t.Helper()
	if base := os.Getenv(EnvDSN); base != "" {
		return createDB(t, base, true)
	}
	sharedOnce.Do(func() { shared, sharedErr = startServer() })
	if sharedErr != nil {
		Unavailable(t, sharedErr.Error())
	}
	return shared.DSN(t)
}

// Server is a private PostgreSQL server in a temporary directory.
type Server struct {
	dir     string // owned by the server's OS user
	bin     string // directory holding initdb, pg_ctl
	port    int
	runAs   string // "" or "postgres"
	mu      sync.Mutex
	running bool
}

// StartServer starts a private server for this test only (skipping or
// failing the test when impossible) and stops it when the test ends. It
// ignores COUNTERD_TEST_POSTGRES: a shared server cannot be restarted.
func StartServer(t testing.TB) *Server {
	t.Helper()
	s, err := startServer()
	if err != nil {
		Unavailable(t, err.Error())
	}
	t.Cleanup(func() {
		s.stop("immediate")
		_ = os.RemoveAll(s.dir)
	})
	return s
}

// DSN creates a fresh database on s for this test and returns its DSN.
func (s *Server) DSN(t testing.TB) string {
	t.Helper()
	return createDB(t, s.adminDSN(), false)
}

// Stop stops the server abruptly (pg_ctl -m immediate: like a crash; the
// next start runs crash recovery from the WAL).
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if err := s.stop("immediate"); err != nil {
		t.Fatalf("pgtest: stop: %v", err)
	}
}

// Start starts a stopped server again on the same port and data directory.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	if err := s.start(); err != nil {
		t.Fatalf("pgtest: start: %v", err)
	}
}

// Restart is Stop then Start.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop(t)
	s.Start(t)
}

func (s *Server) adminDSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

func createDB(t testing.TB, adminDSN string, drop bool) string {
	t.Helper()
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	name := fmt.Sprintf("counterd_t%d_%d_%s", os.Getpid(), dbSeq.Add(1), hex.EncodeToString(rnd[:]))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		Unavailable(t, fmt.Sprintf("connect to %s: %v", redact(adminDSN), err))
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	if drop {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := pgx.Connect(ctx, adminDSN)
			if err != nil {
				t.Logf("pgtest: drop %s: %v", name, err)
				return
			}
			defer c.Close(context.Background())
			if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
				t.Logf("pgtest: drop %s: %v", name, err)
			}
		})
	}
	u, err := url.Parse(adminDSN)
	if err != nil || u.Scheme == "" {
		// keyword/value DSN
		return adminDSN + " dbname=" + name
	}
	u.Path = "/" + name
	return u.String()
}

func redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxx")
		}
		return u.String()
	}
	return "the configured server"
}

// findBin returns the directory of the newest installed initdb/pg_ctl.
func findBin() (string, error) {
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Slice(matches, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(matches[i]))))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(matches[j]))))
		return vi > vj
	})
	for _, m := range matches {
		dir := filepath.Dir(m)
		if _, err := os.Stat(filepath.Join(dir, "pg_ctl")); err == nil {
			return dir, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "pg_ctl")); err == nil {
			return dir, nil
		}
	}
	return "", errors.New("no PostgreSQL server binaries (initdb, pg_ctl) found")
}

func startServer() (*Server, error) {
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, err
	}
	s.dir = dir
	if os.Geteuid() == 0 {
		// PostgreSQL refuses to run as root.
		if _, err := exec.LookPath("runuser"); err != nil {
			os.RemoveAll(dir)
			return nil, errors.New("running as root and runuser not found")
		}
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, errors.New("running as root and no postgres user")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		s.runAs = "postgres"
	}
	out, err := s.run(45*time.Second, filepath.Join(bin, "initdb"),
		"-D", s.dataDir(), "-U", "postgres", "-A", "trust", "--no-sync",
		"-E", "UTF8", "--locale=C", "--no-instructions")
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v: %s", err, tail(out))
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePort()
		if err != nil {
			lastErr = err
			continue
		}
		s.port = port
		if lastErr = s.start(); lastErr == nil {
			return s, nil
		}
	}
	os.RemoveAll(dir)
	return nil, lastErr
}

func (s *Server) dataDir() string { return filepath.Join(s.dir, "data") }

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return nil
	}
	opts := strings.Join([]string{
		"-F", // fsync off: test data need not survive an OS crash
		"-k", s.dir,
		"-p", strconv.Itoa(s.port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "max_connections=200",
		"-c", "full_page_writes=off",
		"-c", "shared_buffers=32MB",
		"-c", "dynamic_shared_memory_type=mmap",
		"-c", "max_wal_size=256MB",
	}, " ")
	out, err := s.run(60*time.Second, filepath.Join(s.bin, "pg_ctl"),
		"start", "-w", "-t", "50", "-D", s.dataDir(), "-l", filepath.Join(s.dir, "log"), "-o", opts)
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "log"))
		return fmt.Errorf("pg_ctl start: %v: %s %s", err, tail(out), tail(log))
	}
	s.running = true
	return nil
}

func (s *Server) stop(mode string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		return nil
	}
	out, err := s.run(60*time.Second, filepath.Join(s.bin, "pg_ctl"),
		"stop", "-w", "-t", "50", "-m", mode, "-D", s.dataDir())
	if err != nil {
		return fmt.Errorf("pg_ctl stop: %v: %s", err, tail(out))
	}
	s.running = false
	return nil
}

func (s *Server) run(timeout time.Duration, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var cmd *exec.Cmd
	if s.runAs != "" {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", s.runAs, "--", name}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, name, args...)
	}
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	// pg_ctl leaves the postmaster holding our stdout; use a file, not a pipe,
	// so that Wait does not block on the server's lifetime.
	f, err := os.CreateTemp("", "pgtest-out-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	err = cmd.Run()
	out, _ := os.ReadFile(f.Name())
	return out, err
}

// freePort picks a port below the kernel's ephemeral range (see package
// ports), so no other process's connection takes it before the server binds.
func freePort() (int, error) { return ports.One() }

func tail(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	return s
}
