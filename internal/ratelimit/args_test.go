package ratelimit

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func args(s string) [][]byte {
	var a [][]byte
	for _, f := range strings.Fields(s) {
		a = append(a, []byte(f))
	}
	return a
}

func TestCheckArgs(t *testing.T) {
	clk := newFakeClock()
	clk.Set(t0.Add(250 * time.Millisecond))
	l := newLimiter(t, clk.Now, Policy{Name: "p", Match: "pol:*", Algorithm: FixedWindow, Limit: 1, Period: time.Second})
	for _, c := range []struct {
		args string
		want [4]int64
	}{
		{"k 2 1000", [4]int64{1, 1, 1750, 0}}, // sliding window: both windows must pass
		{"k 2 1000", [4]int64{1, 0, 1750, 0}},
		{"k 2 1000", [4]int64{0, 0, 1750, 1250}}, // the previous window must weigh <= 1
		{"f 3 1000 2 FIXED_WINDOW", [4]int64{1, 1, 750, 0}},
		{"f 3 1000 2 fixed_window", [4]int64{0, 1, 750, 750}},
		{"f 3 1000 0 fixed_window", [4]int64{1, 1, 750, 0}},
		{"t 10 1000 1 gcra 5", [4]int64{1, 4, 100, 0}},
		{"pol:x", [4]int64{1, 0, 750, 0}},
		{"pol:x", [4]int64{0, 0, 750, 750}},
	} {
		got, err := l.CheckArgs(args(c.args))
		if err != nil || got != c.want {
			t.Errorf("RL.CHECK %s = %v, %v; want %v", c.args, got, err, c.want)
		}
	}
	if _, err := l.CheckArgs(args("k 1 1000 1 x")); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("errors wrap the sentinels: %v", err)
	}
}

func TestParseInt(t *testing.T) {
	for s, want := range map[string]int64{"0": 0, "-1": -1, "9223372036854775807": 1<<63 - 1, "-9223372036854775808": -1 << 63} {
		if got, ok := parseInt([]byte(s)); !ok || got != want {
			t.Errorf("parseInt(%q) = %d, %v", s, got, ok)
		}
	}
	for _, s := range []string{"", "-", "+1", "1a", " 1", "9223372036854775808", "-9223372036854775809", "99999999999999999999"} {
		if _, ok := parseInt([]byte(s)); ok {
			t.Errorf("parseInt(%q) accepted", s)
		}
	}
}
