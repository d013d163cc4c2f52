package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/counterd/counterd/internal/counter"
	"github.com/redis/go-redis/v9"
)

// HDel removes fields of a hash counter. It returns the fields it removed
// with the values they had (so a write-behind tier can subtract them) and
// the new version (0 when nothing was removed). It never creates the
// counter.
func (s *Store) HDel(ctx context.Context, id string, names []string) ([]counter.Field, uint64, error) {
	if err := checkID(id); err != nil {
		return nil, 0, err
	}
	if len(names) == 0 {
		return nil, 0, fmt.Errorf("%w: no fields", ErrInvalidArgument)
	}
	var out []counter.Field
	var ver uint64
	err := s.write(ctx, "hdel", id, func(ctx context.Context, mayCreate string) ([]any, error) {
		return s.run(ctx, hdelScript, id, scriptArgs(s.nowMS(), mayCreate, names)...)
	}, func(r []any) error {
		v, err := toInt(r[1])
		ver = uint64(v)
		for i := 2; i+1 < len(r); i += 2 {
			n, e := toInt(r[i+1])
			out = append(out, counter.Field{Name: str(r[i]), Value: n})
			err = errors.Join(err, e)
		}
		return err
	})
	return out, ver, err
}

// PFMerge merges the hll counters srcs into dst (created if missing) and
// returns dst's new estimate and version. Sources are read through the
// Loader first; a source of another kind fails with ErrWrongKind and
// changes nothing. The sources are in other Cluster slots: single Redis
// only, like PFCount of several ids.
func (s *Store) PFMerge(ctx context.Context, dst string, srcs []string) (int64, uint64, error) {
	ks := append(keys(dst), make([]string, 0, len(srcs))...)
	if err := checkID(dst); err != nil {
		return 0, 0, err
	}
	for _, src := range srcs {
		rec, found, err := s.Get(ctx, src)
		if err != nil {
			return 0, 0, err
		}
		if found && rec.Kind != KindHLL {
			return 0, 0, fmt.Errorf("%w: source %q is a %s", ErrWrongKind, src, rec.Kind)
		}
		ks = append(ks, ValueKey(src))
	}
	var est int64
	var ver uint64
	err := s.write(ctx, "pfmerge", dst, func(ctx context.Context, mayCreate string) ([]any, error) {
		return pfmergeScript.Run(ctx, s.rdb, ks, s.nowMS(), mayCreate).Slice()
	}, func(r []any) error {
		v, err1 := toInt(r[1])
		e, err2 := toInt(r[2])
		ver, est = uint64(v), e
		return errors.Join(err1, err2)
	})
	return est, ver, err
}

// RawHLL returns the raw Redis HLL string of an hll counter (nil when it
// does not exist), the form Record.HLL carries and a Loader returns.
func (s *Store) RawHLL(ctx context.Context, id string) ([]byte, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	var b []byte
	err := s.do(ctx, "rawhll", false, func(ctx context.Context) (err error) {
		b, err = s.rdb.Get(ctx, ValueKey(id)).Bytes()
		if errors.Is(err, redis.Nil) {
			b, err = nil, nil
		}
		return err
	})
	return b, err
}

// FlushCounters removes every counter key (counter:{...}) from Redis with
// SCAN and UNLINK, leaving other keys of the database alone, and returns
// how many keys it removed.
func (s *Store) FlushCounters(ctx context.Context) (int, error) {
	start := time.Now()
	n := 0
	err := s.do(ctx, "flush", true, func(ctx context.Context) error {
		iter := s.rdb.Scan(ctx, 0, "counter:{*", 1000).Iterator()
		batch := make([]string, 0, 1000)
		for iter.Next(ctx) {
			batch = append(batch, iter.Val())
			if len(batch) == cap(batch) {
				if err := s.rdb.Unlink(ctx, batch...).Err(); err != nil {
					return err
				}
				n, batch = n+len(batch), batch[:0]
			}
		}
		if err := iter.Err(); err != nil {
			return err
		}
		if len(batch) > 0 {
			n += len(batch)
			return s.rdb.Unlink(ctx, batch...).Err()
		}
		return nil
	})
	s.observe("flush", start, err)
	return n, err
}

// scriptArgs is ARGV now_ms, maycreate, xs... of the scripts taking a list.
func scriptArgs[T any](now int64, mayCreate string, xs []T) []any {
	args := make([]any, 0, 2+len(xs))
	args = append(args, now, mayCreate)
	for _, x := range xs {
		args = append(args, x)
	}
	return args
}
