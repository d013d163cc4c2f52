package resp_test

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/counterd/counterd/internal/api/resp"
	"github.com/counterd/counterd/internal/testutil/redistest"
)

// The client library tests run the fixed-window limiter through the script
// helpers of two real client libraries, ioredis's defineCommand (node) and
// redis-py's register_script (python3), against counterd and then against
// a private redis-server, and require the same results and the same
// scripting commands (EVAL, EVALSHA, SCRIPT ...) counted by INFO
// commandstats. The programs are in testdata/clients; each prints one
// JSON object. scripts/install-deps.sh installs both libraries (Debian's
// python3-redis, ioredis from npm into ~/.cache/counterd-test); without
// them the tests skip, or fail under COUNTERD_REQUIRE_SERVICES=1.

// missingClient skips t, or fails it under COUNTERD_REQUIRE_SERVICES=1.
func missingClient(t *testing.T, why string) {
	t.Helper()
	if os.Getenv(redistest.EnvRequireServices) == "1" {
		t.Fatalf("%s and COUNTERD_REQUIRE_SERVICES=1 (scripts/install-deps.sh installs it)", why)
	}
	t.Skipf("%s; scripts/install-deps.sh installs it (COUNTERD_REQUIRE_SERVICES=1 makes this a failure)", why)
}

// ioredisCommand returns a function making the command that runs
// testdata/clients/ioredis_script.js against an address: node from PATH,
// ioredis from $COUNTERD_TEST_CACHE/node_modules (default
// ~/.cache/counterd-test/node_modules).
func ioredisCommand(t *testing.T) func(addr string) *exec.Cmd {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		missingClient(t, "node not found in PATH")
	}
	cache := os.Getenv("COUNTERD_TEST_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			missingClient(t, "no home directory to find ~/.cache/counterd-test in")
		}
		cache = filepath.Join(home, ".cache", "counterd-test")
	}
	modules := filepath.Join(cache, "node_modules")
	if _, err := os.Stat(filepath.Join(modules, "ioredis", "package.json")); err != nil {
		missingClient(t, "ioredis not installed in "+modules)
	}
	script, err := filepath.Abs(filepath.Join("testdata", "clients", "ioredis_script.js"))
	if err != nil {
		t.Fatal(err)
	}
	return func(addr string) *exec.Cmd {
		host, port, _ := net.SplitHostPort(addr)
		c := exec.Command(node, script, host, port)
		c.Env = append(os.Environ(), "NODE_PATH="+modules)
		return c
	}
}

// redisPyCommand returns a function making the command that runs
// testdata/clients/redispy_script.py against an address, with the first
// of $COUNTERD_PYTHON, python3 in PATH and /usr/bin/python3 (where
// Debian's python3-redis is) that can import redis.
func redisPyCommand(t *testing.T) func(addr string) *exec.Cmd {
	t.Helper()
	candidates := []string{os.Getenv("COUNTERD_PYTHON")}
	if p, err := exec.LookPath("python3"); err == nil {
		candidates = append(candidates, p)
	}
	candidates = append(candidates, "/usr/bin/python3")
	python := ""
	for _, p := range candidates {
		if p != "" && exec.Command(p, "-c", "import redis").Run() == nil {
			python = p
			break
		}
	}
	if python == "" {
		missingClient(t, "no python3 that can import redis (Debian package python3-redis)")
	}
	script := filepath.Join("testdata", "clients", "redispy_script.py")
	return func(addr string) *exec.Cmd {
		host, port, _ := net.SplitHostPort(addr)
		return exec.Command(python, script, host, port)
	}
}

// runClient runs c and decodes the JSON object it prints.
func runClient(t *testing.T, c *exec.Cmd) map[string]any {
	t.Helper()
	var stderr strings.Builder
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s%s", strings.Join(c.Args, " "), err, out, stderr.String())
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%s printed %q: %v", strings.Join(c.Args, " "), out, err)
	}
	return got
}

// scriptStats returns the calls and failed calls INFO commandstats counts
// for the scripting commands (EVAL, EVALSHA, their _RO forms, SCRIPT's
// subcommands) on the server at addr.
func scriptStats(t *testing.T, addr string) map[string]string {
	t.Helper()
	r := dialRaw(t, addr)
	info := rawDo(r, "INFO", "commandstats")
	re := regexp.MustCompile(`(?m)^cmdstat_((?:eval|evalsha|eval_ro|evalsha_ro|script\|[a-z]+)):calls=(\d+),.*,failed_calls=(\d+)\r$`)
	stats := map[string]string{}
	for _, m := range re.FindAllStringSubmatch(info, -1) {
		stats[m[1]] = "calls=" + m[2] + ",failed_calls=" + m[3]
	}
	return stats
}

