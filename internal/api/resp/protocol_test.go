package resp_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/counterd/counterd/internal/api/resp"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
)

// healthy checks that the server answers PING on a new connection and
// that key still holds want.
func healthy(t testing.TB, addr, key, want string) {
	t.Helper()
	r := dialRaw(t, addr)
	r.send(cmd("PING") + cmd("GET", key))
	if got := r.reply(); got != "+PONG\r\n" {
		t.Fatalf("PING after bad input = %q", got)
	}
	if got := r.reply(); got != want {
		t.Fatalf("GET %s after bad input = %q, want %q", key, got, want)
	}
	r.c.Close()
}

func TestMalformedInput(t *testing.T) {
	ts := start(t, resp.Options{MaxBulkLen: 1024, MaxArgs: 100, MaxCommandBytes: 8192})
	s := dialRaw(t, ts.addr)
	s.send(cmd("SET", "sentinel", "777"))
	mustEqual(t, "SET sentinel", s.reply(), "+OK\r\n")
	const sentinel = "$3\r\n777\r\n"

	cases := []struct {
		name, in, want string
	}{
		{"bulk len near MaxInt64", "*1\r\n$9223372036854775807\r\nabc", "-ERR Protocol error: invalid bulk length\r\n"},
		{"bulk len overflowing int64", "*1\r\n$99999999999999999999999\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"bulk len over MaxBulkLen", "*1\r\n$1025\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"negative bulk len", "*1\r\n$-5\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"empty bulk len", "*1\r\n$\r\n\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"bulk len with junk", "*1\r\n$3x\r\nabc\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"bulk longer than its length", "*1\r\n$3\r\nabcd\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"bulk without CRLF", "*1\r\n$4\r\nPINGxx", "-ERR Protocol error: invalid bulk length\r\n"},
		{"LF without CR", "*1\n$4\nPING\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"huge multibulk", "*9223372036854775807\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"multibulk over MaxArgs", "*101\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"integer instead of bulk", "*2\r\n:1\r\n", "-ERR Protocol error: expected '$', got ':'\r\n"},
		{"binary instead of bulk", "*2\r\n\x00\x01", "-ERR Protocol error: expected '$', got '\\x00'\r\n"},
		{"command over MaxCommandBytes", "*9\r\n" + strings.Repeat("$1000\r\n"+strings.Repeat("x", 1000)+"\r\n", 9), "-ERR Protocol error: too big request\r\n"},
		{"inline line over 64KiB", strings.Repeat("A", 70000), "-ERR Protocol error: too big inline request\r\n"},
		{"unbalanced quotes inline", "SET \"sentinel 1\r\n", "-ERR Protocol error: unbalanced quotes in request\r\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := dialRaw(t, ts.addr)
			r.send(tc.in)
			got := r.expectClosed()
			if got != tc.want {
				t.Fatalf("reply = %q, want %q", got, tc.want)
			}
			healthy(t, ts.addr, "sentinel", sentinel)
		})
	}

	t.Run("commands before a bad one still run", func(t *testing.T) {
		r := dialRaw(t, ts.addr)
		r.send(cmd("INCR", "before") + cmd("INCR", "before") + "*1\r\n$99999999999\r\n" + cmd("INCR", "before"))
		got := r.expectClosed()
		want := ":1\r\n:2\r\n-ERR Protocol error: invalid bulk length\r\n"
		if got != want {
			t.Fatalf("reply = %q, want %q", got, want)
		}
		healthy(t, ts.addr, "before", "$1\r\n2\r\n")
	})

	t.Run("limits are inclusive", func(t *testing.T) {
		r := dialRaw(t, ts.addr)
		args := make([]string, 100)
		args[0] = "EXISTS"
		for i := 1; i < len(args); i++ {
			args[i] = "k"
		}
		r.send(cmd(args...))
		mustEqual(t, "EXISTS with 99 keys", r.reply(), ":0\r\n")
		r.send(cmd("ECHO", strings.Repeat("e", 1024)))
		mustEqual(t, "ECHO 1024 bytes", r.reply(), "$1024\r\n"+strings.Repeat("e", 1024)+"\r\n")
	})

	t.Run("inline commands", func(t *testing.T) {
		r := dialRaw(t, ts.addr)
		// "*0", "*-1" and blank lines are ignored, like in Redis.
		r.send("*0\r\n*-1\r\nPING\r\nINCR inline\n\r\nECHO \"a b\"\r\n\r\n")
		mustEqual(t, "inline PING", r.reply(), "+PONG\r\n")
		mustEqual(t, "inline INCR", r.reply(), ":1\r\n")
		mustEqual(t, "inline ECHO", r.reply(), "$3\r\na b\r\n")
	})

	t.Run("byte by byte", func(t *testing.T) {
		r := dialRaw(t, ts.addr)
		in := cmd("INCRBY", "slowly", "5") + cmd("GET", "slowly")
		for i := 0; i < len(in); i++ {
			r.send(in[i : i+1])
		}
		mustEqual(t, "INCRBY", r.reply(), ":5\r\n")
		mustEqual(t, "GET", r.reply(), "$1\r\n5\r\n")
	})

	t.Run("partial command then close", func(t *testing.T) {
		r := dialRaw(t, ts.addr)
		r.send("*3\r\n$3\r\nSET\r\n$8\r\nsentinel\r\n$1000\r\n12")
		r.c.Close()
		healthy(t, ts.addr, "sentinel", sentinel)
	})

	t.Run("QUIT", func(t *testing.T) {
		r := dialRaw(t, ts.addr)
		r.send(cmd("QUIT") + cmd("SET", "sentinel", "1"))
		mustEqual(t, "QUIT", r.expectClosed(), "+OK\r\n")
		healthy(t, ts.addr, "sentinel", sentinel)
	})
}

