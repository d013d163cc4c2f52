package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
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
// changes nothing. On a single Redis it is one script over all the keys.
// On Redis Cluster, where the sources live in other slots, their raw
// sketches are read first and merged into dst by one script on dst's slot:
// atomic for dst, with each source as of its read.
func (s *Store) PFMerge(ctx context.Context, dst string, srcs []string) (int64, uint64, error) {
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
	}
	sc, ks, extra := pfmergeScript, keys(dst), []any(nil)
	if s.cluster != nil {
		var raws []any
		err := s.do(ctx, "rawhll", false, func(ctx context.Context) (err error) {
			raws, err = s.rawHLLs(ctx, srcs)
			return err
		})
		if err != nil {
			return 0, 0, err
		}
		sc, extra = pfmergeRawScript, raws
	} else {
		for _, src := range srcs {
			ks = append(ks, ValueKey(src))
		}
	}
	var est int64
	var ver uint64
	err := s.write(ctx, "pfmerge", dst, func(ctx context.Context, mayCreate string) ([]any, error) {
		return s.eval(ctx, sc, ks, append([]any{s.nowMS(), mayCreate}, extra...)...).Slice()
	}, func(r []any) error {
		v, err1 := toInt(r[1])
		e, err2 := toInt(r[2])
		ver, est = uint64(v), e
		return errors.Join(err1, err2)
	})
	return est, ver, err
}

// rawHLLs reads the raw sketches of ids in one pipeline (split by node on
// a cluster), leaving out missing ones.
func (s *Store) rawHLLs(ctx context.Context, ids []string) ([]any, error) {
	p := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(ids))
	for i, id := range ids {
		cmds[i] = p.Get(ctx, ValueKey(id))
	}
	_, _ = p.Exec(ctx) // errors are per command
	out := make([]any, 0, len(ids))
	for _, c := range cmds {
		b, err := c.Bytes()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
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
// SCAN and UNLINK on every master, leaving other keys alone, and returns
// how many keys it removed. Each key is unlinked on its own (in pipelines
// of up to 1000): keys of different slots cannot share a command on Redis
// Cluster.
func (s *Store) FlushCounters(ctx context.Context) (int, error) {
	start := time.Now()
	var n atomic.Int64
	err := s.do(ctx, "flush", true, func(ctx context.Context) error {
		return s.forEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			iter := m.Scan(ctx, 0, "counter:{*", 1000).Iterator()
			batch := make([]string, 0, 1000)
			unlink := func() error {
				if len(batch) == 0 {
					return nil
				}
				p := m.Pipeline()
				for _, k := range batch {
					p.Unlink(ctx, k)
				}
				_, err := p.Exec(ctx)
				n.Add(int64(len(batch)))
				batch = batch[:0]
				return err
			}
			for iter.Next(ctx) {
				if batch = append(batch, iter.Val()); len(batch) == cap(batch) {
					if err := unlink(); err != nil {
						return err
					}
				}
			}
			if err := iter.Err(); err != nil {
				return err
			}
			return unlink()
		})
	})
	s.observe("flush", start, err)
	return int(n.Load()), err
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
