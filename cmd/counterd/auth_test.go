package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	cdclient "github.com/counterd/counterd/client"
	"github.com/counterd/counterd/internal/auth"
	"github.com/counterd/counterd/internal/testutil/certtest"
)

// Tokens of the permission matrix. Each user's grant is chosen so that the
// matrix tells the levels and the namespaces apart: reader and writer hold
// page_views only, admin holds everything, other is admin of likes only.
const (
	tokReader = "reader-token-0123456789abcdef"
	tokWriter = "writer-token-0123456789abcdef"
	tokAdmin  = "admin-token-0123456789abcdef"
	tokOther  = "other-token-0123456789abcdef"
	tokWrong  = "wrong-token-0123456789abcdef"
	tokNew    = "added-later-0123456789abcdef"
)

// matrixUser is one row of the matrix: its token and, for the expected
// outcome, its level per namespace.
type matrixUser struct {
	name, token string
	levels      map[string]auth.Perm // namespace -> level; "*" for all
}

func (u matrixUser) level(ns string) auth.Perm {
	return max(u.levels[ns], u.levels["*"])
}

func (u matrixUser) maxLevel() auth.Perm {
	var m auth.Perm
	for _, l := range u.levels {
		m = max(m, l)
	}
	return m
}

var matrixUsers = []matrixUser{
	{name: "none"},
	{name: "wrong", token: tokWrong},
	{name: "reader", token: tokReader, levels: map[string]auth.Perm{"page_views": auth.Read}},
	{name: "writer", token: tokWriter, levels: map[string]auth.Perm{"page_views": auth.Write}},
	{name: "admin", token: tokAdmin, levels: map[string]auth.Perm{"*": auth.Admin}},
	{name: "other", token: tokOther, levels: map[string]auth.Perm{"likes": auth.Admin}},
}

func tokensFile(extra string) string {
	d := func(tok string) string { return auth.Hash([]byte(tok)).String() }
	return fmt.Sprintf(`users:
  reader:
    tokens: [%q]
    grants: {"page_views:*": read}
  writer:
    tokens: [%q]
    grants: {"page_views:*": write}
  admin:
    tokens: [%q]
    grants: {"*": admin}
  other:
    tokens: [%q]
    grants: {"likes:*": admin}
%s`, d(tokReader), d(tokWriter), d(tokAdmin), d(tokOther), extra)
}

// matrixOp is one operation of one front end: the permission it needs on
// the namespaces it touches (all of them: every key is checked), or on
// every namespace.
type matrixOp struct {
	name string
	perm auth.Perm
	ns   []string
	all  bool
}

// outcome is what a user must get for op: "ok", "unauthenticated",
// "forbidden_cmd" (lacks the permission everywhere) or "forbidden_key".
func outcome(u matrixUser, op matrixOp) string {
	switch {
	case u.token == "":
		return "unauthenticated"
	case u.token == tokWrong:
		return "unauthenticated"
	case op.all:
		if u.levels["*"] >= op.perm {
			return "ok"
		}
		return "forbidden_cmd"
	case u.maxLevel() < op.perm:
		return "forbidden_cmd"
	}
	for _, ns := range op.ns {
		if u.level(ns) < op.perm {
			return "forbidden_key"
		}
	}
	return "ok"
}

// startAuth runs counterd with --auth on all three front ends.
func startAuth(t *testing.T, tokens string, extra ...string) (p *proc, respAddr, grpcAddr string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(tokens, []byte(tokensFile("")), 0o600); err != nil {
		t.Fatal(err)
	}
	respAddr, grpcAddr = "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
	args := append([]string{"--resp", respAddr, "--grpc", grpcAddr, "--auth", tokens}, extra...)
	return start(t, filepath.Join(dir, "data"), args...), respAddr, grpcAddr
}

