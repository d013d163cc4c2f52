package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/counter"
	redisstore "github.com/counterd/counterd/internal/store/redis"
)

// testScriptLocks: while a holder locks counters, every write script of
// the store (plain, pipelined, journaled, marked) writes nothing on them
// and fails with ErrLocked once its wait is over; the holder's own
// writes (its Locks in the context) pass; a lock key gone under the
// holder makes its writes fail with ErrLockLost; a second holder waits
// for the first; after Unlock plain writes pass again.
func testScriptLocks(t *testing.T, tg *target) {
	s := open(t, tg.url, redisstore.Options{LockWait: 60 * time.Millisecond, Pipeline: 8, PipelineConns: 1})
	ctx := context.Background()
	ids := []string{"lc", "lf", "lh", "lu", "lu2"}
	if _, _, err := s.Add(ctx, "lc", redisstore.KindCounter, 5, redisstore.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, _, _, err := s.AddFloat(ctx, "lf", "1.5"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.HAdd(ctx, "lh", []counter.FieldDelta{{Name: "a", Delta: 1}}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"lu", "lu2"} {
		if _, err := s.PFAdd(ctx, id, []byte(id)); err != nil {
			t.Fatal(err)
		}
	}
	before := map[string]redisstore.Record{}
	for _, id := range ids {
		before[id] = get(t, s, id)
	}
	l := s.NewLocks("test", 5*time.Second)
	if err := l.Lock(ctx, ids, time.Second); err != nil {
		t.Fatal(err)
	}
	jr := func(id string) *redisstore.Journal {
		return &redisstore.Journal{Key: redisstore.ValueKey(id) + ":jtest", Head: "h|", Tail: "|t"}
	}
	mk := func(id string) *redisstore.Marks {
		return &redisstore.Marks{Keys: []string{redisstore.ValueKey(id) + ":mtest"}, Slot: redisstore.ValueKey(id) + ":stest", TTL: time.Minute}
	}
	writes := []struct {
		name string
		fn   func(ctx context.Context) error
	}{
		{"add", func(ctx context.Context) error {
			_, _, err := s.Add(ctx, "lc", redisstore.KindAuto, 1, redisstore.AddOptions{})
			return err
		}},
		{"addfloat", func(ctx context.Context) error { _, _, _, _, err := s.AddFloat(ctx, "lf", "1"); return err }},
		{"set", func(ctx context.Context) error { _, err := s.Set(ctx, "lc", 7, nil, 0); return err }},
		{"hadd", func(ctx context.Context) error {
			_, _, err := s.HAdd(ctx, "lh", []counter.FieldDelta{{Name: "a", Delta: 1}})
			return err
		}},
		{"hset", func(ctx context.Context) error {
			_, _, _, err := s.HSet(ctx, "lh", []counter.Field{{Name: "b", Value: 2}}, false)
			return err
		}},
		{"pfadd", func(ctx context.Context) error { _, err := s.PFAdd(ctx, "lu", []byte("x")); return err }},
		{"pfmerge", func(ctx context.Context) error { _, _, err := s.PFMerge(ctx, "lu", []string{"lu2"}); return err }},
		{"expire", func(ctx context.Context) error { _, err := s.Expire(ctx, "lc", time.Hour); return err }},
		{"hdel", func(ctx context.Context) error { _, _, err := s.HDel(ctx, "lh", []string{"a"}); return err }},
		{"add journaled", func(ctx context.Context) error {
			_, _, err := s.AddJournaled(ctx, "lc", redisstore.KindAuto, 1, redisstore.AddOptions{}, jr("lc"))
			return err
		}},
		{"hadd journaled", func(ctx context.Context) error {
			_, _, _, err := s.HAddJournaled(ctx, "lh", []counter.FieldDelta{{Name: "a", Delta: 1}}, 0, jr("lh"))
			return err
		}},
		{"set journaled", func(ctx context.Context) error {
			_, _, _, _, err := s.SetPrevKindJournaled(ctx, "lc", 9, nil, 0, jr("lc"))
			return err
		}},
		{"add marked", func(ctx context.Context) error {
			_, _, err := s.AddMarked(ctx, "lc", redisstore.KindAuto, 1, redisstore.AddOptions{}, mk("lc"))
			return err
		}},
		{"hadd marked", func(ctx context.Context) error {
			_, _, _, err := s.HAddMarked(ctx, "lh", []counter.FieldDelta{{Name: "a", Delta: 1}}, 0, mk("lh"))
			return err
		}},
		{"delete", func(ctx context.Context) error { _, err := s.Delete(ctx, "lu2"); return err }},
	}
	for _, w := range writes {
		err := w.fn(ctx)
		var re *redisstore.ReplyError
		if !errors.Is(err, redisstore.ErrLocked) || !errors.As(err, &re) || re.Detail == "" {
			t.Fatalf("%s of a locked counter: %v, want ErrLocked", w.name, err)
		}
	}
	dctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond) // an earlier deadline than LockWait
	err := writes[0].fn(dctx)
	cancel()
	if !errors.Is(err, redisstore.ErrLocked) {
		t.Fatalf("add with a deadline: %v", err)
	}
	for _, id := range ids {
		if r := get(t, s, id); r.Version != before[id].Version || r.Value != before[id].Value || r.Float != before[id].Float {
			t.Fatalf("%s changed while locked: %+v, was %+v", id, r, before[id])
		}
	}
	// A second holder waits for the first, then gives up.
	l2 := s.NewLocks("other", time.Second)
	if err := l2.Lock(ctx, []string{"lc"}, 30*time.Millisecond); !errors.Is(err, redisstore.ErrLocked) {
		t.Fatalf("second holder: %v", err)
	}
	// The holder's own writes pass.
	lctx := l.Context(ctx)
	for _, w := range writes {
		if err := w.fn(lctx); err != nil {
			t.Fatalf("%s by the holder: %v", w.name, err)
		}
	}
	if r := get(t, s, "lc"); r.Value != 10 { // set 9 (journaled), then +1 (marked)
		t.Fatalf("lc after the holder's writes = %d, want 10", r.Value)
	}
	// A lock that is no longer the holder's: its writes fail.
	if err := tg.rdb.Del(ctx, redisstore.LockKey("lc")).Err(); err != nil {
		t.Fatal(err)
	}
	if err := writes[0].fn(lctx); !errors.Is(err, redisstore.ErrLockLost) {
		t.Fatalf("add after the lock was removed: %v, want ErrLockLost", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if n, err := tg.rdb.Exists(ctx, redisstore.LockKey(id)).Result(); err != nil || n != 0 {
			t.Fatalf("lock of %s left after Unlock: %d %v", id, n, err)
		}
	}
	if err := l2.Lock(ctx, []string{"lc"}, time.Second); err != nil {
		t.Fatalf("second holder after Unlock: %v", err)
	}
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, w := range writes {
		if err := w.fn(ctx); err != nil {
			t.Fatalf("%s after Unlock: %v", w.name, err)
		}
	}
}
