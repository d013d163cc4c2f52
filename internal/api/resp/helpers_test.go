package resp_test

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/counterd/counterd/internal/api/resp"
	"github.com/counterd/counterd/internal/engine"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Pebble's shared caches and go-redis's/rueidis's process-wide
		// helpers outlive individual instances by design.
		goleak.IgnoreTopFunction("github.com/cockroachdb/pebble/internal/cache.(*shard).releaseLoop"),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*hmap).Close"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

// testEventLoops is Options.EventLoops for tests that leave it 0: every
// test runs on the event loops (counterd's default mode), and
// TestGoroutinePerConnection runs the protocol tests again with a
// goroutine per connection (EventLoops -1).
var testEventLoops = 2

type testServer struct {
	srv  *resp.Server
	eng  *engine.Engine
	addr string
	done chan error
}

func openEngine(t testing.TB) *engine.Engine {
	t.Helper()
	cfg := engine.DefaultConfig()
	cfg.InMemory = true
	cfg.NodeID = "test"
	eng, err := engine.Open(cfg)
	if err != nil {
		t.Fatalf("engine.Open: %v", err)
	}
	return eng
}

// start runs an engine and a Server on a free loopback port; both stop at
// the end of the test.
func start(t testing.TB, opts resp.Options) *testServer {
	t.Helper()
	eng := openEngine(t)
	return startOn(t, eng, opts)
}

func startOn(t testing.TB, eng *engine.Engine, opts resp.Options) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if opts.EventLoops == 0 {
		opts.EventLoops = testEventLoops
	}
	srv := resp.New(engine.Local(eng), opts)
	ts := &testServer{srv: srv, eng: eng, addr: ln.Addr().String(), done: make(chan error, 1)}
	go func() { ts.done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		select {
		case err := <-ts.done:
			if err != nil {
				t.Errorf("Serve returned %v after Close", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Serve did not return after Close")
		}
		if err := eng.Close(); err != nil {
			t.Errorf("engine Close: %v", err)
		}
	})
	return ts
}

// rawConn is a bare TCP connection speaking RESP by hand.
type rawConn struct {
	t  testing.TB
	c  net.Conn
	rd *bufio.Reader
}

func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c, rd: bufio.NewReader(c)}
}

func (r *rawConn) send(s string) {
	r.t.Helper()
	r.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.c.Write([]byte(s)); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

// cmd encodes args as a RESP multibulk command.
func cmd(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

// reply reads one complete reply and returns it in its wire form.
func (r *rawConn) reply() string {
	r.t.Helper()
	r.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	s, err := readReply(r.rd)
	if err != nil {
		r.t.Fatalf("read reply: %v (got %q)", err, s)
	}
	return s
}

// readReply reads one RESP2/RESP3 value and returns its raw bytes.
func readReply(rd *bufio.Reader) (string, error) {
	line, err := rd.ReadString('\n')
	if err != nil {
		return line, err
	}
	if len(line) < 3 {
		return line, fmt.Errorf("short line %q", line)
	}
	body := line[1 : len(line)-2]
	switch line[0] {
	case '+', '-', ':', '_', ',', '#', '(':
		return line, nil
	case '$', '=', '!':
		var n int
		fmt.Sscan(body, &n)
		if n < 0 {
			return line, nil
		}
		buf := make([]byte, n+2)
		if _, err := ioReadFull(rd, buf); err != nil {
			return line, err
		}
		return line + string(buf), nil
	case '*', '~', '>', '%', '|':
		var n int
		fmt.Sscan(body, &n)
		if line[0] == '%' || line[0] == '|' {
			n *= 2
		}
		out := line
		for i := 0; i < n; i++ {
			s, err := readReply(rd)
			out += s
			if err != nil {
				return out, err
			}
		}
		return out, nil
	}
	return line, fmt.Errorf("unknown type %q", line)
}

func ioReadFull(rd *bufio.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := rd.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// expectClosed waits for the server to close the connection, returning
// what it sent before.
func (r *rawConn) expectClosed() string {
	r.t.Helper()
	r.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := r.rd.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				r.t.Fatalf("connection not closed; got %q", b.String())
			}
			return b.String()
		}
	}
}

// TestGoroutinePerConnection runs the connection-level tests again with a
// goroutine per connection (EventLoops -1), the mode of TLS connections
// and of backends whose commands may block.
func TestGoroutinePerConnection(t *testing.T) {
	old := testEventLoops
	testEventLoops = -1
	defer func() { testEventLoops = old }()
	for name, f := range map[string]func(*testing.T){
		"GoRedis": TestGoRedis, "MalformedInput": TestMalformedInput, "ServeClose": TestServeClose,
		"MaxConns": TestMaxConns, "IdleTimeout": TestIdleTimeout, "SlowClients": TestSlowClientsDoNotStallOthers,
		"RedisCLI": TestRedisCLI, "QueryBufferBudget": TestQueryBufferBudgetCloses,
	} {
		t.Run(name, f)
	}
}