// randomKey returns a key name no fuzz input can guess.
func randomKey() string {
	b := make([]byte, 16)
	rand.Read(b)
	return "sentinel:" + hex.EncodeToString(b)
}

// FuzzRESP writes arbitrary bytes to a live connection, then checks that
// the server still answers PING on a new connection and that a sentinel
// key nobody can name still holds its value.
func FuzzRESP(f *testing.F) {
	for _, seed := range []string{
		cmd("PING"),
		cmd("INCR", "a") + cmd("GET", "a"),
		cmd("SET", "k", "1", "EX", "10", "NX"),
		cmd("HINCRBY", "h", "f", "1") + cmd("HGETALL", "h"),
		cmd("PFADD", "p", "x", "y") + cmd("PFCOUNT", "p", "q"),
		cmd("MULTI") + cmd("INCR", "a") + cmd("EXEC"),
		cmd("SCAN", "0", "MATCH", "*", "COUNT", "5"),
		cmd("HELLO", "3") + cmd("CLIENT", "SETNAME", "x"),
		"*1\r\n$9223372036854775807\r\nabc",
		"*2147483648\r\n",
		"*1\r\n$-1\r\n",
		"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\n",
		"PING\r\nINCR x\r\n",
		"\x00\xff\r\n*\r\n$\r\n",
		"*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPI",
	} {
		f.Add([]byte(seed))
	}
	ts := start(f, resp.Options{MaxBulkLen: 1 << 16, MaxArgs: 1024, MaxCommandBytes: 1 << 20})
	key := randomKey()
	s := dialRaw(f, ts.addr)
	s.send(cmd("SET", key, "424242"))
	if got := s.reply(); got != "+OK\r\n" {
		f.Fatalf("SET sentinel = %q", got)
	}
	s.c.Close()
	want := "$6\r\n424242\r\n"

	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := net.DialTimeout("tcp", ts.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		// Read concurrently so that a large reply cannot block the write.
		drained := make(chan error, 1)
		go func() {
			_, err := io.Copy(io.Discard, c)
			drained <- err
		}()
		c.Write(in)
		c.(*net.TCPConn).CloseWrite() // EOF: the server closes after answering
		if err := <-drained; err != nil && !isConnReset(err) {
			t.Fatalf("connection did not end cleanly: %v", err)
		}
		healthy(t, ts.addr, key, want)
	})
}

func isConnReset(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "reset by peer") || strings.Contains(err.Error(), "broken pipe"))
}

