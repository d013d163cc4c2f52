package resp_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/counterd/counterd/internal/api/resp"
	"github.com/counterd/counterd/internal/testutil/redistest"
)

// The compat tests send the same command sequences to counterd and to a
// real redis-server, through go-redis, rueidis and redis-cli, and require
// every reply to be the same. They cover the counter-family commands
// (issue 17); where counterd differs from Redis on purpose (docs/resp.md:
// values are integers, TTLs are bounded) the sequences stay inside what
// both accept.

// compatSeqs returns the sequences; at and atMs are a fixed future time so
// that EXPIRETIME replies do not depend on when a command ran.
func compatSeqs(at time.Time) map[string][][]string {
	s := strconv.FormatInt(at.Unix(), 10)
	ms := strconv.FormatInt(at.UnixMilli()+123, 10)
	far := strconv.FormatInt(at.Add(time.Hour).Unix(), 10)
	farMs := strconv.FormatInt(at.Add(time.Hour).UnixMilli(), 10)
	return map[string][][]string{
		"idioms": {
			// EXPIREAT / PEXPIREAT: replies, options, the past deletes
			{"EXPIREAT", "k", s}, {"SET", "k", "1"}, {"EXPIREAT", "k", s}, {"EXPIRETIME", "k"},
			{"EXPIREAT", "k", far, "NX"}, {"EXPIREAT", "k", far, "XX"}, {"EXPIRETIME", "k"},
			{"EXPIREAT", "k", s, "GT"}, {"EXPIREAT", "k", s, "LT"}, {"EXPIRETIME", "k"},
			{"PEXPIREAT", "k", farMs, "GT"}, {"PEXPIRETIME", "k"}, {"PEXPIREAT", "k", ms}, {"PEXPIRETIME", "k"},
			{"PERSIST", "k"}, {"EXPIREAT", "k", far, "XX"}, {"EXPIREAT", "k", far, "LT"}, {"EXPIRETIME", "k"},
			{"EXPIREAT", "k", "x"}, {"EXPIREAT", "k", s, "NX", "XX"}, {"EXPIREAT", "k", s, "GT", "LT"}, {"EXPIREAT", "k", s, "FOO"},
			{"EXPIREAT", "k"}, {"EXPIREAT", "k", "9223372036854775807"}, {"PEXPIREAT", "k", "x"},
			{"EXPIREAT", "k", "1"}, {"EXISTS", "k"}, {"SET", "k", "1"}, {"PEXPIREAT", "k", "0"}, {"EXISTS", "k"},
			{"EXPIREAT", "nope", far}, {"PEXPIREAT", "nope", farMs},
			// GETSET, SET ... GET, GETDEL
			{"GETSET", "g", "1"}, {"GETSET", "g", "2"}, {"GET", "g"}, {"GETSET", "g"},
			{"SET", "g", "5", "GET"}, {"SET", "g", "6", "NX", "GET"}, {"SET", "g", "7", "XX", "GET"}, {"GET", "g"},
			{"SET", "n", "1", "XX", "GET"}, {"EXISTS", "n"}, {"SET", "n", "1", "NX", "GET"}, {"GET", "n"},
			{"SET", "g", "8", "GET", "EX", "100"}, {"TTL", "g"}, {"SET", "g", "9", "KEEPTTL", "GET"}, {"TTL", "g"},
			{"SET", "g", "1", "GET", "GET"}, {"SET", "g", "1", "GET", "FOO"},
			{"HSET", "h", "a", "1"}, {"GETSET", "h", "1"}, {"SET", "h", "1", "GET"}, {"GETDEL", "h"},
			{"GETDEL", "g"}, {"GETDEL", "g"}, {"EXISTS", "g"}, {"GETDEL"}, {"GETDEL", "a", "b"},
			{"INCRBYFLOAT", "fl", "1.5"}, {"GETSET", "fl", "2"}, {"STRLEN", "fl"}, {"INCRBYFLOAT", "fl", "0.25"}, {"GETDEL", "fl"},
			// MSETNX
			{"MSETNX", "m1", "1", "m2", "2"}, {"MGET", "m1", "m2"}, {"MSETNX", "m2", "3", "m3", "3"}, {"EXISTS", "m3"},
			{"MSETNX", "m1"}, {"MSETNX", "m4", "1", "m5"},
			// HMSET, HSTRLEN, STRLEN, TOUCH
			{"HMSET", "hm", "a", "1", "b", "-22"}, {"HGETALL", "hm"}, {"HMSET", "hm", "a"}, {"HMSET", "hm", "a", "1", "b"},
			{"HSTRLEN", "hm", "b"}, {"HSTRLEN", "hm", "zz"}, {"HSTRLEN", "nope", "a"}, {"HSTRLEN", "m1", "a"},
			{"HINCRBYFLOAT", "hm", "c", "0.5"}, {"HSTRLEN", "hm", "c"},
			{"STRLEN", "m1"}, {"SET", "big", "-9223372036854775808"}, {"STRLEN", "big"}, {"STRLEN", "nope"}, {"STRLEN", "hm"},
			{"TOUCH", "m1", "m2", "nope", "m1"}, {"TOUCH"},
			// COMMAND GETKEYS
			{"COMMAND", "GETKEYS", "get", "a"}, {"COMMAND", "GETKEYS", "mset", "a", "1", "b", "2"},
			{"COMMAND", "GETKEYS", "msetnx", "a", "1", "b", "2"}, {"COMMAND", "GETKEYS", "touch", "a", "b"},
			{"COMMAND", "GETKEYS", "hmset", "h", "a", "1"}, {"COMMAND", "GETKEYS", "eval", "return 1", "2", "a", "b", "c"},
			{"COMMAND", "GETKEYS", "eval", "return 1", "0"}, {"COMMAND", "GETKEYS", "eval", "x", "5", "a"},
			{"COMMAND", "GETKEYS", "nope", "x"}, {"COMMAND", "GETKEYS", "ping", "x"}, {"COMMAND", "GETKEYS", "get", "a", "b"},
			{"COMMAND", "GETKEYS"}, {"COMMAND", "GETKEYS", "get"},
		},
		"keyspace": {
			// RANDOMKEY: nil when empty, the one key when there is one
			{"RANDOMKEY"}, {"SET", "only", "1"}, {"RANDOMKEY"}, {"RANDOMKEY", "x"}, {"DEL", "only"},
			// RENAME, RENAMENX: values and expiries move
			{"RENAME", "nope", "x"}, {"RENAMENX", "nope", "x"}, {"SET", "a", "5"}, {"EXPIREAT", "a", far},
			{"RENAME", "a", "b"}, {"EXISTS", "a"}, {"GET", "b"}, {"EXPIRETIME", "b"}, {"RENAME", "b", "b"}, {"RENAMENX", "b", "b"},
			{"SET", "c", "7"}, {"RENAMENX", "b", "c"}, {"RENAMENX", "b", "d"}, {"GET", "d"}, {"EXPIRETIME", "d"},
			{"RENAME", "d", "c"}, {"GET", "c"}, {"EXPIRETIME", "c"}, {"EXISTS", "d"},
			{"INCRBYFLOAT", "f", "1.5"}, {"RENAME", "f", "g"}, {"GET", "g"}, {"INCRBYFLOAT", "g", "0.25"}, {"EXPIRETIME", "g"},
			{"HSET", "h", "a", "1", "b", "2.5"}, {"RENAME", "h", "h2"}, {"HGETALL", "h2"}, {"EXISTS", "h"}, {"HINCRBY", "h2", "a", "1"},
			{"PFADD", "p", "x", "y", "z"}, {"RENAME", "p", "p2"}, {"PFCOUNT", "p2"}, {"EXISTS", "p"}, {"PFADD", "p2", "x"},
			{"RENAME", "a"}, {"RENAMENX"}, {"RENAME", "a", "b", "c"},
			// COPY
			{"COPY", "c", "c"}, {"COPY", "c", "e"}, {"GET", "e"}, {"EXPIRETIME", "e"}, {"COPY", "c", "e"}, {"GET", "c"},
			{"COPY", "g", "e", "REPLACE"}, {"GET", "e"}, {"EXPIRETIME", "e"}, {"COPY", "nope", "e"}, {"COPY", "nope", "e", "REPLACE"}, {"EXISTS", "e"},
			{"COPY", "c", "e", "DB", "0", "REPLACE"}, {"GET", "e"}, {"COPY", "c", "e", "DB", "x"}, {"COPY", "c", "e", "DB"},
			{"COPY", "c", "e", "FOO"}, {"COPY", "c", "e", "REPLACE", "REPLACE"}, {"COPY", "c", "c", "DB", "0"}, {"COPY", "a"},
			{"COPY", "h2", "h3"}, {"HGETALL", "h3"}, {"HGETALL", "h2"}, {"COPY", "p2", "p3"}, {"PFCOUNT", "p3"}, {"PFCOUNT", "p2"},
			{"EXPIREAT", "p2", s}, {"COPY", "p2", "p4"}, {"EXPIRETIME", "p4"},
			// HRANDFIELD on one field (the same picks on both) and on a
			// whole hash (fields in insertion order, which is by name here)
			{"HSET", "one", "f", "7"}, {"HRANDFIELD", "one"}, {"HRANDFIELD", "one", "1"}, {"HRANDFIELD", "one", "5"},
			{"HRANDFIELD", "one", "-3"}, {"HRANDFIELD", "one", "-3", "WITHVALUES"}, {"HRANDFIELD", "one", "2", "WITHVALUES"},
			{"HRANDFIELD", "one", "0"}, {"HRANDFIELD", "one", "0", "WITHVALUES"}, {"HRANDFIELD", "nope"}, {"HRANDFIELD", "nope", "3"},
			{"HRANDFIELD", "nope", "3", "WITHVALUES"}, {"HRANDFIELD", "one", "x"}, {"HRANDFIELD", "one", "1", "foo"},
			{"HRANDFIELD", "one", "1", "WITHVALUES", "x"}, {"HRANDFIELD", "one", "x", "foo"},
			{"HRANDFIELD", "one", "-9223372036854775808"}, {"HRANDFIELD", "one", "-9223372036854775807", "WITHVALUES"},
			{"HRANDFIELD", "one", "9223372036854775807", "WITHVALUES"}, {"HRANDFIELD", "one", "9223372036854775807"},
			{"HRANDFIELD", "c"}, {"HRANDFIELD", "c", "1"}, {"HRANDFIELD"},
			{"HSET", "two", "a", "1", "b", "2.5"}, {"HRANDFIELD", "two", "5", "WITHVALUES"}, {"HRANDFIELD", "two", "2"},
			// HSCAN (a small hash: everything at once, cursor 0, as Redis)
			{"HSET", "hs", "a1", "1", "a2", "2", "b1", "3.5"}, {"HSCAN", "hs", "0"}, {"HSCAN", "hs", "0", "MATCH", "a*"},
			{"HSCAN", "hs", "0", "COUNT", "1"}, {"HSCAN", "hs", "0", "MATCH", "z*", "COUNT", "10"}, {"HSCAN", "hs", "x"},
			{"HSCAN", "hs", "0", "COUNT", "0"}, {"HSCAN", "hs", "0", "COUNT", "x"}, {"HSCAN", "hs", "0", "FOO", "1"},
			{"HSCAN", "hs", "0", "MATCH"}, {"HSCAN", "nope", "0", "FOO"}, {"HSCAN", "nope", "x"}, {"HSCAN", "c", "0"},
			{"HSCAN", "hs"}, {"HSCAN", "hs", "-1"}, {"HSCAN", "hs", "+5"}, {"HSCAN", "hs", "-"}, {"HSCAN", "hs", " 1"}, {"HSCAN", "hs", "18446744073709551615"}, {"HSCAN", "hs", "18446744073709551616"},
			// Redis's texts for strings of the wrong kind
			{"PFADD", "hl", "a"}, {"INCR", "hl"}, {"INCRBY", "hl", "5"}, {"DECR", "hl"}, {"DECRBY", "hl", "x"}, {"INCRBYFLOAT", "hl", "1"},
			{"SET", "n5", "5"}, {"PFADD", "n5", "x"}, {"PFCOUNT", "n5"}, {"PFCOUNT", "hl", "n5"}, {"PFMERGE", "n5", "hl"},
			{"PFMERGE", "hl", "n5"}, {"PFADD", "two", "x"}, {"PFCOUNT", "two"}, {"PFMERGE", "hl", "two"}, {"INCR", "two"},
			{"MULTI"}, {"INCR", "hl"}, {"PFADD", "n5", "x"}, {"SET", "m", "1"}, {"EXEC"}, {"GET", "m"},
			{"EXPIRE", "n5", "4000000000"}, {"TTL", "n5"},
			// COMMAND GETKEYS of the new commands
			{"COMMAND", "GETKEYS", "rename", "a", "b"}, {"COMMAND", "GETKEYS", "copy", "a", "b", "DB", "0", "REPLACE"},
			{"COMMAND", "GETKEYS", "hrandfield", "h", "1"}, {"COMMAND", "GETKEYS", "hscan", "h", "0"},
			{"COMMAND", "GETKEYS", "object", "encoding", "k"}, {"COMMAND", "GETKEYS", "memory", "usage", "k"},
			{"COMMAND", "GETKEYS", "renamenx", "a", "b"}, {"COMMAND", "GETKEYS", "role", "x"},
		},
		"incrbyfloat": {
			{"INCRBYFLOAT", "f", "0.1"}, {"INCRBYFLOAT", "f", "0.2"}, {"GET", "f"},
			{"INCRBYFLOAT", "f", "1e30"}, {"INCRBYFLOAT", "f", "-1e30"}, {"INCRBYFLOAT", "f", "-0"},
			{"INCRBYFLOAT", "f", "0x1p3"}, {"INCRBYFLOAT", "f", "1e-20"}, {"INCRBYFLOAT", "f", "5.0e3"},
			{"INCRBYFLOAT", "f", "+.5"}, {"INCRBYFLOAT", "f", "5."}, {"INCRBYFLOAT", "f", "0.000003814697265625"},
			{"INCRBYFLOAT", "f", "abc"}, {"INCRBYFLOAT", "f", " 1"}, {"INCRBYFLOAT", "f", "1 "},
			{"INCRBYFLOAT", "f", "nan"}, {"INCRBYFLOAT", "f", "inf"}, {"INCRBYFLOAT", "f", "-Infinity"},
			{"INCRBYFLOAT", "f", "1e5000"}, {"INCRBYFLOAT", "f", "1e-5000"}, {"INCRBYFLOAT", "f", ""},
			{"INCRBYFLOAT", "f", "1e"}, {"INCRBYFLOAT", "f", "0x"}, {"INCRBYFLOAT", "f", "1\x00junk"},
			{"GET", "f"}, {"INCRBYFLOAT", "f"}, {"INCRBYFLOAT", "f", "1", "2"},
			{"INCR", "f"}, {"TYPE", "f"}, {"MGET", "f", "nope"},
			{"INCRBYFLOAT", "big", "1e4932"}, {"INCRBYFLOAT", "big", "1e4932"}, {"INCRBYFLOAT", "big", "-1e4932"},
			// counter <-> float, as Redis strings convert
			{"INCR", "c"}, {"INCRBYFLOAT", "c", "1.5"}, {"INCRBYFLOAT", "c", "0.5"}, {"INCR", "c"}, {"GET", "c"},
			{"INCRBYFLOAT", "c", "0.25"}, {"INCRBY", "c", "1"}, {"DECR", "c"}, {"SET", "c", "7"}, {"INCRBYFLOAT", "c", "-7"},
			{"SET", "m", "9223372036854775807"}, {"INCRBYFLOAT", "m", "1"}, {"INCR", "m"},
			// wrong kind before a bad increment
			{"HINCRBY", "h", "x", "1"}, {"INCRBYFLOAT", "h", "abc"}, {"INCRBYFLOAT", "h", "1"},
			{"EXPIRE", "f", "100"}, {"INCRBYFLOAT", "f", "1"}, {"TTL", "f"}, {"GETEX", "f", "PERSIST"}, {"TTL", "f"},
		},
		"hincrbyfloat": {
			{"HINCRBYFLOAT", "h", "a", "0.1"}, {"HINCRBYFLOAT", "h", "a", "0.2"}, {"HGET", "h", "a"},
			{"HINCRBYFLOAT", "h", "b", "1.5"}, {"HINCRBYFLOAT", "h", "b", "0.5"}, {"HINCRBY", "h", "b", "1"}, {"HGET", "h", "b"},
			{"HINCRBY", "h", "a", "1"}, {"HINCRBY", "h", "a", "abc"}, {"HINCRBY", "h", "a", "0"},
			{"HINCRBYFLOAT", "h", "c", "1e30"}, {"HINCRBY", "h", "c", "1"}, {"HINCRBYFLOAT", "h", "c", "-1e30"}, {"HGET", "h", "c"},
			{"HINCRBYFLOAT", "h", "d", "9223372036854775807"}, {"HINCRBY", "h", "d", "1"}, {"HINCRBYFLOAT", "h", "d", "1"}, {"HINCRBY", "h", "d", "1"},
			{"HINCRBYFLOAT", "h", "e", "-0"}, {"HGET", "h", "e"}, {"HINCRBY", "h", "e", "5"},
			{"HINCRBYFLOAT", "h", "a", "abc"}, {"HINCRBYFLOAT", "h", "a", ""}, {"HINCRBYFLOAT", "h", "a", " 1"},
			{"HINCRBYFLOAT", "h", "a", "nan"}, {"HINCRBYFLOAT", "h", "a", "inf"}, {"HINCRBYFLOAT", "h", "a", "-Infinity"},
			{"HINCRBYFLOAT", "h", "a", "1e5000"}, {"HINCRBYFLOAT", "h", "a", "0x1p3"}, {"HINCRBYFLOAT", "h", "a", "5."},
			{"HINCRBYFLOAT", "big", "f", "1e4932"}, {"HINCRBYFLOAT", "big", "f", "1e4932"}, {"HINCRBYFLOAT", "big", "f", "-1e4932"}, {"HGET", "big", "f"},
			{"HMGET", "h", "a", "b", "c", "zz", "e"}, {"HLEN", "h"}, {"HEXISTS", "h", "a"}, {"HEXISTS", "h", "c"}, {"HEXISTS", "h", "zz"},
			{"HGETALL", "h"}, {"HVALS", "h"}, {"HKEYS", "h"},
			{"HSET", "h", "g", "2.5"}, {"HSET", "h", "g", "0.1"}, {"HINCRBYFLOAT", "h", "g", "0.2"}, {"HSETNX", "h", "g", "7"},
			{"HSETNX", "h", "i", "-7.25"}, {"HINCRBY", "h", "i", "1"}, {"HINCRBYFLOAT", "h", "i", "7.25"}, {"HINCRBY", "h", "i", "1"},
			{"HSET", "h", "j", "3.14159"}, {"HGET", "h", "j"}, {"HSET", "h", "j", "100000000000000000000"}, {"HINCRBY", "h", "j", "1"},
			{"HINCRBYFLOAT", "h", "j", "1"}, {"HDEL", "h", "a", "c"}, {"HLEN", "h"}, {"HGETALL", "h"},
			{"HINCRBYFLOAT", "h"}, {"HINCRBYFLOAT", "h", "a"}, {"HINCRBYFLOAT", "h", "a", "1", "2"},
			// wrong kinds and their order against bad numbers
			{"INCR", "str"}, {"HINCRBYFLOAT", "str", "a", "abc"}, {"HINCRBYFLOAT", "str", "a", "inf"}, {"HINCRBYFLOAT", "str", "a", "1"},
			{"HINCRBY", "str", "a", "abc"}, {"HINCRBY", "str", "a", "1"}, {"HGET", "str", "a"}, {"HGETALL", "str"}, {"HVALS", "str"},
			{"INCR", "h"}, {"INCRBY", "h", "abc"}, {"INCRBY", "h", "1"}, {"DECRBY", "h", "x"}, {"INCRBYFLOAT", "h", "abc"}, {"INCRBYFLOAT", "h", "1"},
			{"GET", "h"}, {"GETEX", "h", "EX", "10"}, {"MGET", "h", "nope"},
			{"INCRBYFLOAT", "fl", "1.5"}, {"HINCRBYFLOAT", "fl", "a", "1"}, {"HSET", "fl", "a", "1.5"}, {"HSET", "fl", "a", "x"}, {"HGET", "fl", "a"},
			{"HINCRBYFLOAT", "nope", "a", "abc"}, {"EXISTS", "nope"}, {"HINCRBYFLOAT", "new", "a", "0"}, {"HGETALL", "new"}, {"TYPE", "new"},
			{"EXPIRE", "h", "100"}, {"HINCRBYFLOAT", "h", "g", "1"}, {"TTL", "h"},
		},
		"setfloat": {
			{"SET", "k", "1.5"}, {"GET", "k"}, {"TYPE", "k"}, {"INCRBYFLOAT", "k", "0.5"}, {"INCR", "k"}, {"GET", "k"},
			{"SET", "k", "0.1"}, {"INCR", "k"}, {"INCRBY", "k", "abc"}, {"DECRBY", "k", "1"}, {"INCRBYFLOAT", "k", "0.2"},
			{"SET", "k", "-7.25", "XX"}, {"SET", "k", "3.5", "NX"}, {"GET", "k"}, {"SETNX", "k", "2.5"}, {"SETNX", "n", "2.5"},
			{"MSET", "a", "1.5", "b", "2", "c", "100000000000000000000"}, {"MGET", "a", "b", "c", "nope"},
			{"INCR", "c"}, {"INCRBYFLOAT", "c", "1"}, {"SET", "a", "3", "KEEPTTL"}, {"INCR", "a"},
			{"SETEX", "e", "100", "2.5"}, {"GET", "e"}, {"TTL", "e"}, {"PSETEX", "e", "100000", "0.001"}, {"GET", "e"}, {"TTL", "e"},
			{"SET", "e", "0.5", "EX", "100"}, {"TTL", "e"}, {"SET", "e", "0.25", "KEEPTTL"}, {"TTL", "e"}, {"SET", "e", "4.5"}, {"TTL", "e"},
			{"SETEX", "e", "0", "2.5"}, {"SETEX", "e", "abc", "2.5"}, {"GETEX", "e", "EX", "50"}, {"TTL", "e"},
			{"HINCRBY", "h", "f", "1"}, {"INCRBYFLOAT", "h", "1.5"}, {"GET", "h"},
			{"SET", "k", "1.5", "EX", "abc"}, {"SET", "k", "2.5", "FOO"}, {"GET", "k"},
		},
		"setex": {
			{"SETEX", "k", "100", "5"}, {"GET", "k"}, {"SETEX", "k", "0", "5"}, {"SETEX", "k", "-1", "5"},
			{"SETEX", "k", "abc", "5"}, {"SETEX", "k", "1.5", "5"}, {"SETEX", "k", "9223372036854775807", "5"},
			{"SETEX", "k", "9223372036854775", "5"}, {"SETEX", "k", "10"}, {"SETEX", "k", "10", "5", "6"},
			{"PSETEX", "p", "100000", "7"}, {"GET", "p"}, {"PSETEX", "p", "0", "7"}, {"PSETEX", "p", "-5", "7"},
			{"PSETEX", "p", "9223372036854775807", "7"}, {"PSETEX", "p", "x", "7"}, {"TTL", "nope"},
			{"SETEX", "k", "100", "9223372036854775807"}, {"INCR", "k"}, {"SETEX", "k", "100", "-3"}, {"DECRBY", "k", "2"},
		},
		"getex": {
			{"GETEX", "nope"}, {"GETEX", "nope", "EX", "0"}, {"GETEX", "nope", "FOO"},
			{"SET", "k", "42"}, {"GETEX", "k"}, {"GETEX", "k", "EX", "100"}, {"GETEX", "k", "PERSIST"}, {"TTL", "k"},
			{"GETEX", "k", "EXAT", s}, {"EXPIRETIME", "k"}, {"PEXPIRETIME", "k"},
			{"GETEX", "k", "PXAT", ms}, {"PEXPIRETIME", "k"}, {"EXPIRETIME", "k"},
			{"GETEX", "k", "EX", "10", "PX", "10"}, {"GETEX", "k", "EX"}, {"GETEX", "k", "EX", "abc"},
			{"GETEX", "k", "EX", "0"}, {"GETEX", "k", "PX", "-5"}, {"GETEX", "k", "EX", "9223372036854775807"},
			{"GETEX", "k", "EXAT", "0"}, {"GETEX", "k", "PERSIST", "EX", "10"}, {"GETEX", "k", "EX", "10", "PERSIST"},
			{"GETEX", "k", "EX", "10", "EX", "20"}, {"GETEX", "k", "persist", "persist"}, {"TTL", "k"},
			{"GETEX", "k", "FOO"}, {"GETEX", "k", "EX", "10", "FOO"},
			{"HINCRBY", "h", "a", "1"}, {"GETEX", "h"}, {"GETEX", "h", "EX", "abc"},
			{"GETEX", "k", "EXAT", "1"}, {"EXISTS", "k"}, {"GET", "k"},
			{"SET", "k", "1"}, {"GETEX", "k", "PXAT", "1"}, {"EXISTS", "k"},
		},
		"hset": {
			{"HSET", "h", "a", "1", "b", "2"}, {"HSET", "h", "a", "5", "c", "3"}, {"HGET", "h", "a"},
			{"HMGET", "h", "a", "b", "zz"}, {"HLEN", "h"}, {"HEXISTS", "h", "a"}, {"HEXISTS", "h", "zz"},
			{"HSETNX", "h", "a", "9"}, {"HSETNX", "h", "d", "4"}, {"HGET", "h", "a"}, {"HGET", "h", "d"},
			{"HSET", "h", "a"}, {"HSET", "h", "a", "1", "b"}, {"HSETNX", "h", "a"},
			{"HSET", "h2", "f", "1", "f", "2"}, {"HGET", "h2", "f"}, {"HLEN", "h2"},
			{"HINCRBY", "h", "a", "10"}, {"HINCRBY", "h", "a", "abc"}, {"HINCRBY", "h", "a", "9223372036854775807"},
			{"HSET", "h", "n", "-9223372036854775808"}, {"HINCRBY", "h", "n", "-1"}, {"HGETALL", "h"},
			{"INCR", "str"}, {"HSET", "str", "a", "1"}, {"HSET", "str", "a", "x"}, {"HSETNX", "str", "a", "1"},
			{"HGET", "str", "a"}, {"HMGET", "str", "a"}, {"HLEN", "str"}, {"HEXISTS", "str", "a"},
			{"HINCRBY", "str", "a", "x"}, {"HINCRBY", "str", "a", "1"}, {"INCRBY", "h", "x"}, {"INCRBY", "h", "1"},
			{"HMGET", "nope", "a"}, {"HLEN", "nope"}, {"HEXISTS", "nope", "a"}, {"HDEL", "h2", "f"}, {"EXISTS", "h2"},
			{"EXPIRE", "h", "100"}, {"HSET", "h", "a", "0"}, {"TTL", "h"}, {"TYPE", "h"},
		},
		"expire": {
			{"SET", "k", "1"}, {"EXPIRE", "k", "100", "NX"}, {"EXPIRE", "k", "200", "NX"}, {"EXPIRE", "k", "50", "GT"},
			{"EXPIRE", "k", "300", "GT"}, {"EXPIRE", "k", "50", "LT"}, {"EXPIRE", "k", "100", "XX"}, {"TTL", "k"},
			{"EXPIRE", "nope", "10"}, {"EXPIRE", "nope", "10", "XX"}, {"EXPIRE", "k", "10", "NX", "XX"},
			{"EXPIRE", "k", "10", "GT", "LT"}, {"EXPIRE", "k", "10", "FOO"}, {"EXPIRE", "k", "abc", "NX", "XX"},
			{"EXPIRE", "k", "abc", "FOO"}, {"EXPIRE", "k", "abc"}, {"EXPIRE", "k", "10", "nx", "nx"},
			{"EXPIRE", "k", "9223372036854775807"}, {"EXPIRE", "k", "9223372036854775"},
			{"EXPIRE", "k", "-9223372036854775808"}, {"EXPIRE", "k", "-9223372036854775"}, {"PEXPIRE", "k", "9223372036854775807"},
			{"EXPIRE", "k", "-1", "GT"}, {"EXISTS", "k"}, {"EXPIRE", "k", "-1", "LT"}, {"EXISTS", "k"},
			{"SET", "k", "1"}, {"EXPIRE", "k", "10", "GT"}, {"EXPIRE", "k", "10", "XX"}, {"EXPIRE", "k", "10", "LT"},
			{"PEXPIRE", "k", "100000", "GT"}, {"PEXPIRE", "k", "1000", "NX"}, {"PERSIST", "k"}, {"PERSIST", "k"},
			{"EXPIRE", "k", "0"}, {"EXISTS", "k"}, {"SET", "k", "1"}, {"PEXPIRE", "k", "-9223372036854775808"}, {"EXISTS", "k"},
			{"EXPIRETIME", "nope"}, {"PEXPIRETIME", "nope"}, {"SET", "k", "2"}, {"EXPIRETIME", "k"}, {"PEXPIRETIME", "k"},
			{"SET", "k", "3", "EXAT", s}, {"EXPIRETIME", "k"}, {"PEXPIRETIME", "k"},
			{"SET", "k", "3", "PXAT", ms}, {"EXPIRETIME", "k"}, {"PEXPIRETIME", "k"},
			{"EXPIRETIME"}, {"EXPIRETIME", "k", "x"}, {"SET", "k", "1", "EX", "-1"}, {"SET", "k", "1", "EX", "9223372036854775807"},
		},
	}
}

