package tiered_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// testRESPScripts runs Lua scripts and the read-then-write idioms over the
// tiered backend: the limiter through go-redis's Script helper, from many
// clients on one key (exact counts: the script gate holds this node's
// RESP clients back), and GETSET, SET ... GET, GETDEL, EXPIREAT.
func testRESPScripts(t *testing.T, su setup) {
	e := su.env(t, nil)
	const clients, runs = 8, 25
	c := serveRESP(t, e.b, clients)
	ctx := context.Background()
	lim := redis.NewScript(`local c = redis.call('INCR', KEYS[1]) if c == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end return c`)
	seen := make(map[int64]int)
	var mu sync.Mutex
	var wg sync.WaitGroup
	errc := make(chan error, clients)
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < runs; j++ {
				n, err := lim.Run(ctx, c, []string{"rl"}, 600).Int64()
				if err != nil {
					errc <- err
					return
				}
				mu.Lock()
				seen[n]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	for n := int64(1); n <= clients*runs; n++ {
		if seen[n] != 1 {
			t.Fatalf("count %d returned %d times", n, seen[n])
		}
	}
	if ttl, err := c.TTL(ctx, "rl").Result(); err != nil || ttl <= 0 || ttl > 600*time.Second {
		t.Fatalf("TTL = %v (%v)", ttl, err)
	}
	check := func(what string, got, want any, err error) {
		t.Helper()
		if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s = %v (%v), want %v", what, got, err, want)
		}
	}
	v, err := c.Do(ctx, "GETSET", "g", "1").Result()
	check("GETSET of a new key", v, "<nil>", ignoreNil(err))
	v, err = c.Do(ctx, "SET", "g", "2", "GET").Result()
	check("SET GET", v, "1", err)
	v, err = c.Do(ctx, "GETDEL", "g").Result()
	check("GETDEL", v, "2", err)
	n, err := c.Exists(ctx, "g").Result()
	check("EXISTS after GETDEL", n, 0, err)
	c.Set(ctx, "x", 1, 0)
	at := time.Now().Add(time.Hour).Unix()
	n, err = c.Do(ctx, "EXPIREAT", "x", at).Int64()
	check("EXPIREAT", n, 1, err)
	// The tiered mode keeps relative TTLs (Op.ResolveExpireAt): the
	// expiry comes back within the time the write took, rounded down.
	if n, err = c.Do(ctx, "EXPIRETIME", "x").Int64(); err != nil || n < at-1 || n > at {
		t.Errorf("EXPIRETIME after EXPIREAT %d = %d (%v)", at, n, err)
	}
}

func ignoreNil(err error) error {
	if err == redis.Nil {
		return nil
	}
	return err
}