// TestAuthMatrix runs every user of the matrix against operations of each
// permission class on each front end of the real binary: HTTP, the Redis
// protocol (through go-redis, with each AUTH form) and Envoy's gRPC
// rate-limit service.
func TestAuthMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	p, respAddr, grpcAddr := startAuth(t, filepath.Join(t.TempDir(), "tokens.yaml"), "--allow-flushall")

	t.Run("http", func(t *testing.T) {
		ops := []struct {
			matrixOp
			method, path, body string
			okStatus           int
		}{
			{matrixOp{"get", auth.Read, []string{"page_views"}, false}, "GET", "/counters/page_views:a", "", 200},
			{matrixOp{"increment", auth.Write, []string{"page_views"}, false}, "POST", "/counters/page_views:a/increment", `{"delta":1}`, 200},
			{matrixOp{"increment other namespace", auth.Write, []string{"likes"}, false}, "POST", "/counters/likes:a/increment", `{"delta":1}`, 200},
			{matrixOp{"delete", auth.Admin, []string{"page_views"}, false}, "DELETE", "/counters/page_views:gone", "", 200},
			{matrixOp{"aggregate prefix", auth.Read, []string{"page_views"}, false}, "GET", "/counters/page_views:*/aggregate", "", 200},
			{matrixOp{"aggregate wider prefix", auth.Read, []string{"page_views", "likes"}, false}, "GET", "/counters/page*/aggregate", "", 200},
			{matrixOp{"list prefix", auth.Read, []string{"page_views"}, false}, "GET", "/counters?prefix=page_views:", "", 200},
			{matrixOp{"list everything", auth.Read, []string{"page_views", "likes"}, false}, "GET", "/counters", "", 200},
			{matrixOp{"batch over two namespaces", auth.Write, []string{"page_views", "likes"}, false}, "POST", "/batch",
				`{"ops":[{"op":"increment","id":"page_views:b"},{"op":"increment","id":"likes:b"}]}`, 200},
			{matrixOp{"delete inside a batch", auth.Admin, []string{"page_views"}, false}, "POST", "/batch",
				`{"ops":[{"op":"delete","id":"page_views:gone"}]}`, 200},
			{matrixOp{"rollup spec", auth.Admin, []string{"page_views"}, false}, "PUT", "/rollups/page_views", `{"minute":"1h"}`, 200},
			{matrixOp{"rollup spec of likes", auth.Admin, []string{"likes"}, false}, "PUT", "/rollups/likes", `{"minute":"1h"}`, 200},
			{matrixOp{"list likes with a match", auth.Read, []string{"likes"}, false}, "GET", "/counters?prefix=likes:&match=*", "", 200},
			{matrixOp{"metrics", auth.Read, nil, true}, "GET", "/metrics", "", 200},
			{matrixOp{"rate-limit check", auth.Write, []string{"page_views"}, false}, "POST", "/ratelimit/check",
				`{"key":"page_views:api","limits":[{"limit":1000,"period":"1m"}]}`, 200},
			{matrixOp{"rate-limit policy", auth.Admin, nil, true}, "DELETE", "/ratelimit/policies/nope", "", 200},
			{matrixOp{"regions", auth.Read, nil, false}, "GET", "/regions", "", 200},
			{matrixOp{"snapshot manifest", auth.Admin, nil, true}, "GET", "/admin/snapshot/manifest", "", 200},
			{matrixOp{"restore an empty chunk", auth.Admin, nil, true}, "POST", "/admin/snapshot/chunks", "CSC1\x00", 200},
		}
		for _, u := range matrixUsers {
			for _, op := range ops {
				t.Run(u.name+"/"+op.name, func(t *testing.T) {
					req, _ := http.NewRequest(op.method, p.addr+op.path, strings.NewReader(op.body))
					if op.body != "" {
						req.Header.Set("Content-Type", "application/json")
					}
					if u.token != "" {
						req.Header.Set("Authorization", "Bearer "+u.token)
					}
					resp, err := client.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					var e struct{ Error struct{ Code string } }
					_ = json.Unmarshal(b, &e)
					want := outcome(u, op.matrixOp)
					wantStatus, wantCode := op.okStatus, ""
					switch want {
					case "unauthenticated":
						wantStatus, wantCode = 401, "unauthenticated"
					case "forbidden_cmd", "forbidden_key":
						wantStatus, wantCode = 403, "forbidden"
					}
					if resp.StatusCode != wantStatus || wantCode != "" && e.Error.Code != wantCode {
						t.Fatalf("%s %s as %s: %d %s, want %d %s (%s)", op.method, op.path, u.name, resp.StatusCode, b, wantStatus, wantCode, want)
					}
					if wantStatus == 401 && resp.Header.Get("WWW-Authenticate") == "" {
						t.Error("401 without WWW-Authenticate")
					}
				})
			}
		}
		// Health probes need no token.
		if resp, err := client.Get(p.addr + "/healthz"); err != nil || resp.StatusCode != 200 {
			t.Fatalf("healthz without a token: %v %v", resp, err)
		}
	})

	t.Run("resp", func(t *testing.T) {
		ops := []struct {
			matrixOp
			args []any
			ok   func(v any) bool
		}{
			{matrixOp{"get", auth.Read, []string{"page_views"}, false}, []any{"GET", "page_views:a"}, nil},
			{matrixOp{"incr", auth.Write, []string{"page_views"}, false}, []any{"INCR", "page_views:a"}, nil},
			{matrixOp{"incr other namespace", auth.Write, []string{"likes"}, false}, []any{"INCR", "likes:a"}, nil},
			{matrixOp{"del", auth.Admin, []string{"page_views"}, false}, []any{"DEL", "page_views:gone"}, nil},
			{matrixOp{"mget two namespaces", auth.Read, []string{"page_views", "likes"}, false}, []any{"MGET", "page_views:a", "likes:a"}, nil},
			{matrixOp{"mset two namespaces", auth.Write, []string{"page_views", "likes"}, false}, []any{"MSET", "page_views:m", "1", "likes:m", "1"}, nil},
			{matrixOp{"scan prefix", auth.Read, []string{"page_views"}, false}, []any{"SCAN", "0", "MATCH", "page_views:*"}, nil},
			{matrixOp{"scan likes", auth.Read, []string{"likes"}, false}, []any{"SCAN", "0", "MATCH", "likes:*"}, nil},
			{matrixOp{"scan everything", auth.Read, []string{"page_views", "likes"}, false}, []any{"SCAN", "0"}, nil},
			{matrixOp{"rl.check", auth.Write, []string{"page_views"}, false}, []any{"RL.CHECK", "page_views:api", "1000", "60000"}, nil},
			{matrixOp{"flushall", auth.Admin, nil, true}, []any{"FLUSHALL"}, nil},
		}
		for i, u := range matrixUsers {
			opts := &redis.Options{Addr: respAddr, Password: u.token, Protocol: 2, DisableIdentity: true}
			// Every AUTH form: AUTH token, AUTH user token, HELLO 3 AUTH user
			// token, HELLO 3 AUTH default token.
			switch i % 4 {
			case 1:
				opts.Username = u.name
			case 2:
				opts.Username, opts.Protocol = u.name, 3
			case 3:
				opts.Protocol = 3
			}
			rdb := redis.NewClient(opts)
			for _, op := range ops {
				t.Run(u.name+"/"+op.name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					err := rdb.Do(ctx, op.args...).Err()
					if errors.Is(err, redis.Nil) {
						err = nil
					}
					msg := ""
					if err != nil {
						msg = err.Error()
					}
					var want string
					switch outcome(u, op.matrixOp) {
					case "ok":
						if err != nil {
							t.Fatalf("%v as %s: %v, want success", op.args, u.name, err)
						}
						return
					case "unauthenticated":
						want = "NOAUTH Authentication required."
						if u.token != "" {
							want = "WRONGPASS invalid username-password pair or user is disabled."
						}
					case "forbidden_cmd":
						want = "NOPERM this user has no permissions to run the '" + strings.ToLower(op.args[0].(string)) + "' command"
					case "forbidden_key":
						want = "NOPERM No permissions to access a key"
					}
					if msg != want {
						t.Fatalf("%v as %s: %q, want %q", op.args, u.name, msg, want)
					}
				})
			}
			rdb.Close()
		}
	})

	t.Run("resp wire", func(t *testing.T) {
		conn, rd := respDial(t, respAddr)
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"PING"}, "-NOAUTH Authentication required."},
			{[]string{"HELLO", "3"}, "-NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time"},
			{[]string{"HELLO", "3", "AUTH", "reader", tokWrong}, "-WRONGPASS invalid username-password pair or user is disabled."},
			{[]string{"AUTH", "reader", tokWriter}, "-WRONGPASS invalid username-password pair or user is disabled."},
			{[]string{"AUTH", tokWrong}, "-WRONGPASS invalid username-password pair or user is disabled."},
			{[]string{"GET", "page_views:a"}, "-NOAUTH Authentication required."},
			{[]string{"AUTH", "reader", tokReader}, "+OK"},
			{[]string{"PING"}, "+PONG"},
			{[]string{"INCR", "page_views:a"}, "-NOPERM this user has no permissions to run the 'incr' command"},
			{[]string{"MULTI"}, "+OK"},
			{[]string{"INCR", "page_views:a"}, "-NOPERM this user has no permissions to run the 'incr' command"},
			{[]string{"EXEC"}, "-EXECABORT Transaction discarded because of previous errors."},
			{[]string{"RESET"}, "+RESET"},
			{[]string{"PING"}, "-NOAUTH Authentication required."},
		} {
			if got := respCmd(t, conn, rd, c.args...); got != c.want {
				t.Fatalf("%v: %q, want %q", c.args, got, c.want)
			}
		}
	})

	t.Run("grpc envoy", func(t *testing.T) {
		cc, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		rls := rlsv3.NewRateLimitServiceClient(cc)
		for _, u := range matrixUsers {
			for _, domain := range []string{"page_views", "likes"} {
				op := matrixOp{"ShouldRateLimit " + domain, auth.Write, []string{domain}, false}
				t.Run(u.name+"/"+op.name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					if u.token != "" {
						ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+u.token)
					}
					_, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlcommonv3.RateLimitDescriptor{{
						Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "user", Value: "42"}},
						Limit:   &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1000, Unit: typev3.RateLimitUnit_MINUTE},
					}}})
					want := codes.OK
					switch outcome(u, op) {
					case "unauthenticated":
						want = codes.Unauthenticated
					case "forbidden_cmd", "forbidden_key":
						want = codes.PermissionDenied
					}
					if got := status.Code(err); got != want {
						t.Fatalf("as %s: %v, want %v", u.name, err, want)
					}
				})
			}
		}
	})
}