func TestServeClose(t *testing.T) {
	eng := openEngine(t)
	defer eng.Close()

	// Close before Serve: Serve returns at once.
	srv := resp.New(engine.Local(eng), resp.Options{})
	mustOK(t, "Close", srv.Close())
	mustOK(t, "Close again", srv.Close())
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	mustOK(t, "Serve after Close", srv.Serve(ln))
	if _, err := ln.Accept(); err == nil {
		t.Fatal("listener still open after Serve on a closed server")
	}

	// Close while serving closes connections and makes Serve return nil.
	srv = resp.New(engine.Local(eng), resp.Options{})
	ln, _ = net.Listen("tcp", "127.0.0.1:0")
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	r := dialRaw(t, ln.Addr().String())
	r.send(cmd("PING"))
	mustEqual(t, "PING", r.reply(), "+PONG\r\n")
	mustEqual(t, "Addr", srv.Addr().String(), ln.Addr().String())
	idle := dialRaw(t, ln.Addr().String()) // never sends anything
	half := dialRaw(t, ln.Addr().String())
	half.send("*2\r\n$4\r\nECHO\r\n$100\r\nabc") // stuck mid-command
	time.Sleep(50 * time.Millisecond)
	mustOK(t, "Close", srv.Close())
	select {
	case err := <-done:
		mustOK(t, "Serve", err)
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after Close")
	}
	r.expectClosed()
	idle.expectClosed()
	half.expectClosed()
	mustOK(t, "Close again", srv.Close())
	if err := srv.Serve(ln); err != nil {
		t.Fatalf("Serve after Close = %v", err)
	}
}

func TestMaxConns(t *testing.T) {
	ts := start(t, resp.Options{MaxConns: 2})
	a, b := dialRaw(t, ts.addr), dialRaw(t, ts.addr)
	a.send(cmd("PING"))
	a.reply()
	b.send(cmd("PING"))
	b.reply()
	c := dialRaw(t, ts.addr)
	mustEqual(t, "third connection", c.expectClosed(), "-ERR max number of clients reached\r\n")
	a.c.Close()
	// The slot frees once the server noticed the close.
	deadline := time.Now().Add(5 * time.Second)
	for {
		d := dialRaw(t, ts.addr)
		d.send(cmd("PING"))
		d.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, _ := readReply(d.rd)
		if got == "+PONG\r\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no slot after a close: %q", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	info := dialRaw(t, ts.addr)
	_ = info
}

func TestIdleTimeout(t *testing.T) {
	ts := start(t, resp.Options{IdleTimeout: 100 * time.Millisecond})
	r := dialRaw(t, ts.addr)
	r.send(cmd("PING"))
	mustEqual(t, "PING", r.reply(), "+PONG\r\n")
	start := time.Now()
	r.expectClosed()
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("closed after %v", d)
	}
}

