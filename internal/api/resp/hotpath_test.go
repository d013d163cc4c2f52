package resp

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/shed"
)

// The hot paths of the redis-benchmark tests of scripts/bench-resp.sh,
// run in-process: a read buffer of commands goes through runBuffered
// (parse, dispatch, engine, reply) as on a connection, without the
// system calls. Options are those counterd's server sets (metrics and the
// overload limiter on), so the figures are the per-command CPU a real
// connection pays on top of its read and write.

// hotPathCase is one benchmarked command stream: cmds are cycled through.
type hotPathCase struct {
	name string
	cmds []string
	pre  []string // run once first (the GET test reads counters INCR created)
}

const hotPathKeys = 100000 // redis-benchmark -r 100000

func hotPathCases() []hotPathCase {
	rnd := func(f func(i int) string) []string {
		// A fixed permutation of the keys, so consecutive commands touch
		// unrelated counters like redis-benchmark's random keys.
		out := make([]string, hotPathKeys)
		for i := range out {
			out[i] = f(int(uint64(i) * 2654435761 % hotPathKeys))
		}
		return out
	}
	return []hotPathCase{
		{"INCR", []string{encodeCmd("INCR", "counter:__rand_int__")}, nil},
		{"INCRRandomKeys", rnd(func(i int) string { return encodeCmd("INCR", fmt.Sprintf("counter:%012d", i)) }), nil},
		{"GETRandomKeys", rnd(func(i int) string { return encodeCmd("GET", fmt.Sprintf("counter:%012d", i)) }),
			rnd(func(i int) string { return encodeCmd("INCR", fmt.Sprintf("counter:%012d", i)) })},
		{"HINCRBY", rnd(func(i int) string { return encodeCmd("HINCRBY", "bench:h", fmt.Sprintf("f:%012d", i%1000), "1") }), nil},
		{"PFADD", rnd(func(i int) string { return encodeCmd("PFADD", "bench:hll", fmt.Sprintf("%012d", i)) }), nil},
	}
}

func encodeCmd(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

// hotPathServer is a server as counterd configures it, on an in-memory
// engine. Without flush, the engine never flushes on its own (the
// allocation test counts every allocation of the process, and the
// once-a-second flush is not part of a command).
func hotPathServer(tb testing.TB, flush bool) (*Server, func()) {
	cfg := engine.DefaultConfig()
	cfg.InMemory = true
	cfg.NodeID = "test"
	if !flush {
		cfg.FlushInterval = 1 << 62
	}
	eng, err := engine.Open(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	s := New(engine.Local(eng), Options{
		Registerer: prometheus.NewRegistry(),
		Admission:  shed.NewFair(shed.FairConfig{}),
	})
	return s, func() { s.Close(); eng.Close() }
}

// hotPathClient is a client whose input is set directly.
func hotPathClient(s *Server) *client {
	a, b := net.Pipe()
	a.Close()
	b.Close()
	c := newClient(s, a)
	c.out = make([]byte, 0, 64<<10)
	return c
}

// runOne runs cmd through c as one read (an unpipelined request) and
// returns the reply.
func runOne(tb testing.TB, s *Server, c *client, cmd []byte) []byte {
	c.in, c.r, c.w = cmd, 0, len(cmd)
	c.out = c.out[:0]
	if st := s.runBuffered(c); st != stepRead || c.r != len(cmd) {
		tb.Fatalf("runBuffered stopped at %d of %d (step %d): %q", c.r, len(cmd), st, c.out)
	}
	c.endBatch()
	if len(c.out) == 0 || c.out[0] == '-' {
		tb.Fatalf("reply %q to %q", c.out, cmd)
	}
	return c.out
}

// BenchmarkHotPath: one command per runBuffered, as an unpipelined
// connection runs them.
func BenchmarkHotPath(b *testing.B) {
	for _, tc := range hotPathCases() {
		b.Run(tc.name, func(b *testing.B) {
			s, done := hotPathServer(b, true)
			defer done()
			c := hotPathClient(s)
			cmds := make([][]byte, len(tc.cmds))
			for i, cm := range tc.cmds {
				cmds[i] = []byte(cm)
			}
			for _, cm := range tc.pre {
				runOne(b, s, c, []byte(cm))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				runOne(b, s, c, cmds[i%len(cmds)])
			}
		})
	}
}

// TestUnpipelinedCommandsDoNotAllocate: the benchmarked commands allocate nothing
// per command once their counters exist, with counterd's options (metrics
// and the overload limiter on), one command per batch as redis-benchmark
// -P 1 sends them.
func TestUnpipelinedCommandsDoNotAllocate(t *testing.T) {
	for _, tc := range hotPathCases() {
		s, done := hotPathServer(t, false)
		c := hotPathClient(s)
		n := min(len(tc.cmds), 2000)
		cmds := make([][]byte, n)
		for _, cm := range tc.pre {
			runOne(t, s, c, []byte(cm))
		}
		for i := range cmds {
			cmds[i] = []byte(tc.cmds[i])
			runOne(t, s, c, cmds[i]) // create the counters
		}
		i := 0
		allocs := testing.AllocsPerRun(n, func() {
			runOne(t, s, c, cmds[i%n])
			i++
		})
		// HINCRBY: the engine's result slice of field values
		// (contract.Result.Fields), which the caller owns.
		want := 0.0
		if tc.name == "HINCRBY" {
			want = 1
		}
		if allocs > want {
			t.Errorf("%s allocates %.2f times per command, want at most %v", tc.name, allocs, want)
		}
		done()
	}
}
