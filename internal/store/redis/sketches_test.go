package redisstore_test

import (
	"context"
	"testing"
	"time"

	redisstore "github.com/counterd/counterd/internal/store/redis"
)

func testSketchRegisters(t *testing.T, tg *target) {
	s := newStore(t, tg)
	ctx := context.Background()
	const m = 16
	k1, k2 := redisstore.SketchKey("a", 4, 'd', 0, 7), redisstore.SketchKey("a", 4, 'd', 1, 3)
	if k1 != "counter:{a}:u:4:d0:7" || keySlot(k1) != keySlot(redisstore.ValueKey("a")) {
		t.Fatalf("key %q", k1)
	}
	// Register 2 to rank 5, register 15 to rank 1, then 2 to 3 (lower: kept).
	if err := s.SketchAdd(ctx, []string{k1, k2}, m, []uint32{2<<8 | 5, 15<<8 | 1}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.SketchAdd(ctx, []string{k1}, m, []uint32{2<<8 | 3, 4<<8 | 2}, time.Hour); err != nil {
		t.Fatal(err)
	}
	vs, err := s.SketchGet(ctx, []string{k1, k2, "counter:{a}:u:4:d0:8"})
	if err != nil {
		t.Fatal(err)
	}
	want1 := "\x00\x00\x05\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00" // flag 0: not filled
	if vs[0] != want1 || vs[1][2] != 5 || vs[1][4] != 0 || vs[2] != "" {
		t.Fatalf("values %q", vs)
	}
	// Fill merges register by register and sets the flag.
	regs := make([]byte, m)
	regs[2], regs[3] = 1, 9
	v, err := s.SketchFill(ctx, k1, regs, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if v[2] != 5 || v[3] != 9 || v[4] != 2 || v[15] != 1 || v[m] != 1 || len(v) != m+1 {
		t.Fatalf("filled %q", v)
	}
	// A fill of a missing key stores regs.
	if v, err := s.SketchFill(ctx, "counter:{a}:u:4:d0:9", regs, time.Hour); err != nil || v != string(regs)+"\x01" {
		t.Fatalf("fill missing = %q %v", v, err)
	}
}
