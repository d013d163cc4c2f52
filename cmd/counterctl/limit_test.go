package main

import (
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/counterd/counterd/internal/api/ratelimitapi"
	"github.com/counterd/counterd/internal/ratelimit"
)

func TestLimitCommand(t *testing.T) {
	l, err := ratelimit.New(ratelimit.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(ratelimitapi.NewHTTPHandler(l, ratelimitapi.HTTPOptions{}))
	t.Cleanup(func() { srv.Close(); l.Close() })

	// A sliding window's hit weighs on the next window too: its reset is
	// between one and two periods away, and the output says why.
	const why = ` \(sliding window: hits count, less and less, until the end of the 1m0s window after theirs\)`
	wantMatch(t, ok(t, srv.URL, "limit", "user:1", "--limit", "2", "--period", "1m"), `^allowed  1 of 2 left, all 2 available again in (1m\d+s|2m0s)`+why+`\n$`)
	wantMatch(t, ok(t, srv.URL, "limit", "user:1", "--limit", "2", "--period", "1m"), `^allowed  0 of 2 left, all 2 available again in (1m\d+s|2m0s)`+why+`\n$`)
	wantMatch(t, ok(t, srv.URL, "limit", "user:1", "--limit", "2", "--period", "1m"), `^denied  retry after .+ \(0 of 2 left\)\n$`)

	// A fixed window resets within its period: no explanation. Its windows
	// are aligned to the clock, so the reset may be under a second away
	// (shown in milliseconds).
	wantMatch(t, ok(t, srv.URL, "limit", "user:3", "--limit", "2", "--period", "1m", "--algorithm", "fixed_window"), `^allowed  1 of 2 left, all 2 available again in (\d+ms|\d+s|1m0s)\n$`)

	var d struct {
		Allowed   bool  `json:"allowed"`
		Remaining int64 `json:"remaining"`
	}
	out := ok(t, srv.URL, "limit", "user:2", "--limit", "5", "--algorithm", "token_bucket", "--cost", "3", "--json")
	if err := json.Unmarshal([]byte(out), &d); err != nil || !d.Allowed || d.Remaining != 2 {
		t.Fatalf("limit --json: %q %+v %v", out, d, err)
	}
	for _, args := range [][]string{
		{"limit", "k"},
		{"limit", "k", "--limit", "0"},
		{"limit", "k", "--limit", "1", "--period", "-1s"},
		{"limit", "k", "--limit", "1", "--cost", "-1"},
		{"limit"},
	} {
		if code, _, _ := ctl(t, srv.URL, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	if code, _, stderr := ctl(t, srv.URL, "limit", "k", "--limit", "1", "--algorithm", "nope"); code != 1 || stderr == "" {
		t.Errorf("bad algorithm: exit %d, stderr %q", code, stderr)
	}
}
