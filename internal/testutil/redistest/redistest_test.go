package redistest

import (
	"strings"
	"testing"
)

func TestNewFlushRestart(t *testing.T) {
	s := New(t)
	if r, err := s.Do("SET", "k", "v"); err != nil || r != "+OK" {
		t.Fatalf("SET = %q, %v", r, err)
	}
	if r, err := s.Do("GET", "k"); err != nil || strings.TrimSpace(r) != "v" {
		t.Fatalf("GET = %q, %v", r, err)
	}
	s.FlushAll(t)
	if r, err := s.Do("EXISTS", "k"); err != nil || r != ":0" {
		t.Fatalf("EXISTS after FlushAll = %q, %v", r, err)
	}
	if s.External() {
		return
	}
	s.Do("SET", "k", "v")
	s.Stop(t)
	if _, err := s.Do("PING"); err == nil {
		t.Fatal("PING succeeded on a stopped server")
	}
	s.Start(t)
	if r, err := s.Do("EXISTS", "k"); err != nil || r != ":0" {
		t.Fatalf("EXISTS after restart = %q, %v (persistence should be off)", r, err)
	}
	s.Restart(t)
	if r, err := s.Do("PING"); err != nil || r != "+PONG" {
		t.Fatalf("PING after Restart = %q, %v", r, err)
	}
}

func TestIsolation(t *testing.T) {
	a, b := New(t), New(t)
	if a.External() {
		t.Skip("one shared external server")
	}
	if a.Addr == b.Addr {
		t.Fatalf("two tests share %s", a.Addr)
	}
	a.Do("SET", "k", "a")
	if r, _ := b.Do("EXISTS", "k"); r != ":0" {
		t.Fatalf("key leaked between servers: %q", r)
	}
}
