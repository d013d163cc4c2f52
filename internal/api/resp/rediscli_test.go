package resp_test

import (
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/counterd/counterd/internal/api/resp"
)

// redisCLI returns the path of redis-cli, skipping the test when it is not
// installed (failing instead when COUNTERD_REQUIRE_SERVICES=1).
func redisCLI(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("redis-cli")
	if err != nil {
		if os.Getenv("COUNTERD_REQUIRE_SERVICES") == "1" {
			t.Fatalf("redis-cli not found in PATH and COUNTERD_REQUIRE_SERVICES=1: %v", err)
		}
		t.Skip("redis-cli not found in PATH; install redis-tools to run this test (set COUNTERD_REQUIRE_SERVICES=1 to make this a failure)")
	}
	return p
}

func TestRedisCLI(t *testing.T) {
	cli := redisCLI(t)
	ts := start(t, resp.Options{})
	host, port, _ := net.SplitHostPort(ts.addr)
	run := func(stdin string, args ...string) string {
		t.Helper()
		c := exec.Command(cli, append([]string{"-h", host, "-p", port}, args...)...)
		c.Stdin = strings.NewReader(stdin)
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli %v: %v\n%s", args, err, out)
		}
		return strings.TrimRight(string(out), "\n")
	}
	check := func(want string, args ...string) {
		t.Helper()
		if got := run("", args...); got != want {
			t.Fatalf("redis-cli %s = %q, want %q", strings.Join(args, " "), got, want)
		}
	}
	check("1", "INCR", "page_views:article_123")
	check("2", "INCR", "page_views:article_123")
	check("12", "INCRBY", "page_views:article_123", "10")
	check("12", "GET", "page_views:article_123")
	check("1", "PFADD", "visitors", "alice", "bob", "carol")
	check("0", "PFADD", "visitors", "alice")
	check("3", "PFCOUNT", "visitors")
	check("5", "HINCRBY", "article:123", "views", "5")
	check("1", "HINCRBY", "article:123", "likes", "1")
	check("likes\n1\nviews\n5", "HGETALL", "article:123")
	check("PONG", "PING")
	check("string", "TYPE", "page_views:article_123")
	check("hash", "TYPE", "article:123")
	check("ERR value is not an integer or out of range", "SET", "x", "hello")
	check("WRONGTYPE Operation against a key holding the wrong kind of value", "GET", "article:123")
	check("ERR unknown command 'FOO', with args beginning with: 'bar' ", "FOO", "bar")
	// Human-readable (--no-raw) output and RESP3.
	check("(integer) 13", "--no-raw", "INCR", "page_views:article_123")
	check("1) \"likes\"\n2) \"1\"\n3) \"views\"\n4) \"5\"", "--no-raw", "HGETALL", "article:123")
	check("1# \"likes\" => \"1\"\n2# \"views\" => \"5\"", "-3", "--no-raw", "HGETALL", "article:123")
	check("(nil)", "-3", "--no-raw", "GET", "missing")
	// Commands read from stdin, and --pipe (mass insertion).
	if got := run("INCR piped\nINCR piped\nGET piped\n"); got != "1\n2\n2" {
		t.Fatalf("redis-cli with stdin = %q", got)
	}
	var mass strings.Builder
	for i := 0; i < 1000; i++ {
		mass.WriteString(cmd("INCR", "mass"))
	}
	if got := run(mass.String(), "--pipe"); !strings.Contains(got, "errors: 0, replies: 1000") {
		t.Fatalf("redis-cli --pipe = %q", got)
	}
	check("1000", "GET", "mass")
	// SCAN iteration through redis-cli, and INFO.
	if got := run("", "--scan", "--pattern", "page_*"); got != "page_views:article_123" {
		t.Fatalf("redis-cli --scan = %q", got)
	}
	if got := run("", "INFO", "keyspace"); !strings.Contains(got, "db0:keys=") {
		t.Fatalf("redis-cli INFO keyspace = %q", got)
	}
	// The key-space tools read TYPE, STRLEN, HLEN, MEMORY USAGE and INFO.
	if got := run("", "--bigkeys"); !strings.Contains(got, "Biggest string found") || !strings.Contains(got, "Biggest   hash found") {
		t.Errorf("redis-cli --bigkeys:\n%s", got)
	}
	if got := run("", "--memkeys"); !strings.Contains(got, "Biggest string found") || strings.Contains(got, "ERR") {
		t.Errorf("redis-cli --memkeys:\n%s", got)
	}
}
