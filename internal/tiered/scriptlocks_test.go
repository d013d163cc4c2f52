package tiered_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/counterd/counterd/internal/api/resp"
	"github.com/counterd/counterd/internal/contract"
	redisstore "github.com/counterd/counterd/internal/store/redis"
	"github.com/counterd/counterd/internal/tiered"
)

// serveRESP serves b's Redis protocol on a fresh port and returns a
// client of it.
func serveRESP(t *testing.T, b *tiered.Backend, conns int) *redis.Client {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rs := resp.New(b, resp.Options{})
	go func() { _ = rs.Serve(ln) }()
	t.Cleanup(func() { _ = rs.Close() })
	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), Protocol: 2, DisableIdentity: true, PoolSize: conns})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// notBusy runs f again while it is answered BUSY (a script of this node
// ran past the time limit, here waiting for the other node's locks on a
// loaded machine), as Redis clients do: a command answered BUSY did not
// run.
func notBusy(f func() error) error {
	for {
		err := f()
		if err == nil || !strings.HasPrefix(err.Error(), "BUSY ") {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// testScriptLocksTwoNodes: two tiered nodes on one Redis and PostgreSQL,
// each serving the Redis protocol. Clients of both run a script that
// reads two counters and SETs each to what it read plus one (an update
// is lost if another write lands between its read and its SET), while
// other clients of both nodes INCR the same two counters in pairs and a
// writer of the second node applies adds to them directly (the HTTP
// API's path). Every update must count: each counter ends at the number
// of scripts plus increments. And a script, its keys locked, sees the
// counters between two pairs: a - b is at most the number of pair
// writers (those between their two INCRs). Without the script locks the
// two nodes' scripts, and the other node's writes, interleave.
func testScriptLocksTwoNodes(t *testing.T, su setup) {
	e := su.env(t, nil)
	b2 := e.second(t, nil)
	const scripters, pairers, runs = 3, 2, 15 // per node
	nodes := []*redis.Client{serveRESP(t, e.b, scripters+pairers), serveRESP(t, b2, scripters+pairers)}
	sc := redis.NewScript(`
local a = tonumber(redis.call('GET', KEYS[1]) or '0')
local b = tonumber(redis.call('GET', KEYS[2]) or '0')
redis.call('SET', KEYS[1], a + 1)
redis.call('SET', KEYS[2], b + 1)
return a - b`)
	ka, kb := "sl:a", "sl:b"
	ctx := context.Background()
	var wg sync.WaitGroup
	errc := make(chan error, 2*(scripters+pairers)+1)
	var mu sync.Mutex
	var gaps []int64
	for _, c := range nodes {
		for range scripters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range runs {
					var d int64
					err := notBusy(func() (err error) {
						d, err = sc.Run(ctx, c, []string{ka, kb}).Int64()
						return err
					})
					if err != nil {
						errc <- fmt.Errorf("script: %w", err)
						return
					}
					mu.Lock()
					gaps = append(gaps, d)
					mu.Unlock()
				}
			}()
		}
		for range pairers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range runs {
					for _, k := range []string{ka, kb} {
						if err := notBusy(func() error { return c.Incr(ctx, k).Err() }); err != nil {
							errc <- fmt.Errorf("INCR: %w", err)
							return
						}
					}
				}
			}()
		}
	}
	wg.Add(1)
	go func() { // the second node's direct writer (the HTTP API's path)
		defer wg.Done()
		for range runs {
			for _, k := range []string{ka, kb} {
				if _, err := b2.Apply(ctx, add(k, contract.KindNone, 1), contract.WriteOptions{}); err != nil {
					errc <- fmt.Errorf("Apply: %w", err)
					return
				}
			}
		}
	}()
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	want := int64(len(nodes)*(scripters+pairers)*runs + runs)
	for _, k := range []string{ka, kb} {
		for i, b := range []*tiered.Backend{e.b, b2} {
			if v := view(t, b, k); v.Value != want {
				t.Errorf("%s read on node %d = %d, want %d (updates lost)", k, i+1, v.Value, want)
			}
		}
	}
	for _, d := range gaps {
		if d < 0 || d > int64(len(nodes)*pairers+1) {
			t.Errorf("a script read a - b = %d: another write landed between its reads", d)
			break
		}
	}
	for _, k := range []string{ka, kb} {
		if n, err := e.b.Redis().Client().Exists(ctx, redisstore.LockKey(k)).Result(); err != nil || n != 0 {
			t.Errorf("lock of %s left behind: %d %v", k, n, err)
		}
	}
}

// testScriptLockOfCrashedHolder: the lock a crashed script holder left
// (its key, for what remained of its lease) holds every writer back
// until the lease ends: a write whose deadline comes first fails with
// ErrLocked (contract.ErrUnavailable: HTTP 503, RESP TRYAGAIN) having
// changed nothing; a batch checks the lock of each of its ids (the
// locked second one fails it, and the first op is undone); a write that
// may wait applies once the lease is over, and so does a script.
func testScriptLockOfCrashedHolder(t *testing.T, su setup) {
	e := su.env(t, nil)
	ctx := context.Background()
	apply(t, e.b, add("held", contract.KindNone, 1))
	lease := 2 * time.Second
	rc := e.b.Redis().Client()
	if err := rc.Set(ctx, redisstore.LockKey("held"), "crashed-node:token", lease).Err(); err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	_, err := e.b.Apply(dctx, add("held", contract.KindNone, 1), contract.WriteOptions{})
	cancel()
	if !errors.Is(err, tiered.ErrLocked) || !errors.Is(err, contract.ErrUnavailable) {
		t.Fatalf("write of a locked counter with a near deadline: %v, want ErrLocked", err)
	}
	dctx, cancel = context.WithTimeout(ctx, 30*time.Millisecond)
	_, err = e.b.ApplyBatch(dctx, []contract.Op{add("free", contract.KindNone, 5), add("held", contract.KindNone, 1)}, contract.WriteOptions{})
	cancel()
	var be *contract.BatchError
	if !errors.As(err, &be) || be.Index != 1 || !errors.Is(err, tiered.ErrLocked) {
		t.Fatalf("batch with a locked second id: %v, want ErrLocked at index 1", err)
	}
	if v := view(t, e.b, "free"); v.Value != 0 {
		t.Fatalf("free after the failed batch = %d, want 0 (undone)", v.Value)
	}
	if v := view(t, e.b, "held"); v.Value != 1 {
		t.Fatalf("held changed while locked: %d", v.Value)
	}
	if pttl, err := rc.(redis.UniversalClient).PTTL(ctx, redisstore.LockKey("held")).Result(); err != nil || pttl <= 0 {
		t.Fatalf("the crashed holder's lock is gone already (%v %v): the checks above proved nothing", pttl, err)
	}
	// No deadline: the write waits for the lease to end (LockWait is
	// longer), then applies.
	if r := apply(t, e.b, add("held", contract.KindNone, 1)); r.Value != 2 {
		t.Fatalf("write after the lease = %d, want 2", r.Value)
	}
	if err := rc.Set(ctx, redisstore.LockKey("held"), "crashed-node:token", lease).Err(); err != nil {
		t.Fatal(err)
	}
	c := serveRESP(t, e.b, 1)
	if n, err := c.Eval(ctx, `return redis.call('INCR', KEYS[1])`, []string{"held"}).Int64(); err != nil || n != 3 {
		t.Fatalf("script over the crashed holder's lock: %d %v, want 3", n, err)
	}
}
