package ratelimitapi

import (
	"strings"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/ratelimit"
)

// TestRESPErrorOfCheckArgs: the error replies of RL.CHECK (the error half
// of internal/ratelimit's TestCheckArgs, whose RESPError moved here).
func TestRESPErrorOfCheckArgs(t *testing.T) {
	clk := newFakeClock()
	clk.Set(t0.Add(250 * time.Millisecond))
	l := newLimiter(t, clk.Now, ratelimit.Policy{Name: "p", Match: "pol:*", Algorithm: ratelimit.FixedWindow, Limit: 1, Period: time.Second})
	for _, c := range []struct{ args, reply string }{
		{"", "ERR wrong number of arguments for 'rl.check' command"},
		{"k 1", "ERR wrong number of arguments for 'rl.check' command"},
		{"k 1 2 3 4 5 6", "ERR wrong number of arguments for 'rl.check' command"},
		{"k x 1000", "ERR limit is not an integer or out of range"},
		{"k 1 0", "ERR period_ms is not a positive integer in range"},
		{"k 1 1000 1.5", "ERR cost is not an integer or out of range"},
		{"k 1 1000 1 magic", "ERR unknown algorithm magic"},
		{"k 1 1000 1 token_bucket x", "ERR burst is not an integer or out of range"},
		{"k 1 1000 2", "ERR invalid cost: cost 2 out of range 0..1 for sliding_window-1-1s"},
		{"k 0 1000", "ERR invalid limit: limit 0 out of range 1..1099511627776"},
		{"nomatch", `ERR no policy matches the key: key "nomatch"`},
	} {
		_, err := l.CheckArgs(args(c.args))
		if err == nil || RESPError(err) != c.reply {
			t.Errorf("RL.CHECK %s: %v (%q), want %q", c.args, err, RESPError(err), c.reply)
		}
	}
}

func FuzzCheckArgs(f *testing.F) {
	for _, s := range []string{"k", "k 10 1000", "k 10 1000 2 token_bucket 20", "k -1 1 1", "k 1 9223372036854775807 0 leaky_bucket", "pol:x"} {
		f.Add(s)
	}
	l := newLimiter(f, newFakeClock().Now, ratelimit.Policy{Name: "p", Match: "pol:*", Algorithm: ratelimit.SlidingLog, Limit: 3, Period: time.Second})
	f.Fuzz(func(t *testing.T, s string) {
		reply, err := l.CheckArgs(args(s))
		if err != nil {
			if r := RESPError(err); !strings.HasPrefix(r, "ERR ") || strings.ContainsAny(r, "\r\n") && !strings.ContainsAny(s, "\r\n") {
				t.Fatalf("RESPError %q", r)
			}
			return
		}
		if reply[0] != 0 && reply[0] != 1 || reply[1] < 0 || reply[2] < 0 || reply[3] < 0 || (reply[0] == 1) != (reply[3] == 0) {
			t.Fatalf("RL.CHECK %s = %v", s, reply)
		}
	})
}
