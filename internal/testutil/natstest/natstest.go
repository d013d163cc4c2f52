// Package natstest gives a test a NATS server with JetStream: the one
// named by COUNTERD_TEST_NATS (a URL such as nats://127.0.0.1:4222), else
// a private `nats-server -js` started from the installed binary on a free
// loopback port with its store in a temp dir, stopped by t.Cleanup. With
// neither the test is skipped, or fails when COUNTERD_REQUIRE_SERVICES=1
// (CI). Tests sharing a server use their own stream names (Name).
package natstest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// EnvNATS names an external server; EnvRequireServices turns skips into
// failures.
const (
	EnvNATS            = "COUNTERD_TEST_NATS"
	EnvRequireServices = "COUNTERD_REQUIRE_SERVICES"
)

// New returns the URL of a JetStream-enabled NATS server for t.
func New(t testing.TB) string {
	t.Helper()
	if u := os.Getenv(EnvNATS); u != "" {
		return u
	}
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		if os.Getenv(EnvRequireServices) == "1" {
			t.Fatalf("natstest: no nats-server on PATH and %s is not set (%s=1)", EnvNATS, EnvRequireServices)
		}
		t.Skipf("natstest: no nats-server on PATH and %s is not set; skipping (apt-get install nats-server)", EnvNATS)
	}
	var lastErr error
	for range 3 { // a free port can be taken between probing and binding
		lastErr = nil
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("natstest: %v", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		dir := t.TempDir()
		cmd := exec.Command(bin, "-js", "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-sd", dir)
		cmd.Stdout, cmd.Stderr = nil, nil
		if err := cmd.Start(); err != nil {
			t.Fatalf("natstest: start nats-server: %v", err)
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		t.Cleanup(func() { cmd.Process.Kill(); <-done })
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		deadline := time.Now().Add(15 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case <-done:
				lastErr = fmt.Errorf("nats-server exited")
			default:
			}
			if lastErr != nil {
				break
			}
			if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				c.Close()
				return "nats://" + addr
			}
			time.Sleep(20 * time.Millisecond)
		}
		if lastErr == nil {
			lastErr = fmt.Errorf("nats-server did not listen on %s", addr)
		}
	}
	t.Fatalf("natstest: %v", lastErr)
	return ""
}

// Server is a private nats-server a test can stop and start again on the
// same port and store directory (its streams and durable consumers
// survive), to play an outage.
type Server struct {
	t    testing.TB
	bin  string
	port int
	dir  string
	URL  string
	cmd  *exec.Cmd
	done chan struct{}
}

// NewServer starts a private JetStream server for t (never the one named
// by COUNTERD_TEST_NATS: it must be stoppable), stopped by t.Cleanup.
// Without nats-server on PATH the test is skipped, or fails when
// COUNTERD_REQUIRE_SERVICES=1.
func NewServer(t testing.TB) *Server {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		if os.Getenv(EnvRequireServices) == "1" {
			t.Fatalf("natstest: no nats-server on PATH (%s=1)", EnvRequireServices)
		}
		t.Skipf("natstest: no nats-server on PATH; skipping (apt-get install nats-server)")
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir()}
	var lastErr error
	for range 3 { // a free port can be taken between probing and binding
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("natstest: %v", err)
		}
		s.port = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if lastErr = s.start(); lastErr == nil {
			s.URL = "nats://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
			t.Cleanup(s.Stop)
			return s
		}
	}
	t.Fatalf("natstest: %v", lastErr)
	return nil
}

func (s *Server) start() error {
	cmd := exec.Command(s.bin, "-js", "-a", "127.0.0.1", "-p", strconv.Itoa(s.port), "-sd", s.dir)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start nats-server: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); {
		select {
		case <-done:
			s.cmd = nil
			return fmt.Errorf("nats-server exited")
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Stop()
	return fmt.Errorf("nats-server did not listen on %s", addr)
}

// Stop stops the server (SIGTERM, so what it acknowledged is on its
// store when it starts again; SIGKILL after 10 s). Clients see their
// connections drop and new ones refused. Stopping a stopped server does
// nothing.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
}

// Start starts the stopped server again on its port and store directory.
func (s *Server) Start() {
	s.t.Helper()
	if s.cmd != nil {
		return
	}
	if err := s.start(); err != nil {
		s.t.Fatalf("natstest: restart: %v", err)
	}
}

// Name returns a name unique to this call, prefixed, for streams,
// subjects and consumers ("T_3f2a...").
func Name(prefix string) string {
	var b [6]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