// compatServers starts counterd and finds a real Redis; both are empty.
func compatServers(t *testing.T) (counterd string, real *redistest.Server) {
	ts := start(t, resp.Options{AllowFlush: true})
	return ts.addr, redistest.New(t)
}

type doer func(args ...string) string

func runCompat(t *testing.T, name string, counterd, real doer) {
	flush := []string{"FLUSHALL"}
	counterd(flush...)
	real(flush...)
	for _, args := range compatSeqs(time.Now().Add(time.Hour).Truncate(time.Second))[name] {
		got, want := counterd(args...), real(args...)
		if got != want {
			t.Errorf("%s: %q\n  counterd: %s\n  redis:    %s", name, args, got, want)
		}
	}
}

func seqNames() []string {
	return []string{"incrbyfloat", "hincrbyfloat", "setfloat", "setex", "getex", "hset", "expire", "idioms", "keyspace"}
}

func TestCompatGoRedis(t *testing.T) {
	addr, real := compatServers(t)
	for _, proto := range []int{2, 3} {
		c, r := newGoRedis(t, addr, proto), newGoRedis(t, real.Addr, proto)
		do := func(cl *redis.Client) doer {
			return func(args ...string) string {
				a := make([]any, len(args))
				for i := range args {
					a[i] = args[i]
				}
				v, err := cl.Do(context.Background(), a...).Result()
				return fmtReply(v, err)
			}
		}
		for _, name := range seqNames() {
			t.Run(fmt.Sprintf("resp%d/%s", proto, name), func(t *testing.T) { runCompat(t, name, do(c), do(r)) })
		}
	}
}