// TestAuthReloadOnSIGHUP: a token added to the file works after SIGHUP, a
// connection opened before keeps working, and a removed token stops
// working, on open connections too.
func TestAuthReloadOnSIGHUP(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	tokens := filepath.Join(t.TempDir(), "tokens.yaml")
	p, respAddr, _ := startAuth(t, tokens)
	conn, err := net.Dial("tcp", respAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rd := bufio.NewReader(conn)
	if got := respCmd(t, conn, rd, "AUTH", "writer", tokWriter); got != "+OK" {
		t.Fatalf("AUTH writer: %q", got)
	}
	other, err := net.Dial("tcp", respAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ord := bufio.NewReader(other)
	if got := respCmd(t, other, ord, "AUTH", tokOther); got != "+OK" {
		t.Fatalf("AUTH other: %q", got)
	}
	httpStatus := func(tok string) int {
		req, _ := http.NewRequest("POST", p.addr+"/counters/page_views:r/increment", strings.NewReader(`{"delta":1}`))
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := httpStatus(tokNew); s != 401 {
		t.Fatalf("new token before reload: %d, want 401", s)
	}

	// Add a user, remove "other", and reload.
	file := strings.Replace(tokensFile(fmt.Sprintf(`  added:
    tokens: [%q]
    grants: {"page_views:*": write}
`, auth.Hash([]byte(tokNew)))), "  other:\n", "  gone:\n", 1)
	file = strings.Replace(file, auth.Hash([]byte(tokOther)).String(), auth.Hash([]byte("replaced-0123456789abcdef")).String(), 1)
	if err := os.WriteFile(tokens, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for httpStatus(tokNew) != 200 {
		if time.Now().After(deadline) {
			t.Fatal("the added token was not accepted within 10s of SIGHUP")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := respCmd(t, conn, rd, "INCR", "page_views:r"); !strings.HasPrefix(got, ":") {
		t.Fatalf("connection opened before the reload: INCR %q", got)
	}
	if got := respCmd(t, other, ord, "INCR", "likes:r"); got != "-NOAUTH Authentication required." {
		t.Fatalf("removed token on its open connection: %q", got)
	}
	if got := respCmd(t, other, ord, "AUTH", "added", tokNew); got != "+OK" {
		t.Fatalf("AUTH with the added token: %q", got)
	}

	// A broken file leaves the tokens in force.
	if err := os.WriteFile(tokens, []byte("users: [broken"), 0o600); err != nil {
		t.Fatal(err)
	}
	p.cmd.Process.Signal(syscall.SIGHUP)
	time.Sleep(200 * time.Millisecond) // nothing observable changes: give the reload its chance to (wrongly) apply
	if s := httpStatus(tokNew); s != 200 {
		t.Fatalf("after a broken reload: %d, want 200", s)
	}
	if got := respCmd(t, conn, rd, "INCR", "page_views:r"); !strings.HasPrefix(got, ":") {
		t.Fatalf("after a broken reload: INCR %q", got)
	}

	// A command queued in MULTI is checked again at EXEC: the writer
	// queues an INCR and a GET, a reload leaves it read-only, and EXEC
	// refuses the INCR (-NOPERM in its reply) and runs the GET.
	for _, c := range [][]string{{"MULTI"}, {"INCR", "page_views:tx"}, {"GET", "page_views:r"}} {
		if got := respCmd(t, conn, rd, c...); got != "+OK" && got != "+QUEUED" {
			t.Fatalf("%v: %q", c, got)
		}
	}
	readOnly := strings.Replace(tokensFile(""), `{"page_views:*": write}`, `{"page_views:*": read}`, 1)
	if err := os.WriteFile(tokens, []byte(readOnly), 0o600); err != nil {
		t.Fatal(err)
	}
	p.cmd.Process.Signal(syscall.SIGHUP)
	for deadline := time.Now().Add(10 * time.Second); httpStatus(tokWriter) != 403; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the writer's write grant was not removed within 10s of SIGHUP")
		}
	}
	if got := respCmd(t, conn, rd, "EXEC"); got != "*2" {
		t.Fatalf("EXEC after the grant was removed: %q, want a 2-reply array", got)
	}
	if got, _ := rd.ReadString('\n'); !strings.HasPrefix(got, "-NOPERM") {
		t.Fatalf("EXEC's INCR after the grant was removed: %q, want -NOPERM", got)
	}
	if got, _ := rd.ReadString('\n'); !strings.HasPrefix(got, "$") || got == "$-1\r\n" {
		t.Fatalf("EXEC's GET (still allowed): %q", got)
	}
	rd.ReadString('\n') // the GET's value
	if got := respCmd(t, conn, rd, "GET", "page_views:tx"); got != "$-1" {
		t.Fatalf("the refused INCR changed the counter: GET %q", got)
	}
}

// TestProtectedMode: without --auth a non-loopback address is refused
// with a message naming the flags; --insecure or --auth allow it; and on
// loopback the README's plain requests need no token.
func TestProtectedMode(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	dir := t.TempDir()
	for _, addr := range []string{"0.0.0.0:0", ":0"} {
		cmd := exec.Command(counterdBin(t), "--data", filepath.Join(dir, "refused"), "--http", addr, "--resp", "", "--grpc", "")
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Fatalf("--http %s without --auth: %v, want exit status 2\n%s", addr, err, out)
		}
		for _, want := range []string{"--http " + addr, "--auth", "--insecure", "loopback"} {
			if !strings.Contains(string(out), want) {
				t.Fatalf("--http %s: message %q does not mention %q", addr, out, want)
			}
		}
	}
	// Node-to-node links beyond loopback need their own authentication,
	// even with --auth (refused before anything binds).
	tokensPath := filepath.Join(dir, "links-tokens.yaml")
	os.WriteFile(tokensPath, []byte(tokensFile("")), 0o600)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--grpc", "0.0.0.0:0", "--region", "r1", "--peer-regions", "r2=127.0.0.1:1"}, "--peer-ca FILE"},
		{[]string{"--grpc", "127.0.0.1:0", "--gossip", "0.0.0.0:0", "--join", "127.0.0.1:1"}, "--gossip-key-file FILE"},
	} {
		args := append([]string{"--data", filepath.Join(dir, "links"), "--http", "127.0.0.1:0", "--resp", "", "--auth", tokensPath}, tc.args...)
		out, err := exec.Command(counterdBin(t), args...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), tc.want) || !strings.Contains(string(out), "--insecure") {
			t.Fatalf("%v with --auth: %v, want exit status 2 naming %s and --insecure\n%s", tc.args, err, tc.want, out)
		}
	}
	p := start(t, filepath.Join(dir, "insecure"), "--http", "0.0.0.0:0", "--insecure")
	port := p.addr[strings.LastIndex(p.addr, ":")+1:]
	if code, _, _, err := post("http://127.0.0.1:"+port+"/counters/page_views:x/increment", "", `{"delta":1}`); err != nil || code != 200 {
		t.Fatalf("--insecure: %d %v", code, err)
	}
	p.term(t)

	tokens := filepath.Join(dir, "tokens.yaml")
	os.WriteFile(tokens, []byte(tokensFile("")), 0o600)
	pa := start(t, filepath.Join(dir, "auth"), "--http", "0.0.0.0:0", "--auth", tokens)
	port = pa.addr[strings.LastIndex(pa.addr, ":")+1:]
	if code, _, _, err := post("http://127.0.0.1:"+port+"/counters/page_views:x/increment", "", `{"delta":1}`); err != nil || code != 401 {
		t.Fatalf("--auth on 0.0.0.0 without a token: %d %v, want 401", code, err)
	}

	lo := start(t, filepath.Join(dir, "loopback"))
	if code, _, _, err := post(lo.addr+"/counters/page_views:x/increment", "", `{"delta":1}`); err != nil || code != 200 {
		t.Fatalf("loopback without --auth: %d %v, want 200 with no token", code, err)
	}
}

// TestAuthClients: the Go client and counterctl send their token.
func TestAuthClients(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	p, _, _ := startAuth(t, filepath.Join(t.TempDir(), "tokens.yaml"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c, err := cdclient.New(p.addr, cdclient.WithToken(tokWriter))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if v, err := c.Incr(ctx, "page_views:go", 2); err != nil || v.Value != 2 {
		t.Fatalf("Go client with a write token: %+v %v", v, err)
	}
	if _, err := c.Incr(ctx, "likes:go", 1); !errors.Is(err, cdclient.ErrForbidden) {
		t.Fatalf("Go client, other namespace: %v, want ErrForbidden", err)
	}
	anon, _ := cdclient.New(p.addr)
	defer anon.Close()
	if _, err := anon.Incr(ctx, "page_views:go", 1); !errors.Is(err, cdclient.ErrUnauthenticated) {
		t.Fatalf("Go client without a token: %v, want ErrUnauthenticated", err)
	}

	ctl := counterctlBin(t)
	run := func(env []string, args ...string) (string, error) {
		cmd := exec.Command(ctl, append([]string{"--addr", p.addr}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if out, err := run(nil, "--token", tokWriter, "incr", "page_views:ctl", "5"); err != nil || out != "5" {
		t.Fatalf("counterctl --token: %q %v", out, err)
	}
	if out, err := run([]string{"COUNTERD_TOKEN=" + tokReader}, "get", "page_views:ctl"); err != nil || !strings.Contains(out, "5") {
		t.Fatalf("counterctl with COUNTERD_TOKEN: %q %v", out, err)
	}
	if out, err := run([]string{"COUNTERD_TOKEN=" + tokReader}, "incr", "page_views:ctl"); err == nil || !strings.Contains(out, "forbidden") {
		t.Fatalf("counterctl read token incr: %q %v, want forbidden", out, err)
	}
	if out, err := run(nil, "incr", "page_views:ctl"); err == nil || !strings.Contains(out, "unauthenticated") {
		t.Fatalf("counterctl without a token: %q %v, want unauthenticated", out, err)
	}

	// counterctl auth token makes a token whose digest the server accepts
	// once it is in the file; auth hash agrees.
	out, err := run(nil, "auth", "token")
	if err != nil {
		t.Fatal(out, err)
	}
	var tok, dig string
	fmt.Sscanf(out, "token: %s\ndigest: %s", &tok, &dig)
	if dig != auth.Hash([]byte(tok)).String() || len(tok) < auth.MinTokenLen {
		t.Fatalf("auth token: %q", out)
	}
	hash := exec.Command(ctl, "auth", "hash")
	hash.Stdin = strings.NewReader(tok + "\n")
	h, err := hash.Output()
	if err != nil || strings.TrimSpace(string(h)) != dig {
		t.Fatalf("auth hash: %q %v, want %s", h, err, dig)
	}
	short := exec.Command(ctl, "auth", "hash")
	short.Stdin = strings.NewReader("password\n")
	if err := short.Run(); err == nil {
		t.Fatal("auth hash accepted an 8-character token")
	}
}

var ctlBin string

// counterctlBin builds counterctl next to the counterd binary.
func counterctlBin(t *testing.T) string {
	t.Helper()
	if ctlBin == "" {
		bin := filepath.Join(filepath.Dir(counterdBin(t)), "counterctl")
		if out, err := exec.Command("go", "build", "-o", bin, "../counterctl").CombinedOutput(); err != nil {
			t.Fatalf("go build counterctl: %v\n%s", err, out)
		}
		ctlBin = bin
	}
	return ctlBin
}

// TestAuthCluster: with --auth on every node, peer traffic (forwarded
// writes over the peer gRPC service) keeps working without client tokens,
// and rate-limit checks forwarded to a key's owner carry the caller's
// token, so they are authorized there as the same user.
func TestAuthCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a cluster of counterd binaries")
	}
	tokens := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(tokens, []byte(tokensFile("")), 0o600); err != nil {
		t.Fatal(err)
	}
	var nodes []*cnode
	var joins []string
	for i := range 2 {
		n := newNode(t, fmt.Sprintf("a%d", i+1), "127.0.0.1", freePorts(t, 4), exec.Command)
		n.extra = []string{"--auth", tokens}
		nodes = append(nodes, n)
		joins = append(joins, n.gossip)
	}
	for _, n := range nodes {
		n.join = strings.Join(joins, ",")
		n.start(t)
	}
	get := func(url, tok string) (int, []byte) {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := client.Do(req)
		if err != nil {
			return 0, nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if err := poll(60*time.Second, func() error {
		for _, n := range nodes {
			code, b := get(n.url+"/cluster", tokReader)
			var v clusterView
			if code != 200 || json.Unmarshal(b, &v) != nil || len(v.alive()) != 2 {
				return fmt.Errorf("%s: %d %s", n.id, code, b)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(nodes[0].url+"/cluster", ""); code != 401 {
		t.Fatalf("GET /cluster without a token: %d, want 401", code)
	}
	// Forgetting a member needs admin on every namespace; the admin's
	// request reaches the handler, which refuses a live member.
	for _, tc := range []struct {
		tok  string
		code int
	}{{"", 401}, {tokWriter, 403}, {tokOther, 403}, {tokAdmin, 400}} {
		req, _ := http.NewRequest("POST", nodes[0].url+"/cluster/forget", strings.NewReader(`{"node":"a2"}`))
		req.Header.Set("Authorization", "Bearer "+tc.tok)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || tc.code == 400 && !strings.Contains(string(b), "alive") {
			t.Fatalf("POST /cluster/forget with token %q: %d %s, want %d", tc.tok, resp.StatusCode, b, tc.code)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w, _ := cdclient.New(nodes[0].url, cdclient.WithToken(tokWriter))
	defer w.Close()
	r, _ := cdclient.New(nodes[1].url, cdclient.WithToken(tokReader))
	defer r.Close()
	for i := range 20 { // some ids are owned by each node: writes are forwarded
		id := fmt.Sprintf("page_views:c%d", i)
		if _, err := w.Incr(ctx, id, int64(i+1)); err != nil {
			t.Fatalf("incr %s through %s: %v", id, nodes[0].id, err)
		}
		if v, err := r.Get(ctx, id); err != nil || v.Value != int64(i+1) {
			t.Fatalf("get %s through %s: %+v %v", id, nodes[1].id, v, err)
		}
	}

	// With a limit of 1 per key, the second check of a key is denied
	// only if both nodes decided it on the same owner: a forwarded check
	// refused by the owner would fall back to a fresh local decision.
	check := func(n *cnode, tok, key string) int {
		req, _ := http.NewRequest("POST", n.url+"/ratelimit/check",
			strings.NewReader(`{"key":"`+key+`","limits":[{"limit":1,"period":"1h"}]}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 && resp.StatusCode != 403 && resp.StatusCode != 429 {
			t.Fatalf("check %s on %s: %d %s", key, n.id, resp.StatusCode, b)
		}
		return resp.StatusCode
	}
	for i := range 20 { // some keys are owned by each node
		key := fmt.Sprintf("page_views:rl%d", i)
		if code := check(nodes[1], tokReader, key); code != 403 {
			t.Fatalf("reader check %s: %d, want 403", key, code)
		}
		if code := check(nodes[0], tokWriter, key); code != 200 {
			t.Fatalf("first writer check %s: %d, want 200", key, code)
		}
		if code := check(nodes[1], tokWriter, key); code != 429 {
			t.Fatalf("second writer check %s through the other node: %d, want 429 (decided by the same owner)", key, code)
		}
	}

	// The same over the Redis protocol: RL.CHECK forwarded with the
	// connection's token.
	var rds []*bufio.Reader
	var conns []net.Conn
	for _, n := range nodes {
		conn, err := net.Dial("tcp", n.resp)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		rd := bufio.NewReader(conn)
		if got := respCmd(t, conn, rd, "AUTH", tokWriter); got != "+OK" {
			t.Fatalf("AUTH on %s: %q", n.id, got)
		}
		conns, rds = append(conns, conn), append(rds, rd)
	}
	allowed := func(i int, key string) string {
		if got := respCmd(t, conns[i], rds[i], "RL.CHECK", key, "1", "3600000"); got != "*4" {
			t.Fatalf("RL.CHECK %s on %s: %q", key, nodes[i].id, got)
		}
		a, _ := rds[i].ReadString('\n')
		for range 3 {
			rds[i].ReadString('\n')
		}
		return strings.TrimSpace(a)
	}
	for i := range 20 {
		key := fmt.Sprintf("page_views:resp%d", i)
		if a := allowed(0, key); a != ":1" {
			t.Fatalf("first RL.CHECK %s: %s", key, a)
		}
		if a := allowed(1, key); a != ":0" {
			t.Fatalf("second RL.CHECK %s through the other node: %s, want :0 (decided by the same owner)", key, a)
		}
	}
}

// TestAuthOverTLS: tokens work the same over TLS: two users' requests
// interleaved over HTTPS (the Go client's transport offers HTTP/2 by ALPN,
// where one connection may carry requests of different tokens) and AUTH
// over RESP with TLS.
func TestAuthOverTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	dir := t.TempDir()
	ca := certtest.NewCA(t, "counterd test CA")
	certFile, keyFile := ca.Issue(t, "node").Write(t, dir, "node")
	caFile := ca.WriteCA(t, dir, "ca.pem")
	tokens := filepath.Join(dir, "tokens.yaml")
	if err := os.WriteFile(tokens, []byte(tokensFile("")), 0o600); err != nil {
		t.Fatal(err)
	}
	respAddr := "127.0.0.1:" + freePort(t)
	p := start(t, filepath.Join(dir, "data"), "--tls-cert", certFile, "--tls-key", keyFile, "--resp", respAddr, "--auth", tokens)
	base := strings.Replace(p.addr, "http://", "https://", 1)
	ctx := t.Context()

	w, err := cdclient.New(base, cdclient.WithCAFile(caFile), cdclient.WithToken(tokWriter), cdclient.WithRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	o, _ := cdclient.New(base, cdclient.WithCAFile(caFile), cdclient.WithToken(tokOther), cdclient.WithRetries(0))
	defer o.Close()
	// Both users at once, so requests of different tokens interleave.
	errc := make(chan error, 2)
	for _, c := range []struct {
		cl      *cdclient.Client
		ok, bad string
	}{{w, "page_views:tls", "likes:tls"}, {o, "likes:tls", "page_views:tls"}} {
		go func() {
			for range 50 {
				if _, err := c.cl.Incr(ctx, c.ok, 1); err != nil {
					errc <- fmt.Errorf("incr %s: %w", c.ok, err)
					return
				}
				if _, err := c.cl.Incr(ctx, c.bad, 1); !errors.Is(err, cdclient.ErrForbidden) {
					errc <- fmt.Errorf("incr %s: %v, want ErrForbidden", c.bad, err)
					return
				}
			}
			errc <- nil
		}()
	}
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	anon, _ := cdclient.New(base, cdclient.WithCAFile(caFile), cdclient.WithRetries(0))
	defer anon.Close()
	if _, err := anon.Get(ctx, "page_views:tls"); !errors.Is(err, cdclient.ErrUnauthenticated) {
		t.Fatalf("https without a token: %v, want ErrUnauthenticated", err)
	}

	tlsCfg := &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"}
	rc := redis.NewClient(&redis.Options{Addr: respAddr, TLSConfig: tlsCfg, Username: "writer", Password: tokWriter, MaxRetries: -1})
	defer rc.Close()
	if n, err := rc.Get(ctx, "page_views:tls").Int64(); err != nil || n != 50 {
		t.Fatalf("GET over TLS as writer: %d %v, want 50", n, err)
	}
	nc := redis.NewClient(&redis.Options{Addr: respAddr, TLSConfig: tlsCfg, MaxRetries: -1})
	defer nc.Close()
	if err := nc.Get(ctx, "page_views:tls").Err(); err == nil || err.Error() != "NOAUTH Authentication required." {
		t.Fatalf("GET over TLS without AUTH: %v", err)
	}
}

// TestAuthFailureMetrics: every refusal is counted once in
// counterd_auth_failures_total by front end and reason, and accepted
// requests are not counted.
func TestAuthFailureMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	p, respAddr, grpcAddr := startAuth(t, filepath.Join(t.TempDir(), "tokens.yaml"))

	// HTTP: no token, a wrong token, a reader writing (the API's route
	// check), a writer outside its namespace (the per-id check), a reader
	// changing a policy (the middleware's own check), and one accepted.
	for _, c := range []struct {
		tok, method, path string
		want              int
	}{
		{"", "POST", "/counters/page_views:m/increment", 401},
		{tokWrong, "POST", "/counters/page_views:m/increment", 401},
		{tokReader, "POST", "/counters/page_views:m/increment", 403},
		{tokWriter, "POST", "/counters/likes:m/increment", 403},
		{tokReader, "DELETE", "/ratelimit/policies/nope", 403},
		{tokWriter, "POST", "/counters/page_views:m/increment", 200},
	} {
		hdr := []string{"Content-Type", "application/json"}
		if c.tok != "" {
			hdr = append(hdr, "Authorization", "Bearer "+c.tok)
		}
		if code, body, _ := do(t, c.method, p.addr+c.path, `{"delta":1}`, hdr...); code != c.want {
			t.Fatalf("%s %s with %q: %d %s, want %d", c.method, c.path, c.tok, code, body, c.want)
		}
	}

	// RESP: a command before AUTH, a wrong AUTH, a reader's INCR, a
	// writer's INCR outside its namespace, and accepted commands.
	conn, rd := respDial(t, respAddr)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"INCR", "page_views:m"}, "-NOAUTH"},
		{[]string{"AUTH", tokWrong}, "-WRONGPASS"},
		{[]string{"AUTH", tokReader}, "+OK"},
		{[]string{"INCR", "page_views:m"}, "-NOPERM"},
		{[]string{"GET", "page_views:m"}, "1"},
		{[]string{"AUTH", tokWriter}, "+OK"},
		{[]string{"INCR", "likes:m"}, "-NOPERM"},
		{[]string{"INCR", "page_views:m"}, ":2"},
	} {
		if got := respCmd(t, conn, rd, c.args...); !strings.HasPrefix(got, c.want) {
			t.Fatalf("%v: %q, want %s", c.args, got, c.want)
		}
	}

	// gRPC: no metadata, a wrong token, a reader consuming a limit.
	cc, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	rls := rlsv3.NewRateLimitServiceClient(cc)
	for _, c := range []struct {
		tok  string
		want codes.Code
	}{{"", codes.Unauthenticated}, {tokWrong, codes.Unauthenticated}, {tokReader, codes.PermissionDenied}} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if c.tok != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.tok)
		}
		_, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "page_views", Descriptors: []*rlcommonv3.RateLimitDescriptor{{
			Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}},
			Limit:   &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 10, Unit: typev3.RateLimitUnit_MINUTE},
		}}})
		cancel()
		if status.Code(err) != c.want {
			t.Fatalf("ShouldRateLimit with %q: %v, want %v", c.tok, err, c.want)
		}
	}

	code, metrics, _ := do(t, "GET", p.addr+"/metrics", "", "Authorization", "Bearer "+tokAdmin)
	if code != 200 {
		t.Fatalf("GET /metrics: %d", code)
	}
	want := map[string]int{
		"http/no_token": 1, "http/bad_token": 1, "http/forbidden": 3,
		"resp/no_token": 1, "resp/bad_token": 1, "resp/forbidden": 2,
		"grpc/no_token": 1, "grpc/bad_token": 1, "grpc/forbidden": 1,
	}
	for k, n := range want {
		fe, reason, _ := strings.Cut(k, "/")
		line := fmt.Sprintf("counterd_auth_failures_total{front_end=%q,reason=%q} %d\n", fe, reason, n)
		if !strings.Contains(metrics, line) {
			t.Errorf("metrics lack %q", strings.TrimSpace(line))
		}
	}
	if t.Failed() {
		for _, l := range strings.Split(metrics, "\n") {
			if strings.HasPrefix(l, "counterd_auth_failures_total") {
				t.Log(l)
			}
		}
	}
}

// respDial connects to a RESP address; the connection closes with the test.
func respDial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, bufio.NewReader(conn)
}