// limiterTTL checks that got[key] is a TTL in (0, max] seconds and
// replaces it by "ok", so that outputs compare across servers.
func limiterTTL(t *testing.T, got map[string]any, key string, max float64) {
	t.Helper()
	ttl, ok := got[key].(float64)
	if !ok || ttl <= 0 || ttl > max {
		t.Errorf("%s = %v, want a TTL in (0, %v]", key, got[key], max)
	}
	got[key] = "ok"
}

// checkClientScript runs the client program on counterd, checks the
// limiter's counts and TTLs, then runs it on a private redis-server and
// requires the same output and scripting commandstats.
func checkClientScript(t *testing.T, command func(addr string) *exec.Cmd, counts string, want map[string]any) {
	ts := start(t, resp.Options{AllowFlush: true})
	got := runClient(t, command(ts.addr))
	t.Logf("counterd: %v", got)
	if c, _ := json.Marshal(got["counts"]); string(c) != counts {
		t.Errorf("limiter counts = %s, want %s", c, counts)
	}
	limiterTTL(t, got, "ttl", 60)
	limiterTTL(t, got, "ttlPipeline", 30)
	for k, v := range want {
		if !reflect.DeepEqual(got[k], v) {
			t.Errorf("%s = %#v, want %#v", k, got[k], v)
		}
	}
	gotStats := scriptStats(t, ts.addr)
	if gotStats["eval"] == "" && gotStats["evalsha"] == "" {
		t.Errorf("INFO commandstats counts no EVAL or EVALSHA: %v", gotStats)
	}
	t.Run("same-as-redis-server", func(t *testing.T) {
		real := redistest.New(t)
		if real.External() {
			real.FlushAll(t)
			if _, err := real.Do("SCRIPT", "FLUSH"); err != nil {
				t.Fatal(err)
			}
		}
		wantOut := runClient(t, command(real.Addr))
		limiterTTL(t, wantOut, "ttl", 60)
		limiterTTL(t, wantOut, "ttlPipeline", 30)
		if !reflect.DeepEqual(got, wantOut) {
			t.Errorf("output differs\n  counterd: %v\n  redis:    %v", got, wantOut)
		}
		if real.External() {
			return // its commandstats count other tests' commands too
		}
		if wantStats := scriptStats(t, real.Addr); !reflect.DeepEqual(gotStats, wantStats) {
			t.Errorf("scripting commandstats differ\n  counterd: %v\n  redis:    %v", gotStats, wantStats)
		}
	})
}

// TestScriptIoredis: ioredis's defineCommand runs the limiter on counterd
// (EVAL on a connection's first call, EVALSHA after, EVAL again after
// NOSCRIPT; pipelined and in MULTI), as on redis-server.
func TestScriptIoredis(t *testing.T) {
	command := ioredisCommand(t)
	checkClientScript(t, command, "[1,2,3,4,5]", map[string]any{
		"second":      []any{6.0, 7.0}, // another connection: EVAL, EVALSHA
		"afterFlush":  8.0,             // NOSCRIPT, then EVAL
		"afterFlush2": 9.0,
		"multi":       []any{1.0, 2.0},
		"error":       "ERR value is not an integer or out of range script: " + sha1hex("return redis.call('INCRBY', KEYS[1], 'x')") + ", on @user_script:1.",
		"mixed":       []any{"9", nil, "arg", "FINE", 3.0},
	})
}

// TestScriptRedisPy: redis-py's register_script runs the limiter on
// counterd (EVALSHA, SCRIPT LOAD and EVALSHA again after NOSCRIPT;
// pipelined with SCRIPT EXISTS first, and in MULTI), as on redis-server.
func TestScriptRedisPy(t *testing.T) {
	command := redisPyCommand(t)
	checkClientScript(t, command, "[1,2,3,4,5]", map[string]any{
		"afterFlush": 6.0, // NOSCRIPT, SCRIPT LOAD, EVALSHA
		"pipeline":   []any{1.0, 2.0, "2"},
		"multi":      []any{1.0, 2.0},
		"error":      "value is not an integer or out of range script: " + sha1hex("return redis.call('INCRBY', KEYS[1], 'x')") + ", on @user_script:1.",
		"mixed":      []any{"6", nil, "arg", "FINE", 3.0},
	})
}
