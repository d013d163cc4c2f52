package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	redisstore "github.com/counterd/counterd/internal/store/redis"
)

// TestTieredScriptLockCrash: two tiered counterd processes on one Redis
// and PostgreSQL (--lua-time-limit 1s). A script on the first INCRs a
// key, then loops: its lock on the key keeps the second node's HTTP
// increments out (503 after twice the time limit, the lock renewed past
// its 1 s lease meanwhile). Killed (SIGKILL) mid-script, the first node
// renews nothing more, its lock expires, and the second node's
// increment applies.
func TestTieredScriptLockCrash(t *testing.T) {
	env := newTieredEnv(t)
	respAddr := "127.0.0.1:" + freePort(t)
	n1 := env.start(t, "--resp", respAddr, "--lua-time-limit", "1s")
	n2 := env.start(t, "--lua-time-limit", "1s")
	const id = "crash:k"
	conn, err := net.Dial("tcp", respAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	script := `redis.call('INCR', KEYS[1]) while true do end`
	if _, err := fmt.Fprintf(conn, "*4\r\n$4\r\nEVAL\r\n$%d\r\n%s\r\n$1\r\n1\r\n$%d\r\n%s\r\n", len(script), script, len(id), id); err != nil {
		t.Fatal(err)
	}
	ro, err := redis.ParseURL(env.rd.URL)
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(ro)
	defer rc.Close()
	ctx := context.Background()
	if err := poll(10*time.Second, func() error {
		if v, err := rc.Get(ctx, redisstore.ValueKey(id)).Int64(); err != nil || v != 1 {
			return fmt.Errorf("the script's INCR not seen yet: %d %v", v, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if s, b := quotaIncr(t, n2.addr, id); s != 503 || !strings.Contains(b, "script lock") {
		t.Fatalf("increment on the other node while the script runs: %d %s, want 503 (script lock)", s, b)
	}
	if waited := time.Since(began); waited < time.Second {
		t.Fatalf("the refused increment waited %v, less than the lock's lease", waited)
	}
	if tok, err := rc.Get(ctx, redisstore.LockKey(id)).Result(); err != nil || tok == "" {
		t.Fatalf("the running script's lock after more than its lease: %q %v (not renewed)", tok, err)
	}
	n1.kill(t)
	if s, b := quotaIncr(t, n2.addr, id); s != 200 || !strings.Contains(b, `"value":2`) {
		t.Fatalf("increment after the holder was killed: %d %s, want 200 and value 2", s, b)
	}
	if n, err := rc.Exists(ctx, redisstore.LockKey(id)).Result(); err != nil || n != 0 {
		t.Fatalf("the killed holder's lock is still there: %d %v", n, err)
	}
}
