package client

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	c, err := New("http://x", WithBackoff(50*time.Millisecond, 2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for n, want := range []time.Duration{50, 100, 200, 400, 800, 1600, 2000, 2000} {
		want *= time.Millisecond
		for range 100 {
			if d := c.backoff(n); d < want/2 || d > want {
				t.Fatalf("backoff(%d) = %v, want in [%v, %v]", n, d, want/2, want)
			}
		}
	}
	if d := c.backoff(1000); d > 2*time.Second {
		t.Fatalf("backoff(1000) = %v", d)
	}
	c, _ = New("http://x", WithBackoff(0, 0))
	if d := c.backoff(3); d != 0 {
		t.Fatalf("zero backoff = %v", d)
	}
}

func TestDefaults(t *testing.T) {
	c, err := New("http://x")
	if err != nil {
		t.Fatal(err)
	}
	if c.cfg.maxRetries != 3 || c.cfg.backoffBase != 50*time.Millisecond || c.cfg.backoffCap != 2*time.Second || !c.cfg.idempotency {
		t.Fatalf("defaults %+v", c.cfg)
	}
}

func TestEscape(t *testing.T) {
	for in, want := range map[string]string{
		"a/b": "a%2Fb", ".": "%2E", "..": "%2E%2E", "a.b": "a.b", "a b": "a%20b", "x*": "x%2A",
	} {
		if got := escape(in); got != want {
			t.Errorf("escape(%q) = %q, want %q", in, got, want)
		}
	}
}
