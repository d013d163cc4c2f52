package resp

import (
	"net"
	"strings"
	"testing"

	"github.com/counterd/counterd/internal/engine"
)

// TestCommandsDoNotAllocate runs whole commands as a connection does
// (parse, dispatch, engine, reply) and counts allocations per command: the
// benchmarked commands must not allocate once their counter exists.
func TestCommandsDoNotAllocate(t *testing.T) {
	cfg := engine.DefaultConfig()
	cfg.InMemory = true
	cfg.NodeID = "test"
	// AllocsPerRun counts every allocation of the process: no background
	// flush, which is not part of a command, may land in its window.
	cfg.FlushInterval = 1 << 62
	eng, err := engine.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	s := New(engine.Local(eng), Options{})
	defer s.Close()
	enc := func(args ...string) string {
		var b strings.Builder
		b.WriteString("*" + itoa(len(args)) + "\r\n")
		for _, a := range args {
			b.WriteString("$" + itoa(len(a)) + "\r\n" + a + "\r\n")
		}
		return b.String()
	}
	for _, tc := range []struct {
		name   string
		cmd    string
		allocs float64
	}{
		{"INCR", enc("INCR", "counter:1"), 0},
		{"INCRBY", enc("INCRBY", "counter:1", "5"), 0},
		{"GET", enc("GET", "counter:1"), 0},
		// One: the engine's result slice of the field values
		// (contract.Result.Fields), which the caller owns.
		{"HINCRBY", enc("HINCRBY", "bench:h", "f:1", "1"), 1},
		{"PFADD", enc("PFADD", "bench:hll", "42"), 0},
	} {
		const batch = 1024 // a background allocation of the process (race detector, runtime) counts below 0.01 per command
		in := []byte(strings.Repeat(tc.cmd, batch))
		a, b := net.Pipe()
		c := newClient(s, a)
		a.Close()
		b.Close()
		c.out = make([]byte, 0, 64<<10)
		run := func() {
			c.in, c.r, c.w = in, 0, len(in)
			c.out = c.out[:0]
			if st := s.runBuffered(c); st != stepRead || c.r != len(in) {
				t.Fatalf("%s: runBuffered stopped at %d of %d (step %d): %q", tc.name, c.r, len(in), st, c.out)
			}
			c.endBatch()
			if c.out[0] == '-' {
				t.Fatalf("%s: error reply %q", tc.name, c.out)
			}
		}
		run() // create the counters
		if n := testing.AllocsPerRun(20, run) / batch; n > tc.allocs+0.01 {
			t.Errorf("%s allocates %.2f times per command, want at most %v", tc.name, n, tc.allocs)
		}
	}
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
