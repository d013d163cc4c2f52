package resp_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/api/resp"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/testutil/certtest"
)

// shutdownWithin runs srv.Shutdown with a context of timeout and fails the
// test unless it returns within bound; it returns Shutdown's error and how
// long it took.
func shutdownWithin(t *testing.T, srv *resp.Server, timeout, bound time.Duration) (error, time.Duration) {
	t.Helper()
	start := time.Now() // before the deadline is set: took is never less than timeout
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(ctx) }()
	select {
	case err := <-done:
		return err, time.Since(start)
	case <-time.After(bound):
		t.Fatalf("Shutdown did not return within %v", bound)
		return nil, 0
	}
}

// fillUntilBlocked pipelines COMMAND (a reply of tens of KiB) on c, never
// reading, until a write stalls: the server then stopped reading c because
// it is blocked writing replies c does not read.
func fillUntilBlocked(t *testing.T, c net.Conn) {
	t.Helper()
	batch := []byte(strings.Repeat(cmd("COMMAND"), 64))
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		c.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err := c.Write(batch); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return
			}
			t.Fatalf("write: %v", err)
		}
	}
	t.Fatal("the server kept reading: its writes never blocked")
}

// TestShutdownReplyNotRead: a client that pipelines commands with large
// replies and never reads them leaves the server blocked writing to it;
// Shutdown closes the connection, which ends the blocked write, and
// returns at once, in both connection modes.
func TestShutdownReplyNotRead(t *testing.T) {
	for _, loops := range []int{-1, 2} {
		t.Run(fmt.Sprintf("loops=%d", loops), func(t *testing.T) {
			ts := start(t, resp.Options{EventLoops: loops})
			c, err := net.Dial("tcp", ts.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.(*net.TCPConn).SetReadBuffer(4 << 10) // no autotuning: the replies back up soon
			fillUntilBlocked(t, c)
			err, took := shutdownWithin(t, ts.srv, 5*time.Second, 10*time.Second)
			if err != nil {
				t.Fatalf("Shutdown: %v after %v", err, took)
			}
			if took > 2*time.Second {
				t.Fatalf("Shutdown took %v", took)
			}
		})
	}
}

// stuckBackend's Get of the id "stuck" blocks until release is closed,
// whatever its context says (a backend stuck on a lock, a disk or a peer).
type stuckBackend struct {
	contract.Backend
	entered chan struct{}
	release chan struct{}
}

func (b *stuckBackend) Get(ctx context.Context, id string) (contract.View, error) {
	if id == "stuck" {
		b.entered <- struct{}{}
		<-b.release
	}
	return b.Backend.Get(ctx, id)
}

// TestShutdownCommandIgnoresCancel: a command stuck in the backend, which
// ignores the cancellation Shutdown gives it, holds its connection's
// goroutine (or its event loop): Shutdown returns ctx's error once ctx is
// done instead of waiting for it (Close, without a deadline, never
// returned), and Serve returns once the command does.
func TestShutdownCommandIgnoresCancel(t *testing.T) {
	for _, loops := range []int{-1, 2} {
		t.Run(fmt.Sprintf("loops=%d", loops), func(t *testing.T) {
			eng := openEngine(t)
			defer eng.Close()
			be := &stuckBackend{Backend: engine.Local(eng), entered: make(chan struct{}, 1), release: make(chan struct{})}
			released := false
			defer func() {
				if !released {
					close(be.release)
				}
			}()
			srv := resp.New(be, resp.Options{EventLoops: loops})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			served := make(chan error, 1)
			go func() { served <- srv.Serve(ln) }()
			r := dialRaw(t, ln.Addr().String())
			r.send(cmd("GET", "stuck"))
			select {
			case <-be.entered:
			case <-time.After(5 * time.Second):
				t.Fatal("GET never reached the backend")
			}

			const timeout = 300 * time.Millisecond
			err, took := shutdownWithin(t, srv, timeout, timeout+5*time.Second)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Shutdown = %v after %v, want the context's deadline", err, took)
			}
			if took < timeout {
				t.Fatalf("Shutdown returned after %v, before its deadline", took)
			}
			select {
			case err := <-served:
				t.Fatalf("Serve returned (%v) while a command was still running", err)
			default:
			}

			close(be.release)
			released = true
			select {
			case err := <-served:
				if err != nil {
					t.Fatalf("Serve: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Serve did not return once the command did")
			}
			if err := srv.Close(); err != nil { // all done now: Close returns at once
				t.Fatalf("Close: %v", err)
			}
		})
	}
}

// pipeListener hands out the server ends of net.Pipe connections.
type pipeListener struct {
	conns     chan net.Conn
	closeOnce sync.Once
	closed    chan struct{}
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

// dial returns the client end of a new connection.
func (l *pipeListener) dial(t *testing.T) net.Conn {
	t.Helper()
	client, server := net.Pipe()
	select {
	case l.conns <- server:
	case <-time.After(5 * time.Second):
		t.Fatal("the server did not accept")
	}
	return client
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// TestShutdownTLSPeerNotReading: closing a TLS connection sends a
// close_notify alert first, which waits up to 5 s for a peer that does
// not read (here a net.Pipe, which buffers nothing) while the connection's
// goroutine waits for a command; Shutdown closes the connection under it
// and returns at once.
func TestShutdownTLSPeerNotReading(t *testing.T) {
	ca := certtest.NewCA(t, "test-ca")
	cert := ca.Issue(t, "localhost").TLS(t)
	eng := openEngine(t)
	defer eng.Close()
	srv := resp.New(engine.Local(eng), resp.Options{})
	pl := newPipeListener()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(tls.NewListener(pl, &tls.Config{Certificates: []tls.Certificate{cert}})) }()
	defer srv.Close()

	tc := tls.Client(pl.dial(t), &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"})
	defer tc.Close()
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := tc.Write([]byte(cmd("PING"))); err != nil {
		t.Fatal(err)
	}
	if got, err := readReply(bufio.NewReader(tc)); err != nil || got != "+PONG\r\n" {
		t.Fatalf("PING = %q, %v", got, err)
	}
	// From here the client reads nothing: the server's goroutine waits
	// for the next command.

	err, took := shutdownWithin(t, srv, 3*time.Second, 10*time.Second)
	if err != nil {
		t.Fatalf("Shutdown: %v after %v", err, took)
	}
	if took > time.Second {
		t.Fatalf("Shutdown took %v", took)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return")
	}
}
