package resp

import (
	"bytes"
	"strconv"
	"testing"

	lua "github.com/yuin/gopher-lua"
	"pgregory.net/rapid"
)

// BenchmarkScriptVM measures what the Lua VM adds to the limiter: the
// script by EVALSHA against the same INCR and EXPIRE NX as one pipelined
// read, both in-process as hotpath_test.go runs commands (no system
// calls), with counterd's options.
func BenchmarkScriptVM(b *testing.B) {
	const body = `local c = redis.call('INCR', KEYS[1]) if c == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end return c`
	cases := []struct{ name, cmd string }{
		{"evalsha-limiter", encodeCmd("EVALSHA", sha1hex(body), "1", "rl:bench", "3600")},
		{"incr+expire-pipelined", encodeCmd("INCR", "rl:bench") + encodeCmd("EXPIRE", "rl:bench", "3600", "NX")},
		{"incr", encodeCmd("INCR", "rl:bench")},
		{"eval-return-1", encodeCmd("EVAL", "return 1", "0")},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			s, done := hotPathServer(b, true)
			defer done()
			c := hotPathClient(s)
			runOne(b, s, c, []byte(encodeCmd("SCRIPT", "LOAD", body)))
			cmd := []byte(tc.cmd)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				runOne(b, s, c, cmd)
			}
		})
	}
}

// TestRespToLuaRoundTrip: respToLua reads back every RESP2 reply the
// reply writers produce (the replies of a script's commands), and
// writeLuaReply writes the value it read as the same bytes.
func TestRespToLuaRoundTrip(t *testing.T) {
	L := lua.NewState()
	defer L.Close()
	rapid.Check(t, func(t *rapid.T) {
		c := &client{proto: 2}
		writeRandomReply(t, c, 0)
		in := append([]byte(nil), c.out...)
		v, n, isErr := respToLua(L, in)
		if n != len(in) {
			t.Fatalf("consumed %d of %d bytes of %q", n, len(in), in)
		}
		if isErr != (in[0] == '-') {
			t.Fatalf("isErr %v for %q", isErr, in)
		}
		out := &client{proto: 2}
		writeLuaReply(out, v, 0)
		if !bytes.Equal(out.out, in) {
			t.Fatalf("round trip of %q gave %q", in, out.out)
		}
	})
}

func writeRandomReply(t *rapid.T, c *client, depth int) {
	kinds := 5
	if depth < 3 {
		kinds = 6
	}
	switch rapid.IntRange(0, kinds-1).Draw(t, "kind") {
	case 0:
		// Lua numbers are doubles (as in Redis): integers beyond 2^53 do
		// not survive a script, on Redis either.
		c.writeInt(rapid.Int64Range(-1<<53, 1<<53).Draw(t, "int"))
	case 1:
		c.writeBulkString(rapid.String().Draw(t, "bulk"))
	case 2:
		c.writeNull()
	case 3:
		c.writeStatus("S" + strconv.Itoa(rapid.IntRange(0, 1000).Draw(t, "status")))
	case 4:
		c.writeError("ERR e" + strconv.Itoa(rapid.IntRange(0, 1000).Draw(t, "err")))
	case 5:
		n := rapid.IntRange(0, 4).Draw(t, "len")
		c.writeArray(n)
		for i := 0; i < n; i++ {
			// A null element is false in Lua and null again in the reply.
			if rapid.Bool().Draw(t, "nullElem") {
				c.writeNull()
				continue
			}
			c.writeInt(rapid.Int64Range(-1<<53, 1<<53).Draw(t, "elem"))
		}
	}
}

// TestRand48 follows Redis's redisLrand48: seeded 0, math.random(100)
// draws 18 then 75 on redis-server 7.0 (TestScriptCompat compares more).
func TestRand48(t *testing.T) {
	var r rand48
	r.seed(0)
	got := []int64{}
	for i := 0; i < 2; i++ {
		f := float64(r.next()%rand48Max) / float64(rand48Max)
		got = append(got, int64(f*100)+1)
	}
	if got[0] != 18 || got[1] != 75 {
		t.Fatalf("math.random(100) after seed 0 = %v, want [18 75] as redis-server 7.0", got)
	}
}
