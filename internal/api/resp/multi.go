package resp

import (
	"time"

	"github.com/counterd/counterd/internal/contract"
)

// Transactions.
//
// MULTI queues commands (after checking name and arity, like Redis) and
// EXEC runs them. When every queued command is a write that maps to engine
// ops (INCR, INCRBY, DECR, DECRBY, SET, SETNX, MSET, DEL, UNLINK, EXPIRE,
// PEXPIRE without options, PERSIST, HINCRBY, HDEL, PFADD, PFMERGE) and all
// their arguments are valid, EXEC applies them as one engine batch: atomic,
// all or nothing, and no reader sees half of it. Otherwise (a read in the
// transaction, a bad argument, or a batch the engine refuses, for example
// a WRONGTYPE) the commands run one after the other, each with its own
// reply or error, which is exactly Redis's behaviour for errors inside a
// transaction: the others still apply, nothing is rolled back.
//
// With --auth every queued command is checked again at EXEC, since the
// tokens file may have been reloaded in between: one no longer allowed is
// answered with its -NOPERM (or -NOAUTH) inside EXEC's reply and the
// others run, as in Redis (see execDenials).
//
// WATCH records the version of each watched key; EXEC answers a null array
// (transaction aborted) if any watched key was written, created, deleted or
// expired since. The check runs just before EXEC applies the transaction
// and is not atomic with it: a write by another client in the
// microseconds between the check and the apply is not detected, except
// in tiered mode, where the transaction locks its keys before the check
// (Options.KeyLocker, keylocks.go) and every writer waits for the locks.

type watch struct {
	id      string
	exists  bool
	version uint64
	updated time.Time
}

// opSpan is the range of engine ops a queued command prepared.
type opSpan struct{ from, to int }

func cmdMulti(s *Server, c *client, args [][]byte) {
	if c.multi {
		c.writeError("ERR MULTI calls can not be nested")
		return
	}
	c.multi = true
	c.multiErr = false
	c.queue = c.queue[:0]
	c.writeOK()
}

func cmdDiscard(s *Server, c *client, args [][]byte) {
	if !c.multi {
		c.writeError("ERR DISCARD without MULTI")
		return
	}
	c.resetMulti()
	c.writeOK()
}

func (c *client) resetMulti() {
	c.multi = false
	c.multiErr = false
	clear(c.queue)
	c.queue = c.queue[:0]
	c.watched = nil
}

func cmdWatch(s *Server, c *client, args [][]byte) {
	if c.multi {
		c.writeError("ERR WATCH inside MULTI is not allowed")
		return
	}
	for _, k := range args[1:] {
		id := string(k)
		w := watch{id: id}
		if v, err := s.eng.Get(c.ctx, id); err == nil {
			w.exists, w.version, w.updated = v.Exists, v.Version, v.UpdatedAt
		}
		c.watched = append(c.watched, w)
	}
	c.writeOK()
}

func cmdUnwatch(s *Server, c *client, args [][]byte) {
	c.watched = nil
	c.writeOK()
}

// watchedChanged reports whether a watched key changed since WATCH.
func (s *Server) watchedChanged(c *client, watched []watch) bool {
	for _, w := range watched {
		v, err := s.eng.Get(c.ctx, w.id)
		if err != nil {
			continue // an invalid id cannot exist, so it cannot change
		}
		if v.Exists != w.exists || v.Version != w.version || !v.UpdatedAt.Equal(w.updated) {
			return true
		}
	}
	return false
}

func cmdExec(s *Server, c *client, args [][]byte) {
	if !c.multi {
		c.writeError("ERR EXEC without MULTI")
		return
	}
	queue, watched, aborted := c.queue, c.watched, c.multiErr
	c.multi, c.multiErr, c.watched = false, false, nil
	defer func() {
		clear(queue)
		c.queue = queue[:0]
	}()
	if aborted {
		c.writeError("EXECABORT Transaction discarded because of previous errors.")
		return
	}
	// With a KeyLocker (tiered mode) the transaction's keys, watched and
	// named, are locked against every node's writers: before the WATCH
	// check, so that no write lands between it and the commands; without
	// WATCH only when the commands run one by one, the single engine
	// batch being atomic by itself. lock false: c was answered the error.
	var release func()
	defer func() {
		if release != nil {
			release()
		}
	}()
	lock := func() bool {
		if release != nil || s.lua.locker == nil {
			return true
		}
		var err error
		if release, err = s.lua.holdKeys(c, c.ctx, execKeys(watched, queue)); err != nil {
			c.writeError(engineError(err))
			return false
		}
		return true
	}
	if len(watched) > 0 {
		if !lock() {
			return
		}
		if s.watchedChanged(c, watched) {
			c.writeNullArray()
			return
		}
	}
	if len(queue) == 0 {
		c.writeArray(0)
		return
	}
	denied := s.execDenials(c, queue)
	if denied == nil && s.execBatch(c, queue) || !lock() {
		return
	}
	c.writeArray(len(queue))
	for i, q := range queue {
		if c.closing {
			return
		}
		if denied != nil && denied[i] != "" {
			c.writeError(denied[i])
			continue
		}
		s.run(c, q.cmd, q.args)
	}
}

// execBatch applies an all-write transaction as one atomic engine batch
// and writes its replies. It returns false, having written nothing, when
// the transaction cannot or should not run that way.
func (s *Server) execBatch(c *client, queue []queued) bool {
	ops := c.opBuf[:0]
	spans := c.spans[:0]
	defer func() {
		clearOps(ops)
		if cap(ops) <= maxScratchOps {
			c.opBuf = ops[:0]
		}
		c.spans = spans[:0]
	}()
	for _, q := range queue {
		if q.cmd.prep == nil {
			return false
		}
		from := len(ops)
		var e string
		var batchable bool
		ops, e, batchable = q.cmd.prep(c, q.args, ops)
		if e != "" || !batchable {
			return false
		}
		spans = append(spans, opSpan{from, len(ops)})
	}
	var res []contract.Result
	if len(ops) > 0 {
		var err error
		start := time.Now()
		res, err = s.eng.ApplyBatch(c.ctx, ops, contract.WriteOptions{})
		if err != nil {
			// Nothing was applied: run the commands one by one instead so
			// that each gets its own reply, as in Redis.
			return false
		}
		per := time.Since(start) / time.Duration(len(queue))
		for _, q := range queue {
			q.cmd.stats.calls.Add(1)
			q.cmd.stats.ns.Add(int64(per))
			if s.m != nil {
				q.cmd.calls.Inc()
				q.cmd.dur.Observe(per.Seconds())
			}
		}
	}
	c.writeArray(len(queue))
	for i, q := range queue {
		sp := spans[i]
		q.cmd.done(c, q.args, res[sp.from:sp.to])
	}
	return true
}