func TestCompatRueidis(t *testing.T) {
	addr, real := compatServers(t)
	for _, resp2 := range []bool{false, true} {
		c, r := newRueidis(t, addr, resp2), newRueidis(t, real.Addr, resp2)
		do := func(cl rueidis.Client) doer {
			return func(args ...string) string {
				v, err := cl.Do(context.Background(), cl.B().Arbitrary(args...).Build()).ToAny()
				if rueidis.IsRedisNil(err) {
					return "nil"
				}
				return fmtReply(v, err)
			}
		}
		for _, name := range seqNames() {
			t.Run(fmt.Sprintf("resp2=%v/%s", resp2, name), func(t *testing.T) { runCompat(t, name, do(c), do(r)) })
		}
	}
}

// TestCompatRedisCLI feeds each sequence to one redis-cli per server on
// its standard input, an ECHO between commands to split the output.
func TestCompatRedisCLI(t *testing.T) {
	cli := redisCLI(t)
	addr, real := compatServers(t)
	run := func(addr string, lines []string) []string {
		host, port, _ := net.SplitHostPort(addr)
		c := exec.Command(cli, "-h", host, "-p", port)
		c.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli: %v\n%s", err, out)
		}
		return strings.Split(string(out), "--next--\n")
	}
	for _, name := range seqNames() {
		t.Run(name, func(t *testing.T) {
			seq := compatSeqs(time.Now().Add(time.Hour).Truncate(time.Second))[name]
			lines := []string{"FLUSHALL"}
			for _, args := range seq {
				q := make([]string, len(args))
				for i, a := range args {
					q[i] = cliQuote(a)
				}
				lines = append(lines, "ECHO --next--", strings.Join(q, " "))
			}
			got, want := run(addr, lines), run(real.Addr, lines)
			if len(got) != len(want) {
				t.Fatalf("%d replies from counterd, %d from redis", len(got), len(want))
			}
			for i := 1; i < len(got); i++ {
				if got[i] != want[i] {
					t.Errorf("%q\n  counterd: %q\n  redis:    %q", seq[i-1], got[i], want[i])
				}
			}
		})
	}
}

// cliQuote quotes a for redis-cli's argument splitter (sdssplitargs).
func cliQuote(a string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(a); i++ {
		switch c := a[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c >= 0x7f:
			fmt.Fprintf(&b, "\\x%02x", c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// fmtReply writes a client's reply so that equal replies compare equal.
func fmtReply(v any, err error) string {
	if errors.Is(err, redis.Nil) {
		return "nil"
	}
	if err != nil {
		return "error: " + err.Error()
	}
	if a, ok := v.([]any); ok { // EXEC's errors inside an array: by text
		parts := make([]string, len(a))
		for i, x := range a {
			if e, ok := x.(error); ok {
				parts[i] = "error: " + e.Error()
			} else {
				parts[i] = fmtReply(x, nil)
			}
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return fmt.Sprintf("%T %#v", v, v)
}