// A client that pipelines without reading its replies, and idle clients,
// must not slow down the others.
func TestSlowClientsDoNotStallOthers(t *testing.T) {
	ts := start(t, resp.Options{})
	for i := 0; i < 50; i++ {
		dialRaw(t, ts.addr) // idle
	}
	slow := dialRaw(t, ts.addr)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// ~20 MB of replies that are never read: the server blocks writing
		// to this connection once the socket buffers are full.
		chunk := strings.Repeat(cmd("ECHO", strings.Repeat("x", 1000)), 1000)
		slow.c.SetWriteDeadline(time.Now().Add(20 * time.Second))
		for i := 0; i < 20; i++ {
			if _, err := slow.c.Write([]byte(chunk)); err != nil {
				return
			}
		}
	}()
	time.Sleep(200 * time.Millisecond)
	fast := dialRaw(t, ts.addr)
	for i := 0; i < 100; i++ {
		fast.c.SetReadDeadline(time.Now().Add(2 * time.Second))
		fast.send(cmd("INCR", "fast"))
		mustEqual(t, "INCR", fast.reply(), fmt.Sprintf(":%d\r\n", i+1))
	}
	slow.c.Close()
	wg.Wait()
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	ts := start(t, resp.Options{Registerer: reg})
	// A second server on the same registry shares the collectors.
	ts2 := startOn(t, openEngine(t), resp.Options{Registerer: reg})
	rdb := newGoRedis(t, ts.addr, 2)
	rdb2 := newGoRedis(t, ts2.addr, 2)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		rdb.Incr(ctx, "m")
	}
	rdb2.Incr(ctx, "m")
	rdb.Get(ctx, "m")
	rdb.Do(ctx, "NOSUCH")
	rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Incr(ctx, "m")
		return nil
	})
	r := dialRaw(t, ts.addr)
	r.send("*1\r\n$-2\r\n")
	r.expectClosed()

	mfs, err := reg.Gather()
	mustOK(t, "Gather", err)
	get := func(name string, label string) *dto.Metric {
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				if label == "" {
					return m
				}
				for _, lp := range m.GetLabel() {
					if lp.GetName() == "cmd" && lp.GetValue() == label {
						return m
					}
				}
			}
		}
		t.Fatalf("metric %s{cmd=%q} not found", name, label)
		return nil
	}
	mustEqual(t, "incr count", get("counterd_resp_commands_total", "incr").GetCounter().GetValue(), 5)
	mustEqual(t, "incr histogram", get("counterd_resp_command_duration_seconds", "incr").GetHistogram().GetSampleCount(), 5)
	mustEqual(t, "get count", get("counterd_resp_commands_total", "get").GetCounter().GetValue(), 1)
	mustEqual(t, "unknown count", get("counterd_resp_commands_total", "unknown").GetCounter().GetValue(), 1)
	mustEqual(t, "exec count", get("counterd_resp_commands_total", "exec").GetCounter().GetValue(), 1)
	if get("counterd_resp_protocol_errors_total", "").GetCounter().GetValue() < 1 {
		t.Fatal("protocol error not counted")
	}
	if get("counterd_resp_connections_total", "").GetCounter().GetValue() < 3 {
		t.Fatal("connections not counted")
	}
}

// The server runs on an engine the HTTP API shares: writes through the
// engine are visible over RESP and the other way round.
func TestSharedEngine(t *testing.T) {
	ts := start(t, resp.Options{})
	ctx := context.Background()
	if _, err := ts.eng.Add(ctx, "shared", 41, contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	rdb := newGoRedis(t, ts.addr, 3)
	mustEqual(t, "INCR", rdb.Incr(ctx, "shared").Val(), 42)
	v, err := ts.eng.Get("shared")
	mustOK(t, "Get", err)
	mustEqual(t, "engine value", v.Value, 42)
	// Sharded and PN counters are additive: INCR and GET work on them.
	if _, err := ts.eng.Apply(ctx, contract.Op{Type: contract.OpAdd, ID: "sh", Kind: contract.KindSharded, Delta: 10}, contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "INCR sharded", rdb.Incr(ctx, "sh").Val(), 11)
	mustEqual(t, "GET sharded", rdb.Get(ctx, "sh").Val(), "11")
	mustEqual(t, "TYPE sharded", rdb.Type(ctx, "sh").Val(), "string")
}

// TestQueryBufferBudgetCloses sends half of a command bigger than the
// server-wide query buffer budget: the connection is told why and closed,
// the server keeps serving others.
func TestQueryBufferBudgetCloses(t *testing.T) {
	ts := start(t, resp.Options{MaxQueryBufferTotal: 1 << 20})
	big := dialRaw(t, ts.addr)
	// A 3 MiB argument, of which 2 MiB are sent: the buffer must grow
	// past the 1 MiB budget before the command is complete.
	// The server closes the connection with input unread, so the kernel
	// may answer the rest of the write with a reset, which can also drop
	// the error reply before it is read: the reply is checked when it
	// arrives, the close always.
	big.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, werr := big.c.Write([]byte("*2\r\n$4\r\nECHO\r\n$3145728\r\n" + strings.Repeat("x", 2<<20)))
	if werr != nil && !errors.Is(werr, syscall.ECONNRESET) && !errors.Is(werr, syscall.EPIPE) {
		t.Fatalf("write: %v", werr)
	}
	got := big.expectClosed()
	if (werr == nil || got != "") && !strings.Contains(got, "max query buffer memory reached") {
		t.Fatalf("big client got %q (write error %v), want the budget error", got, werr)
	}
	other := dialRaw(t, ts.addr)
	other.send(cmd("INCR", "after"))
	mustEqual(t, "INCR", other.reply(), ":1\r\n")
}
