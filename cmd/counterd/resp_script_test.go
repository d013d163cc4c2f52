package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestRESPScriptHTTPWrites: HTTP increments of a key do not land between
// the commands of a Lua script on the same node (docs/resp.md,
// "Scripting": the HTTP API's writes take the script gate). The script
// INCRs the key and reads it back many times, failing if it moved, while
// HTTP clients increment it.
func TestRESPScriptHTTPWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("runs counterd")
	}
	respAddr := "127.0.0.1:" + freePort(t)
	p := start(t, t.TempDir(), "--resp", respAddr)
	rdb := redis.NewClient(&redis.Options{Addr: respAddr, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	const script = `local a = redis.call('INCR', KEYS[1])
for i = 1, 200 do
  local b = tonumber(redis.call('GET', KEYS[1]))
  if b ~= a then return redis.error_reply('interleaved: ' .. a .. ' then ' .. b .. ' at read ' .. i) end
end
return a`
	var acked atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				code, body, _, err := post(p.addr+"/counters/hot/increment", "", `{"delta":1}`)
				if err == nil && code != 200 {
					err = fmt.Errorf("HTTP %d %v", code, body)
				}
				if err != nil {
					errc <- err
					return
				}
				acked.Add(1)
			}
		}()
	}
	const runs = 30
	var scriptErr error
	for i := 0; i < runs && scriptErr == nil; i++ {
		scriptErr = rdb.Eval(ctx, script, []string{"hot"}).Err()
	}
	close(stop)
	wg.Wait()
	close(errc)
	if scriptErr != nil {
		t.Fatalf("script: %v", scriptErr)
	}
	for err := range errc {
		t.Fatalf("HTTP increment: %v", err)
	}
	if acked.Load() == 0 {
		t.Fatal("no HTTP increment ran")
	}
	if got, want := getValue(t, p.addr, "hot"), runs+acked.Load(); got != want {
		t.Fatalf("hot = %d, want %d (%d scripts, %d HTTP increments)", got, want, runs, acked.Load())
	}
}
