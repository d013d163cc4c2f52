package resp_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/redis/rueidis"

	"github.com/counterd/counterd/internal/api/resp"
)

func newRueidis(t testing.TB, addr string, resp2 bool) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:  []string{addr},
		DisableCache: true,
		AlwaysRESP2:  resp2,
	})
	if err != nil {
		t.Fatalf("rueidis.NewClient: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestRueidis(t *testing.T) {
	for _, resp2 := range []bool{false, true} {
		name := "RESP3"
		if resp2 {
			name = "RESP2"
		}
		t.Run(name, func(t *testing.T) {
			ts := start(t, resp.Options{})
			testRueidis(t, newRueidis(t, ts.addr, resp2))
		})
	}
}

func testRueidis(t *testing.T, c rueidis.Client) {
	ctx := context.Background()
	do := func(args ...string) rueidis.RedisResult {
		return c.Do(ctx, c.B().Arbitrary(args[0]).Args(args[1:]...).Build())
	}
	wantInt := func(want int64, args ...string) {
		t.Helper()
		n, err := do(args...).AsInt64()
		if err != nil || n != want {
			t.Fatalf("%v = %d, %v; want %d", args, n, err, want)
		}
	}
	wantStr := func(want string, args ...string) {
		t.Helper()
		s, err := do(args...).ToString()
		if err != nil || s != want {
			t.Fatalf("%v = %q, %v; want %q", args, s, err, want)
		}
	}
	wantNil := func(args ...string) {
		t.Helper()
		if err := do(args...).Error(); !rueidis.IsRedisNil(err) {
			t.Fatalf("%v: %v, want nil", args, err)
		}
	}
	wantErr := func(want string, args ...string) {
		t.Helper()
		// rueidis drops the "ERR " prefix of error messages.
		err := do(args...).Error()
		if err == nil || err.Error() != strings.TrimPrefix(want, "ERR ") {
			t.Fatalf("%v: err %v, want %q", args, err, want)
		}
	}

	// Typed builders for the common commands.
	n, err := c.Do(ctx, c.B().Incr().Key("page_views:article_123").Build()).AsInt64()
	if err != nil || n != 1 {
		t.Fatalf("INCR = %d, %v", n, err)
	}
	n, _ = c.Do(ctx, c.B().Incrby().Key("page_views:article_123").Increment(9).Build()).AsInt64()
	mustEqual(t, "INCRBY", n, 10)
	n, _ = c.Do(ctx, c.B().Decr().Key("page_views:article_123").Build()).AsInt64()
	mustEqual(t, "DECR", n, 9)
	n, _ = c.Do(ctx, c.B().Decrby().Key("page_views:article_123").Decrement(4).Build()).AsInt64()
	mustEqual(t, "DECRBY", n, 5)
	s, _ := c.Do(ctx, c.B().Get().Key("page_views:article_123").Build()).ToString()
	mustEqual(t, "GET", s, "5")
	n, _ = c.Do(ctx, c.B().Hincrby().Key("h").Field("views").Increment(3).Build()).AsInt64()
	mustEqual(t, "HINCRBY", n, 3)
	n, _ = c.Do(ctx, c.B().Pfadd().Key("p").Element("a", "b", "c").Build()).AsInt64()
	mustEqual(t, "PFADD", n, 1)
	n, _ = c.Do(ctx, c.B().Pfcount().Key("p").Build()).AsInt64()
	mustEqual(t, "PFCOUNT", n, 3)
	m, err := c.Do(ctx, c.B().Hgetall().Key("h").Build()).AsIntMap()
	if err != nil || m["views"] != 3 || len(m) != 1 {
		t.Fatalf("HGETALL = %v, %v", m, err)
	}

	wantStr("OK", "SET", "s", "42", "EX", "100")
	wantInt(100, "TTL", "s")
	wantStr("OK", "SET", "s", "43", "KEEPTTL")
	wantInt(100, "TTL", "s")
	wantNil("SET", "s", "1", "NX")
	wantStr("OK", "SET", "s", "44", "XX", "PX", "5000")
	wantErr("ERR value is not an integer or out of range", "SET", "s", "abc")
	wantErr("ERR invalid expire time in 'set' command", "SET", "s", "1", "EX", "0")
	wantNil("GET", "missing")
	wantStr("OK", "MSET", "a", "1", "b", "2")
	vals, err := do("MGET", "a", "missing", "b").ToArray()
	if err != nil || len(vals) != 3 || !vals[1].IsNil() {
		t.Fatalf("MGET = %v, %v", vals, err)
	}
	wantInt(2, "EXISTS", "a", "b", "missing")
	wantStr("string", "TYPE", "a")
	wantStr("hash", "TYPE", "h")
	wantStr("none", "TYPE", "missing")
	wantInt(1, "EXPIRE", "a", "100")
	wantInt(100, "TTL", "a")
	wantInt(1, "PEXPIRE", "a", "50000")
	if p, _ := do("PTTL", "a").AsInt64(); p <= 49000 || p > 50000 {
		t.Fatalf("PTTL = %d", p)
	}
	wantInt(1, "PERSIST", "a")
	wantInt(-1, "TTL", "a")
	wantInt(-2, "TTL", "missing")
	wantInt(-2, "PTTL", "missing")
	wantInt(2, "DEL", "a", "b", "missing")
	wantStr("3", "HGET", "h", "views")
	wantNil("HGET", "h", "nope")
	hm, err := do("HMGET", "h", "views", "nope").ToArray()
	if err != nil || len(hm) != 2 || !hm[1].IsNil() {
		t.Fatalf("HMGET = %v, %v", hm, err)
	}
	wantInt(1, "HLEN", "h")
	wantInt(1, "HEXISTS", "h", "views")
	wantInt(0, "HEXISTS", "h", "nope")
	wantInt(1, "HDEL", "h", "views")
	wantInt(0, "HLEN", "h")
	wantInt(1, "PFADD", "p2", "c", "d")
	wantInt(4, "PFCOUNT", "p", "p2")
	wantStr("OK", "PFMERGE", "p3", "p", "p2")
	wantInt(4, "PFCOUNT", "p3")
	for i := 0; i < 20; i++ {
		do("INCR", fmt.Sprintf("k:%d", i))
	}
	var keys []string
	var cursor uint64
	for {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match("k:*").Count(3).Build()).AsScanEntry()
		if err != nil {
			t.Fatalf("SCAN: %v", err)
		}
		keys = append(keys, e.Elements...)
		if e.Cursor == 0 {
			break
		}
		cursor = e.Cursor
	}
	mustEqual(t, "SCAN keys", len(keys), 20)
	ks, _ := do("KEYS", "k:1*").AsStrSlice()
	sort.Strings(ks)
	mustEqual(t, "KEYS", strings.Join(ks, ","), "k:1,k:10,k:11,k:12,k:13,k:14,k:15,k:16,k:17,k:18,k:19")
	if n, _ := do("DBSIZE").AsInt64(); n < 20 {
		t.Fatalf("DBSIZE = %d", n)
	}
	wantStr("PONG", "PING")
	wantStr("hello", "ECHO", "hello")
	wantStr("OK", "SELECT", "0")
	if id, _ := do("CLIENT", "ID").AsInt64(); id <= 0 {
		t.Fatalf("CLIENT ID = %d", id)
	}
	if n, _ := do("COMMAND", "COUNT").AsInt64(); n < 40 {
		t.Fatalf("COMMAND COUNT = %d", n)
	}
	if err := do("COMMAND", "DOCS", "incr").Error(); err != nil {
		t.Fatalf("COMMAND DOCS: %v", err)
	}
	if info, _ := do("INFO", "server", "clients").ToString(); !strings.Contains(info, "connected_clients:") {
		t.Fatalf("INFO = %q", info)
	}
	if err := do("CONFIG", "GET", "appendonly").Error(); err != nil {
		t.Fatalf("CONFIG GET: %v", err)
	}
	wantErr("WRONGTYPE Operation against a key holding the wrong kind of value", "GET", "p")
	wantErr("ERR wrong number of arguments for 'get' command", "GET")
	wantErr("ERR unknown command 'BLAH', with args beginning with: 'x' ", "BLAH", "x")

	// Pipelines (DoMulti) and MULTI/EXEC.
	cmds := make(rueidis.Commands, 0, 500)
	for i := 0; i < 500; i++ {
		cmds = append(cmds, c.B().Incr().Key("pipe").Build())
	}
	for i, r := range c.DoMulti(ctx, cmds...) {
		if n, err := r.AsInt64(); err != nil || n != int64(i+1) {
			t.Fatalf("pipelined INCR %d = %d, %v", i, n, err)
		}
	}
	res := c.DoMulti(ctx,
		c.B().Multi().Build(),
		c.B().Incr().Key("tx").Build(),
		c.B().Hincrby().Key("txh").Field("f").Increment(5).Build(),
		c.B().Exec().Build())
	ex, err := res[3].ToArray()
	if err != nil || len(ex) != 2 {
		t.Fatalf("EXEC = %v, %v", ex, err)
	}
	if n, _ := ex[1].AsInt64(); n != 5 {
		t.Fatalf("EXEC HINCRBY = %d", n)
	}

	// Auto-pipelining from many goroutines.
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				if err := c.Do(ctx, c.B().Incr().Key("auto").Build()).Error(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	wantStr("3200", "GET", "auto")
}
