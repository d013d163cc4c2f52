package redisstore

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"
)

// pipeReq is one add script waiting for a pipelined round trip.
type pipeReq struct {
	sc   *script
	keys []string
	args []any
	done chan pipeResp
}

type pipeResp struct {
	reply []any
	err   error
}

// startPipeline starts the pipeliners when Options.Pipeline is set.
func (s *Store) startPipeline() {
	if s.opts.Pipeline <= 0 {
		return
	}
	conns := s.opts.PipelineConns
	if conns <= 0 {
		conns = 4
	}
	s.pipe = make(chan *pipeReq, s.opts.Pipeline*conns)
	for i := 0; i < conns; i++ {
		go s.pipeLoop()
	}
}

// runAdd runs the add script, through a pipeliner when enabled. A script
// missing from Redis' cache (NOSCRIPT after SCRIPT FLUSH or a restart)
// is run again alone, which loads it.
func (s *Store) runAdd(ctx context.Context, id string, args ...any) ([]any, error) {
	return s.runAddScript(ctx, addScript, keys(id), args...)
}

// runAddScript runs sc (the add script or a variant of it) with keys
// as runAdd does.
func (s *Store) runAddScript(ctx context.Context, sc *script, keys []string, args ...any) ([]any, error) {
	if s.pipe == nil {
		return s.runKeys(ctx, sc, keys, args...)
	}
	psc, pargs := s.forLocks(ctx, sc, keys, args)
	req := &pipeReq{sc: psc, keys: keys, args: pargs, done: make(chan pipeResp, 1)}
	select {
	case s.pipe <- req:
	case <-s.stopped:
		return nil, redis.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	res := <-req.done // awaited even if ctx ends: see Store.write
	if res.err != nil && strings.HasPrefix(res.err.Error(), "NOSCRIPT") {
		return s.runKeys(ctx, sc, keys, args...)
	}
	if res.err == nil && len(res.reply) == 0 {
		res.err = errEmptyReply
	}
	return res.reply, res.err
}

// pipeLoop takes a waiting request, adds whatever else is waiting (up to
// Options.Pipeline) and sends them in one round trip.
func (s *Store) pipeLoop() {
	batch := make([]*pipeReq, 0, s.opts.Pipeline)
	for {
		select {
		case <-s.stopped:
			return
		case r := <-s.pipe:
			batch = append(batch[:0], r)
		}
	fill:
		for len(batch) < s.opts.Pipeline {
			select {
			case r := <-s.pipe:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		s.sendBatch(batch)
	}
}

func (s *Store) sendBatch(batch []*pipeReq) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.WriteTimeout+s.opts.ReadTimeout)
	defer cancel()
	p := s.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(batch))
	for i, r := range batch {
		cmds[i] = evalCmd(ctx, "evalsha", r.sc.Hash(), r.keys, r.args)
		_ = p.Process(ctx, onceCmd{cmds[i]})
	}
	_, _ = p.Exec(ctx) // errors are per command
	for i, r := range batch {
		v, err := cmds[i].Slice()
		r.done <- pipeResp{reply: v, err: err}
	}
}
