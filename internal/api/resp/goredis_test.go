package resp_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/counterd/counterd/internal/api/resp"
)

func newGoRedis(t testing.TB, addr string, proto int) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: proto, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

func mustEqual[T comparable](t testing.TB, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

func mustErr(t testing.TB, what string, err error, want string) {
	t.Helper()
	if err == nil || err.Error() != want {
		t.Fatalf("%s: err = %v, want %q", what, err, want)
	}
}

func mustOK(t testing.TB, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func TestGoRedis(t *testing.T) {
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			ts := start(t, resp.Options{Version: "1.2.3"})
			rdb := newGoRedis(t, ts.addr, proto)
			testGoRedisCommands(t, ts, rdb, proto)
		})
	}
}

func testGoRedisCommands(t *testing.T, ts *testServer, rdb *redis.Client, proto int) {
	ctx := context.Background()

	t.Run("ping-echo-select", func(t *testing.T) {
		mustEqual(t, "PING", rdb.Ping(ctx).Val(), "PONG")
		mustEqual(t, "ECHO", rdb.Echo(ctx, "hi there").Val(), "hi there")
		v, err := rdb.Do(ctx, "PING", "msg").Text()
		mustOK(t, "PING msg", err)
		mustEqual(t, "PING msg", v, "msg")
		mustOK(t, "SELECT 0", rdb.Do(ctx, "SELECT", "0").Err())
		mustErr(t, "SELECT 1", rdb.Do(ctx, "SELECT", "1").Err(), "ERR DB index is out of range")
		mustErr(t, "SELECT x", rdb.Do(ctx, "SELECT", "x").Err(), "ERR value is not an integer or out of range")
		tm, err := rdb.Time(ctx).Result()
		mustOK(t, "TIME", err)
		if d := time.Since(tm); d > time.Minute || d < -time.Minute {
			t.Fatalf("TIME = %v", tm)
		}
	})

	t.Run("incr-decr", func(t *testing.T) {
		mustEqual(t, "INCR", rdb.Incr(ctx, "page_views:article_123").Val(), 1)
		mustEqual(t, "INCR", rdb.Incr(ctx, "page_views:article_123").Val(), 2)
		mustEqual(t, "INCRBY", rdb.IncrBy(ctx, "page_views:article_123", 40).Val(), 42)
		mustEqual(t, "DECR", rdb.Decr(ctx, "page_views:article_123").Val(), 41)
		mustEqual(t, "DECRBY", rdb.DecrBy(ctx, "page_views:article_123", 50).Val(), -9)
		mustEqual(t, "GET", rdb.Get(ctx, "page_views:article_123").Val(), "-9")
		mustEqual(t, "DECR new", rdb.Decr(ctx, "d").Val(), -1)
		mustErr(t, "INCRBY x", rdb.Do(ctx, "INCRBY", "a", "x").Err(), "ERR value is not an integer or out of range")
		mustErr(t, "INCRBY 1.5", rdb.Do(ctx, "INCRBY", "a", "1.5").Err(), "ERR value is not an integer or out of range")
		mustErr(t, "INCRBY +1", rdb.Do(ctx, "INCRBY", "a", "+1").Err(), "ERR value is not an integer or out of range")
		mustErr(t, "INCRBY 2^63", rdb.Do(ctx, "INCRBY", "a", "9223372036854775808").Err(), "ERR value is not an integer or out of range")
		mustErr(t, "DECRBY min", rdb.Do(ctx, "DECRBY", "a", "-9223372036854775808").Err(), "ERR decrement would overflow")
		mustOK(t, "SET max", rdb.Set(ctx, "big", math.MaxInt64, 0).Err())
		mustErr(t, "INCR overflow", rdb.Incr(ctx, "big").Err(), "ERR increment or decrement would overflow")
		mustEqual(t, "GET big unchanged", rdb.Get(ctx, "big").Val(), "9223372036854775807")
		mustOK(t, "SET min", rdb.Set(ctx, "small", math.MinInt64, 0).Err())
		mustErr(t, "DECR overflow", rdb.Decr(ctx, "small").Err(), "ERR increment or decrement would overflow")
		mustErr(t, "INCR arity", rdb.Do(ctx, "INCR").Err(), "ERR wrong number of arguments for 'incr' command")
		mustErr(t, "INCR arity", rdb.Do(ctx, "incr", "a", "b").Err(), "ERR wrong number of arguments for 'incr' command")
		mustErr(t, "INCRBY arity", rdb.Do(ctx, "IncrBy", "a").Err(), "ERR wrong number of arguments for 'incrby' command")
	})

	t.Run("get-set", func(t *testing.T) {
		_, err := rdb.Get(ctx, "missing").Result()
		if !errors.Is(err, redis.Nil) {
			t.Fatalf("GET missing: %v, want redis.Nil", err)
		}
		mustEqual(t, "SET", rdb.Set(ctx, "s", 10, 0).Val(), "OK")
		mustEqual(t, "GET", rdb.Get(ctx, "s").Val(), "10")
		mustErr(t, "SET text", rdb.Set(ctx, "s", "hello", 0).Err(), "ERR value is not an integer or out of range")
		mustErr(t, "SET float", rdb.Set(ctx, "s", "1.0", 0).Err(), "ERR value is not an integer or out of range")
		mustEqual(t, "GET unchanged", rdb.Get(ctx, "s").Val(), "10")
		// NX / XX
		ok, err := rdb.SetNX(ctx, "s", 11, 0).Result()
		mustOK(t, "SET NX existing", err)
		mustEqual(t, "SET NX existing", ok, false)
		ok, _ = rdb.SetNX(ctx, "nx", 5, 0).Result()
		mustEqual(t, "SET NX new", ok, true)
		ok, _ = rdb.SetXX(ctx, "xx", 5, 0).Result()
		mustEqual(t, "SET XX missing", ok, false)
		mustEqual(t, "EXISTS xx", rdb.Exists(ctx, "xx").Val(), 0)
		ok, _ = rdb.SetXX(ctx, "nx", 6, 0).Result()
		mustEqual(t, "SET XX existing", ok, true)
		mustEqual(t, "GET nx", rdb.Get(ctx, "nx").Val(), "6")
		mustErr(t, "SET NX XX", rdb.Do(ctx, "SET", "a", "1", "NX", "XX").Err(), "ERR syntax error")
		mustErr(t, "SET junk", rdb.Do(ctx, "SET", "a", "1", "FOO").Err(), "ERR syntax error")
		// SETNX command
		mustEqual(t, "SETNX", rdb.Do(ctx, "SETNX", "nx", "1").Val(), any(int64(0)))
		// EX / PX / KEEPTTL
		mustOK(t, "SET EX", rdb.Set(ctx, "e", 1, 100*time.Second).Err())
		if ttl := rdb.TTL(ctx, "e").Val(); ttl < 80*time.Second || ttl > 100*time.Second {
			t.Fatalf("TTL after SET EX 100 = %v", ttl)
		}
		mustOK(t, "SET PX", rdb.Set(ctx, "e", 2, 50*time.Second+500*time.Millisecond).Err())
		if ttl := rdb.PTTL(ctx, "e").Val(); ttl < 30*time.Second || ttl > 50500*time.Millisecond {
			t.Fatalf("PTTL after SET PX 50500 = %v", ttl)
		}
		mustOK(t, "SET KEEPTTL", rdb.SetArgs(ctx, "e", 3, redis.SetArgs{KeepTTL: true}).Err())
		if ttl := rdb.PTTL(ctx, "e").Val(); ttl < 40*time.Second {
			t.Fatalf("PTTL after KEEPTTL = %v", ttl)
		}
		mustOK(t, "SET plain", rdb.Set(ctx, "e", 4, 0).Err())
		mustEqual(t, "TTL after plain SET", rdb.TTL(ctx, "e").Val(), time.Duration(-1))
		mustErr(t, "SET EX 0", rdb.Do(ctx, "SET", "e", "1", "EX", "0").Err(), "ERR invalid expire time in 'set' command")
		mustErr(t, "SET EX -5", rdb.Do(ctx, "SET", "e", "1", "EX", "-5").Err(), "ERR invalid expire time in 'set' command")
		mustErr(t, "SET PX x", rdb.Do(ctx, "SET", "e", "1", "PX", "x").Err(), "ERR value is not an integer or out of range")
		mustErr(t, "SET EX KEEPTTL", rdb.Do(ctx, "SET", "e", "1", "EX", "5", "KEEPTTL").Err(), "ERR syntax error")
		mustErr(t, "SET EX missing", rdb.Do(ctx, "SET", "e", "1", "EX").Err(), "ERR syntax error")
		at := time.Now().Add(time.Hour).Unix()
		mustOK(t, "SET EXAT", rdb.Do(ctx, "SET", "e", "1", "EXAT", fmt.Sprint(at)).Err())
		if ttl := rdb.TTL(ctx, "e").Val(); ttl < 59*time.Minute || ttl > time.Hour+time.Second {
			t.Fatalf("TTL after EXAT = %v", ttl)
		}
		mustOK(t, "SET PXAT past", rdb.Do(ctx, "SET", "e", "1", "PXAT", "1000").Err())
		mustEqual(t, "EXISTS after PXAT past", rdb.Exists(ctx, "e").Val(), 0)
		// MSET/MGET
		mustOK(t, "MSET", rdb.MSet(ctx, "m1", 1, "m2", 2).Err())
		mustErr(t, "MSET text", rdb.MSet(ctx, "m1", 5, "m2", "two").Err(), "ERR value is not an integer or out of range")
		mustEqual(t, "GET m1 unchanged", rdb.Get(ctx, "m1").Val(), "1")
		mustErr(t, "MSET odd", rdb.Do(ctx, "MSET", "a", "1", "b").Err(), "ERR wrong number of arguments for 'mset' command")
		rdb.HIncrBy(ctx, "mh", "f", 1)
		vals, err := rdb.MGet(ctx, "m1", "nope", "m2", "mh", strings.Repeat("k", 300)).Result()
		mustOK(t, "MGET", err)
		want := []any{"1", nil, "2", nil, nil}
		if fmt.Sprint(vals) != fmt.Sprint(want) {
			t.Fatalf("MGET = %#v, want %#v", vals, want)
		}
	})

	t.Run("keys-and-errors", func(t *testing.T) {
		mustErr(t, "empty key", rdb.Incr(ctx, "").Err(), "ERR invalid key: empty")
		mustErr(t, "long key", rdb.Incr(ctx, strings.Repeat("x", 256)).Err(), "ERR invalid key: 256 bytes, at most 255")
		if err := rdb.Incr(ctx, "a\x01b").Err(); err == nil || !strings.HasPrefix(err.Error(), "ERR invalid key: byte 1 ") {
			t.Fatalf("control key: %v", err)
		}
		mustErr(t, "bad utf8", rdb.Incr(ctx, "\xff").Err(), "ERR invalid key: byte 0 is not printable UTF-8")
		mustEqual(t, "max key", rdb.Incr(ctx, strings.Repeat("x", 255)).Val(), 1)
		mustEqual(t, "unicode key", rdb.Incr(ctx, "über:ключ:键").Val(), 1)
		mustEqual(t, "unicode key", rdb.Get(ctx, "über:ключ:键").Val(), "1")
		mustErr(t, "unknown", rdb.Do(ctx, "FOO", "a", "b").Err(), "ERR unknown command 'FOO', with args beginning with: 'a' 'b' ")
		mustErr(t, "unknown noargs", rdb.Do(ctx, "foo").Err(), "ERR unknown command 'foo', with args beginning with: ")
		mustErr(t, "wrongtype", rdb.HIncrBy(ctx, "page_views:article_123", "f", 1).Err(), "WRONGTYPE Operation against a key holding the wrong kind of value")
		mustErr(t, "get hash", rdb.Get(ctx, "mh").Err(), "WRONGTYPE Operation against a key holding the wrong kind of value")
		mustErr(t, "incr hash", rdb.Incr(ctx, "mh").Err(), "WRONGTYPE Operation against a key holding the wrong kind of value")
		mustErr(t, "set hash", rdb.Set(ctx, "mh", 1, 0).Err(), "WRONGTYPE Operation against a key holding the wrong kind of value")
		mustErr(t, "pfadd counter", rdb.PFAdd(ctx, "m1", "x").Err(), "WRONGTYPE Key is not a valid HyperLogLog string value.") // as Redis: a counter is a string
	})

	t.Run("del-exists-type", func(t *testing.T) {
		rdb.Set(ctx, "d1", 1, 0)
		rdb.Set(ctx, "d2", 2, 0)
		rdb.PFAdd(ctx, "dh", "a")
		rdb.HIncrBy(ctx, "dhash", "f", 1)
		mustEqual(t, "EXISTS", rdb.Exists(ctx, "d1", "d2", "d1", "nope", "").Val(), 3)
		mustEqual(t, "TYPE counter", rdb.Type(ctx, "d1").Val(), "string")
		mustEqual(t, "TYPE hll", rdb.Type(ctx, "dh").Val(), "string")
		mustEqual(t, "TYPE hash", rdb.Type(ctx, "dhash").Val(), "hash")
		mustEqual(t, "TYPE none", rdb.Type(ctx, "nope").Val(), "none")
		mustEqual(t, "TYPE invalid", rdb.Type(ctx, "").Val(), "none")
		mustEqual(t, "DEL", rdb.Del(ctx, "d1", "d2", "d1", "nope", "", "dh", "dhash").Val(), 4)
		mustEqual(t, "EXISTS after DEL", rdb.Exists(ctx, "d1", "d2", "dh", "dhash").Val(), 0)
		mustEqual(t, "DEL none", rdb.Del(ctx, "d1").Val(), 0)
		rdb.Set(ctx, "u", 1, 0)
		mustEqual(t, "UNLINK", rdb.Unlink(ctx, "u").Val(), 1)
	})

	t.Run("expire-ttl", func(t *testing.T) {
		mustEqual(t, "TTL missing", rdb.TTL(ctx, "x1").Val(), time.Duration(-2))
		mustEqual(t, "PTTL missing", rdb.PTTL(ctx, "x1").Val(), time.Duration(-2))
		mustEqual(t, "EXPIRE missing", rdb.Expire(ctx, "x1", time.Minute).Val(), false)
		rdb.Incr(ctx, "x1")
		mustEqual(t, "TTL none", rdb.TTL(ctx, "x1").Val(), time.Duration(-1))
		mustEqual(t, "PERSIST none", rdb.Persist(ctx, "x1").Val(), false)
		mustEqual(t, "EXPIRE", rdb.Expire(ctx, "x1", 100*time.Second).Val(), true)
		mustEqual(t, "TTL", rdb.TTL(ctx, "x1").Val(), 100*time.Second)
		// Bounds leave room for a slow (race-enabled, loaded) machine.
		if p := rdb.PTTL(ctx, "x1").Val(); p <= 80*time.Second || p > 100*time.Second {
			t.Fatalf("PTTL = %v", p)
		}
		if et := rdb.ExpireTime(ctx, "x1").Val(); et < time.Duration(time.Now().Unix()+98)*time.Second {
			t.Fatalf("EXPIRETIME = %v", et)
		}
		mustEqual(t, "PEXPIRE", rdb.PExpire(ctx, "x1", 5500*time.Millisecond).Val(), true)
		if p := rdb.PTTL(ctx, "x1").Val(); p <= 0 || p > 5500*time.Millisecond {
			t.Fatalf("PTTL after PEXPIRE = %v", p)
		}
		mustEqual(t, "PERSIST", rdb.Persist(ctx, "x1").Val(), true)
		mustEqual(t, "TTL after PERSIST", rdb.TTL(ctx, "x1").Val(), time.Duration(-1))
		// Options.
		mustEqual(t, "EXPIRE XX no ttl", rdb.ExpireXX(ctx, "x1", time.Minute).Val(), false)
		mustEqual(t, "EXPIRE NX", rdb.ExpireNX(ctx, "x1", time.Minute).Val(), true)
		mustEqual(t, "EXPIRE NX again", rdb.ExpireNX(ctx, "x1", time.Hour).Val(), false)
		mustEqual(t, "EXPIRE GT smaller", rdb.ExpireGT(ctx, "x1", time.Second).Val(), false)
		mustEqual(t, "EXPIRE GT larger", rdb.ExpireGT(ctx, "x1", time.Hour).Val(), true)
		mustEqual(t, "EXPIRE LT", rdb.ExpireLT(ctx, "x1", time.Minute).Val(), true)
		mustEqual(t, "EXPIRE XX", rdb.ExpireXX(ctx, "x1", 2*time.Minute).Val(), true)
		mustErr(t, "EXPIRE NX XX", rdb.Do(ctx, "EXPIRE", "x1", "10", "NX", "XX").Err(), "ERR NX and XX, GT or LT options at the same time are not compatible")
		mustErr(t, "EXPIRE bad", rdb.Do(ctx, "EXPIRE", "x1", "ten").Err(), "ERR value is not an integer or out of range")
		mustErr(t, "EXPIRE huge", rdb.Do(ctx, "EXPIRE", "x1", "9223372036854775807").Err(), "ERR invalid expire time in 'expire' command")
		// Non-positive TTL deletes the key, like Redis.
		mustEqual(t, "EXPIRE 0", rdb.Do(ctx, "EXPIRE", "x1", "0").Val(), any(int64(1)))
		mustEqual(t, "EXISTS after EXPIRE 0", rdb.Exists(ctx, "x1").Val(), 0)
		rdb.Incr(ctx, "x1")
		mustEqual(t, "PEXPIRE -1", rdb.Do(ctx, "PEXPIRE", "x1", "-1").Val(), any(int64(1)))
		mustEqual(t, "EXISTS after PEXPIRE -1", rdb.Exists(ctx, "x1").Val(), 0)
		// Expiry really happens.
		rdb.Incr(ctx, "x2")
		rdb.PExpire(ctx, "x2", 30*time.Millisecond)
		time.Sleep(80 * time.Millisecond)
		mustEqual(t, "EXISTS expired", rdb.Exists(ctx, "x2").Val(), 0)
		mustEqual(t, "GET expired", rdb.Get(ctx, "x2").Err(), error(redis.Nil))
	})

	t.Run("hash", func(t *testing.T) {
		mustEqual(t, "HINCRBY", rdb.HIncrBy(ctx, "h", "views", 5).Val(), 5)
		mustEqual(t, "HINCRBY", rdb.HIncrBy(ctx, "h", "views", -2).Val(), 3)
		mustEqual(t, "HINCRBY", rdb.HIncrBy(ctx, "h", "likes", 1).Val(), 1)
		mustEqual(t, "HINCRBY binary field", rdb.HIncrBy(ctx, "h", "a b\r\n", 7).Val(), 7)
		mustEqual(t, "HGET", rdb.HGet(ctx, "h", "views").Val(), "3")
		mustEqual(t, "HGET missing field", rdb.HGet(ctx, "h", "nope").Err(), error(redis.Nil))
		mustEqual(t, "HGET missing key", rdb.HGet(ctx, "nokey", "f").Err(), error(redis.Nil))
		all, err := rdb.HGetAll(ctx, "h").Result()
		mustOK(t, "HGETALL", err)
		if fmt.Sprint(all) != fmt.Sprint(map[string]string{"views": "3", "likes": "1", "a b\r\n": "7"}) {
			t.Fatalf("HGETALL = %v", all)
		}
		empty, err := rdb.HGetAll(ctx, "nokey").Result()
		mustOK(t, "HGETALL missing", err)
		mustEqual(t, "HGETALL missing", len(empty), 0)
		vals, err := rdb.HMGet(ctx, "h", "likes", "nope", "views").Result()
		mustOK(t, "HMGET", err)
		if fmt.Sprint(vals) != fmt.Sprint([]any{"1", nil, "3"}) {
			t.Fatalf("HMGET = %#v", vals)
		}
		mustEqual(t, "HLEN", rdb.HLen(ctx, "h").Val(), 3)
		mustEqual(t, "HLEN missing", rdb.HLen(ctx, "nokey").Val(), 0)
		mustEqual(t, "HEXISTS", rdb.HExists(ctx, "h", "likes").Val(), true)
		mustEqual(t, "HEXISTS no", rdb.HExists(ctx, "h", "nope").Val(), false)
		keys := rdb.HKeys(ctx, "h").Val()
		sort.Strings(keys)
		mustEqual(t, "HKEYS", fmt.Sprint(keys), fmt.Sprint([]string{"a b\r\n", "likes", "views"}))
		mustEqual(t, "HVALS", len(rdb.HVals(ctx, "h").Val()), 3)
		mustEqual(t, "HDEL", rdb.HDel(ctx, "h", "likes", "nope", "likes").Val(), 1)
		mustEqual(t, "HDEL", rdb.HDel(ctx, "h", "views", "a b\r\n").Val(), 2)
		mustEqual(t, "HLEN after HDEL", rdb.HLen(ctx, "h").Val(), 0)
		mustEqual(t, "EXISTS emptied hash", rdb.Exists(ctx, "h").Val(), 0)
		mustEqual(t, "HDEL missing", rdb.HDel(ctx, "h", "x").Val(), 0)
		mustErr(t, "HINCRBY text", rdb.Do(ctx, "HINCRBY", "h", "f", "one").Err(), "ERR value is not an integer or out of range")
		rdb.HIncrBy(ctx, "h", "max", math.MaxInt64)
		mustErr(t, "HINCRBY overflow", rdb.HIncrBy(ctx, "h", "max", 1).Err(), "ERR increment or decrement would overflow")
		rdb.Incr(ctx, "notahash")
		for name, err := range map[string]error{
			"HGET":    rdb.HGet(ctx, "notahash", "f").Err(),
			"HMGET":   rdb.HMGet(ctx, "notahash", "f").Err(),
			"HGETALL": rdb.HGetAll(ctx, "notahash").Err(),
			"HLEN":    rdb.HLen(ctx, "notahash").Err(),
			"HEXISTS": rdb.HExists(ctx, "notahash", "f").Err(),
			"HDEL":    rdb.HDel(ctx, "notahash", "f").Err(),
		} {
			mustErr(t, name+" on counter", err, "WRONGTYPE Operation against a key holding the wrong kind of value")
		}
		mustErr(t, "HINCRBY arity", rdb.Do(ctx, "HINCRBY", "h", "f").Err(), "ERR wrong number of arguments for 'hincrby' command")
	})

	t.Run("hyperloglog", func(t *testing.T) {
		mustEqual(t, "PFADD new", rdb.PFAdd(ctx, "hll1", "a", "b", "c").Val(), 1)
		mustEqual(t, "PFADD same", rdb.PFAdd(ctx, "hll1", "a", "b").Val(), 0)
		mustEqual(t, "PFADD no items new", rdb.Do(ctx, "PFADD", "hll0").Val(), any(int64(1)))
		mustEqual(t, "PFADD no items existing", rdb.Do(ctx, "PFADD", "hll0").Val(), any(int64(0)))
		mustEqual(t, "PFCOUNT", rdb.PFCount(ctx, "hll1").Val(), 3)
		mustEqual(t, "PFCOUNT missing", rdb.PFCount(ctx, "nohll").Val(), 0)
		rdb.PFAdd(ctx, "hll2", "c", "d", "e")
		mustEqual(t, "PFCOUNT union", rdb.PFCount(ctx, "hll1", "hll2", "nohll").Val(), 5)
		mustEqual(t, "PFMERGE", rdb.PFMerge(ctx, "hll3", "hll1", "hll2").Val(), "OK")
		mustEqual(t, "PFCOUNT merged", rdb.PFCount(ctx, "hll3").Val(), 5)
		mustEqual(t, "PFMERGE into self", rdb.PFMerge(ctx, "hll1", "hll2").Val(), "OK")
		mustEqual(t, "PFCOUNT merged self", rdb.PFCount(ctx, "hll1").Val(), 5)
		mustErr(t, "GET hll", rdb.Get(ctx, "hll1").Err(), "WRONGTYPE Operation against a key holding the wrong kind of value")
		rdb.Incr(ctx, "notanhll")
		mustErr(t, "PFCOUNT counter", rdb.PFCount(ctx, "hll1", "notanhll").Err(), "WRONGTYPE Key is not a valid HyperLogLog string value.")
		mustErr(t, "PFCOUNT hash", rdb.PFCount(ctx, "hll1", "mh").Err(), "WRONGTYPE Operation against a key holding the wrong kind of value")
		mustErr(t, "PFMERGE counter", rdb.PFMerge(ctx, "hll1", "notanhll").Err(), "WRONGTYPE Key is not a valid HyperLogLog string value.")
		// Many items: more than one engine op.
		items := make([]any, 25000)
		for i := range items {
			items[i] = fmt.Sprintf("item-%d", i)
		}
		mustEqual(t, "PFADD many", rdb.PFAdd(ctx, "hllbig", items...).Val(), 1)
		if n := rdb.PFCount(ctx, "hllbig").Val(); n < 24000 || n > 26000 {
			t.Fatalf("PFCOUNT of 25000 = %d", n)
		}
	})

	t.Run("scan-keys-dbsize", func(t *testing.T) {
		for i := 0; i < 50; i++ {
			rdb.Incr(ctx, fmt.Sprintf("scan:%02d", i))
		}
		var got []string
		var cursor uint64
		for {
			keys, next, err := rdb.Scan(ctx, cursor, "scan:*", 7).Result()
			mustOK(t, "SCAN", err)
			got = append(got, keys...)
			if next == 0 {
				break
			}
			cursor = next
		}
		sort.Strings(got)
		mustEqual(t, "SCAN count", len(got), 50)
		mustEqual(t, "SCAN first", got[0], "scan:00")
		keys := rdb.Keys(ctx, "scan:1?").Val()
		mustEqual(t, "KEYS", len(keys), 10)
		mustEqual(t, "KEYS none", len(rdb.Keys(ctx, "nomatch*").Val()), 0)
		n := rdb.DBSize(ctx).Val()
		if n < 50 {
			t.Fatalf("DBSIZE = %d", n)
		}
		mustEqual(t, "DBSIZE vs KEYS *", int64(len(rdb.Keys(ctx, "*").Val())), n)
		rdb.HIncrBy(ctx, "scan:hash", "f", 1)
		var hashes []string
		cursor = 0
		for {
			keys, next, err := rdb.ScanType(ctx, cursor, "scan:*", 100, "hash").Result()
			mustOK(t, "SCAN TYPE", err)
			hashes = append(hashes, keys...)
			if next == 0 {
				break
			}
			cursor = next
		}
		mustEqual(t, "SCAN TYPE hash", fmt.Sprint(hashes), "[scan:hash]")
		mustErr(t, "SCAN bad cursor", rdb.Do(ctx, "SCAN", "x").Err(), "ERR invalid cursor")
		mustErr(t, "SCAN bad count", rdb.Do(ctx, "SCAN", "0", "COUNT", "0").Err(), "ERR syntax error")
		mustErr(t, "SCAN bad opt", rdb.Do(ctx, "SCAN", "0", "FOO", "1").Err(), "ERR syntax error")
	})

	t.Run("client-hello", func(t *testing.T) {
		id, err := rdb.ClientID(ctx).Result()
		mustOK(t, "CLIENT ID", err)
		if id <= 0 {
			t.Fatalf("CLIENT ID = %d", id)
		}
		// One connection for the name commands.
		conn := rdb.Conn()
		defer conn.Close()
		mustEqual(t, "CLIENT GETNAME unset", conn.ClientGetName(ctx).Err(), error(redis.Nil))
		mustOK(t, "CLIENT SETNAME", conn.ClientSetName(ctx, "worker-1").Err())
		mustEqual(t, "CLIENT GETNAME", conn.ClientGetName(ctx).Val(), "worker-1")
		mustErr(t, "CLIENT SETNAME space", conn.Do(ctx, "CLIENT", "SETNAME", "a b").Err(), "ERR Client names cannot contain spaces, newlines or special characters.")
		mustOK(t, "CLIENT SETINFO", conn.Do(ctx, "CLIENT", "SETINFO", "LIB-NAME", "mylib").Err())
		mustErr(t, "CLIENT SETINFO bad", conn.Do(ctx, "CLIENT", "SETINFO", "FOO", "x").Err(), "ERR Unrecognized option 'FOO'")
		info, err := conn.ClientInfo(ctx).Result()
		mustOK(t, "CLIENT INFO", err)
		mustEqual(t, "CLIENT INFO name", info.Name, "worker-1")
		list, err := rdb.ClientList(ctx).Result()
		mustOK(t, "CLIENT LIST", err)
		if !strings.Contains(list, "name=worker-1") {
			t.Fatalf("CLIENT LIST = %q", list)
		}
		mustErr(t, "CLIENT FOO", rdb.Do(ctx, "CLIENT", "FOO").Err(), "ERR unknown subcommand 'FOO'. Try CLIENT HELP.")
		mustErr(t, "CLIENT SETNAME arity", rdb.Do(ctx, "CLIENT", "SETNAME").Err(), "ERR wrong number of arguments for 'client|setname' command")
		m, err := conn.Do(ctx, "HELLO", fmt.Sprint(proto)).Result()
		mustOK(t, "HELLO", err)
		s := fmt.Sprint(m)
		sep := ":"
		if proto == 2 {
			sep = " " // a flat array in RESP2
		}
		for _, want := range []string{"proto" + sep + fmt.Sprint(proto), "version" + sep + resp.RedisVersion, "counterd_version" + sep + "1.2.3", "server" + sep + "counterd"} {
			if !strings.Contains(s, want) {
				t.Fatalf("HELLO = %s, missing %s", s, want)
			}
		}
		mustErr(t, "HELLO 4", conn.Do(ctx, "HELLO", "4").Err(), "NOPROTO unsupported protocol version")
		mustErr(t, "HELLO x", conn.Do(ctx, "HELLO", "x").Err(), "ERR Protocol version is not an integer or out of range")
		mustErr(t, "HELLO junk", conn.Do(ctx, "HELLO", fmt.Sprint(proto), "JUNK").Err(), "ERR Syntax error in HELLO option 'JUNK'")
		mustOK(t, "HELLO AUTH SETNAME", conn.Do(ctx, "HELLO", fmt.Sprint(proto), "AUTH", "default", "pw", "SETNAME", "n2").Err())
		mustEqual(t, "name after HELLO SETNAME", conn.ClientGetName(ctx).Val(), "n2")
		mustErr(t, "AUTH", conn.Do(ctx, "AUTH", "pw").Err(), "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
	})

	t.Run("command-info-config", func(t *testing.T) {
		n, err := rdb.Do(ctx, "COMMAND", "COUNT").Int64()
		mustOK(t, "COMMAND COUNT", err)
		if n < 40 {
			t.Fatalf("COMMAND COUNT = %d", n)
		}
		infos, err := rdb.Command(ctx).Result()
		mustOK(t, "COMMAND", err)
		mustEqual(t, "COMMAND entries", int64(len(infos)), n)
		incr := infos["incr"]
		if incr == nil || incr.Arity != 2 || incr.FirstKeyPos != 1 || !contains(incr.Flags, "write") {
			t.Fatalf("COMMAND incr = %+v", incr)
		}
		docs, err := rdb.Do(ctx, "COMMAND", "DOCS", "set", "nosuch").Result()
		mustOK(t, "COMMAND DOCS", err)
		if ds := fmt.Sprint(docs); !strings.Contains(ds, "summary") || !strings.Contains(ds, "KEEPTTL") {
			t.Fatalf("COMMAND DOCS set = %s", ds)
		}
		mustOK(t, "COMMAND DOCS all", rdb.Do(ctx, "COMMAND", "DOCS").Err())
		mustOK(t, "COMMAND INFO", rdb.Do(ctx, "COMMAND", "INFO", "get", "nosuch").Err())
		mustOK(t, "COMMAND LIST", rdb.Do(ctx, "COMMAND", "LIST").Err())
		info, err := rdb.Info(ctx).Result()
		mustOK(t, "INFO", err)
		for _, want := range []string{"# Server", "redis_version:" + resp.RedisVersion, "counterd_version:1.2.3", "# Clients", "connected_clients:", "# Stats", "total_commands_processed:", "# Keyspace", "db0:keys="} {
			if !strings.Contains(info, want) {
				t.Fatalf("INFO lacks %q:\n%s", want, info)
			}
		}
		ks := rdb.Info(ctx, "keyspace").Val()
		if strings.Contains(ks, "# Server") || !strings.Contains(ks, "db0:keys=") {
			t.Fatalf("INFO keyspace = %q", ks)
		}
		mustEqual(t, "INFO unknown", rdb.Info(ctx, "nosuchsection").Val(), "")
		cfg, err := rdb.ConfigGet(ctx, "save").Result()
		mustOK(t, "CONFIG GET save", err)
		if v, ok := cfg["save"]; !ok || v != "" {
			t.Fatalf("CONFIG GET save = %v", cfg)
		}
		cfg, err = rdb.ConfigGet(ctx, "max*").Result()
		mustOK(t, "CONFIG GET max*", err)
		mustEqual(t, "CONFIG GET maxclients", cfg["maxclients"], "10000")
		cfg, err = rdb.ConfigGet(ctx, "nosuch").Result()
		mustOK(t, "CONFIG GET nosuch", err)
		mustEqual(t, "CONFIG GET nosuch", len(cfg), 0)
		if err := rdb.ConfigSet(ctx, "maxclients", "5").Err(); err == nil {
			t.Fatal("CONFIG SET succeeded")
		}
		mustErr(t, "CLUSTER", rdb.Do(ctx, "CLUSTER", "SLOTS").Err(), "ERR This instance has cluster support disabled")
	})

	t.Run("flush-refused", func(t *testing.T) {
		rdb.Incr(ctx, "keep")
		err := rdb.FlushAll(ctx).Err()
		if err == nil || !strings.HasPrefix(err.Error(), "ERR FLUSHALL is disabled") {
			t.Fatalf("FLUSHALL: %v", err)
		}
		err = rdb.FlushDB(ctx).Err()
		if err == nil || !strings.HasPrefix(err.Error(), "ERR FLUSHDB is disabled") {
			t.Fatalf("FLUSHDB: %v", err)
		}
		mustEqual(t, "GET keep", rdb.Get(ctx, "keep").Val(), "1")
	})

	t.Run("pipeline", func(t *testing.T) {
		cmds, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := 0; i < 1000; i++ {
				p.Incr(ctx, "pipe")
			}
			p.Get(ctx, "pipe")
			p.HIncrBy(ctx, "pipe", "f", 1) // WRONGTYPE in the middle of a pipeline
			p.Incr(ctx, "pipe")
			return nil
		})
		if err == nil {
			t.Fatal("pipeline with a WRONGTYPE returned no error")
		}
		for i := 0; i < 1000; i++ {
			mustEqual(t, "pipelined INCR", cmds[i].(*redis.IntCmd).Val(), int64(i+1))
		}
		mustEqual(t, "pipelined GET", cmds[1000].(*redis.StringCmd).Val(), "1000")
		mustErr(t, "pipelined HINCRBY", cmds[1001].Err(), "WRONGTYPE Operation against a key holding the wrong kind of value")
		mustEqual(t, "pipelined INCR after error", cmds[1002].(*redis.IntCmd).Val(), int64(1001))
	})

	t.Run("transactions", func(t *testing.T) {
		// All writes: one atomic engine batch.
		cmds, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Incr(ctx, "tx:a")
			p.IncrBy(ctx, "tx:a", 10)
			p.Set(ctx, "tx:b", 5, time.Minute)
			p.HIncrBy(ctx, "tx:h", "f", 2)
			p.PFAdd(ctx, "tx:p", "x")
			p.Del(ctx, "tx:nothing")
			p.Expire(ctx, "tx:a", time.Hour)
			return nil
		})
		mustOK(t, "MULTI/EXEC", err)
		mustEqual(t, "tx INCR", cmds[0].(*redis.IntCmd).Val(), int64(1))
		mustEqual(t, "tx INCRBY", cmds[1].(*redis.IntCmd).Val(), int64(11))
		mustEqual(t, "tx SET", cmds[2].(*redis.StatusCmd).Val(), "OK")
		mustEqual(t, "tx HINCRBY", cmds[3].(*redis.IntCmd).Val(), int64(2))
		mustEqual(t, "tx PFADD", cmds[4].(*redis.IntCmd).Val(), int64(1))
		mustEqual(t, "tx DEL", cmds[5].(*redis.IntCmd).Val(), int64(0))
		mustEqual(t, "tx EXPIRE", cmds[6].(*redis.BoolCmd).Val(), true)
		mustEqual(t, "TTL after tx", rdb.TTL(ctx, "tx:a").Val(), time.Hour)
		// Reads and writes mixed: run in order.
		cmds, err = rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Incr(ctx, "tx:a")
			p.Get(ctx, "tx:a")
			p.HGetAll(ctx, "tx:h")
			return nil
		})
		mustOK(t, "MULTI/EXEC mixed", err)
		mustEqual(t, "tx GET", cmds[1].(*redis.StringCmd).Val(), "12")
		mustEqual(t, "tx HGETALL", fmt.Sprint(cmds[2].(*redis.MapStringStringCmd).Val()), "map[f:2]")
		// An error inside: the rest still applies (Redis semantics).
		cmds, err = rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Incr(ctx, "tx:a")
			p.HIncrBy(ctx, "tx:a", "f", 1)
			p.Incr(ctx, "tx:a")
			return nil
		})
		if err == nil {
			t.Fatal("EXEC with a WRONGTYPE inside returned no error")
		}
		mustEqual(t, "tx INCR 1", cmds[0].(*redis.IntCmd).Val(), int64(13))
		mustErr(t, "tx WRONGTYPE", cmds[1].Err(), "WRONGTYPE Operation against a key holding the wrong kind of value")
		mustEqual(t, "tx INCR 2", cmds[2].(*redis.IntCmd).Val(), int64(14))
		// Discard and nesting, on one connection.
		conn := rdb.Conn()
		defer conn.Close()
		mustOK(t, "MULTI", conn.Do(ctx, "MULTI").Err())
		mustEqual(t, "queued", conn.Do(ctx, "INCR", "tx:d").Val(), any("QUEUED"))
		mustErr(t, "nested MULTI", conn.Do(ctx, "MULTI").Err(), "ERR MULTI calls can not be nested")
		mustErr(t, "WATCH in MULTI", conn.Do(ctx, "WATCH", "x").Err(), "ERR WATCH inside MULTI is not allowed")
		mustOK(t, "DISCARD", conn.Do(ctx, "DISCARD").Err())
		mustEqual(t, "discarded INCR", conn.Exists(ctx, "tx:d").Val(), 0)
		mustErr(t, "EXEC without MULTI", conn.Do(ctx, "EXEC").Err(), "ERR EXEC without MULTI")
		mustErr(t, "DISCARD without MULTI", conn.Do(ctx, "DISCARD").Err(), "ERR DISCARD without MULTI")
		// A queuing error aborts the transaction.
		mustOK(t, "MULTI", conn.Do(ctx, "MULTI").Err())
		conn.Do(ctx, "INCR", "tx:d")
		mustErr(t, "bad arity in MULTI", conn.Do(ctx, "INCR").Err(), "ERR wrong number of arguments for 'incr' command")
		mustErr(t, "unknown in MULTI", conn.Do(ctx, "NOPE").Err(), "ERR unknown command 'NOPE', with args beginning with: ")
		mustErr(t, "EXECABORT", conn.Do(ctx, "EXEC").Err(), "EXECABORT Transaction discarded because of previous errors.")
		mustEqual(t, "aborted INCR", conn.Exists(ctx, "tx:d").Val(), 0)
		mustOK(t, "MULTI", conn.Do(ctx, "MULTI").Err())
		v, err := conn.Do(ctx, "EXEC").Slice()
		mustOK(t, "empty EXEC", err)
		mustEqual(t, "empty EXEC", len(v), 0)
	})

	t.Run("watch", func(t *testing.T) {
		rdb.Set(ctx, "w", 1, 0)
		// Untouched: EXEC applies.
		err := rdb.Watch(ctx, func(tx *redis.Tx) error {
			n, err := tx.Get(ctx, "w").Int64()
			if err != nil {
				return err
			}
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, "w", n*10, 0)
				return nil
			})
			return err
		}, "w")
		mustOK(t, "WATCH tx", err)
		mustEqual(t, "after WATCH tx", rdb.Get(ctx, "w").Val(), "10")
		// Touched by another client in between: EXEC aborts.
		err = rdb.Watch(ctx, func(tx *redis.Tx) error {
			rdb.Incr(ctx, "w") // another connection
			_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, "w", 0, 0)
				return nil
			})
			return err
		}, "w")
		if !errors.Is(err, redis.TxFailedErr) {
			t.Fatalf("WATCH after a concurrent write: %v, want TxFailedErr", err)
		}
		mustEqual(t, "after aborted tx", rdb.Get(ctx, "w").Val(), "11")
		// A watched key that does not exist and gets created.
		err = rdb.Watch(ctx, func(tx *redis.Tx) error {
			rdb.Incr(ctx, "w-new")
			_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Incr(ctx, "w-new")
				return nil
			})
			return err
		}, "w-new")
		if !errors.Is(err, redis.TxFailedErr) {
			t.Fatalf("WATCH of a created key: %v, want TxFailedErr", err)
		}
		mustOK(t, "UNWATCH", rdb.Do(ctx, "UNWATCH").Err())
	})

	t.Run("concurrent", func(t *testing.T) {
		var wg sync.WaitGroup
		for g := 0; g < 20; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 200; i++ {
					if err := rdb.Incr(ctx, "conc").Err(); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		mustEqual(t, "concurrent INCR", rdb.Get(ctx, "conc").Val(), "4000")
	})
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func TestFlushAllowed(t *testing.T) {
	ts := start(t, resp.Options{AllowFlush: true})
	rdb := newGoRedis(t, ts.addr, 3)
	ctx := context.Background()
	rdb.Incr(ctx, "a")
	rdb.HIncrBy(ctx, "b", "f", 1)
	mustOK(t, "FLUSHALL", rdb.FlushAll(ctx).Err())
	mustEqual(t, "DBSIZE", rdb.DBSize(ctx).Val(), 0)
	rdb.Incr(ctx, "a")
	mustOK(t, "FLUSHDB ASYNC", rdb.FlushDBAsync(ctx).Err())
	mustEqual(t, "EXISTS", rdb.Exists(ctx, "a").Val(), 0)
}
