package resp

import (
	"bytes"
	"context"
	"slices"
	"time"
)

// Key locks against the writers of other nodes (Options.KeyLocker: the
// tiered mode, where every node writes the same counters in one Redis).
// The script gate orders this node's commands only; a command that
// reads a counter and then writes what it read (GETDEL, MSETNX, RENAME,
// RENAMENX, COPY, GETSET, SET ... GET), a transaction (EXEC: its WATCH
// check and its commands) and a Lua script also lock their keys in the
// shared Redis, so that no writer of any node lands in between. All of
// them lock the same way (holdKeys): in sorted order, with a lease of
// --lua-time-limit renewed while held, waiting at most lockWait for
// another holder's lock.

// sortedIDs returns the distinct keys as ids, sorted: the order two
// holders lock their keys in, so that neither waits for the other.
func sortedIDs(keys [][]byte) []string {
	ids := make([]string, 0, len(keys))
	for _, k := range keys {
		ids = append(ids, string(k))
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// lockWait bounds the wait for a key another node's holder has: twice
// the lease (--lua-time-limit), so the lock of a node that died holding
// it has expired by then.
func (sc *scripting) lockWait() time.Duration { return 2 * sc.limit }

// holdKeys locks keys (in sorted order) for c, waiting with ctx: c
// becomes a lock holder (c.locks, and c.ctx carrying them so that its
// writes pass them) if it is not one already, and release, which the
// caller must call (also after an error: locks taken before it stay
// held until then), ends that. When c holds locks already (a script or
// command inside an EXEC that locked its keys) the keys are added to
// them and release does nothing: the EXEC releases them all. Only with
// sc.locker set.
func (sc *scripting) holdKeys(c *client, ctx context.Context, keys [][]byte) (release func(), err error) {
	if c.locks != nil {
		return func() {}, c.locks.Lock(ctx, sortedIDs(keys), sc.lockWait())
	}
	locks := sc.locker.NewKeyLocks(sc.limit)
	parent := c.ctx
	c.locks, c.ctx = locks, locks.Context(parent)
	release = func() {
		c.locks, c.ctx = nil, parent
		locks.Unlock()
	}
	return release, locks.Lock(ctx, sortedIDs(keys), sc.lockWait())
}

// readThenWriteKeys returns the keys of a command that reads then
// writes them and so locks them with a KeyLocker (nil for any other):
// the gate's exclusive commands (GETDEL, MSETNX, RENAME, RENAMENX,
// COPY), GETSET, and SET with the GET option. EXEC locks its keys
// itself (cmdExec), and a script its own (run, call).
func readThenWriteKeys(cmd *command, args [][]byte) [][]byte {
	switch {
	case cmd.gate == gateExclusive, cmd.name == "getset":
	case cmd.name == "set" && hasGetOption(args):
	default:
		return nil
	}
	return commandKeys(cmd, args)
}

// hasGetOption: SET's options (after key and value) include GET.
func hasGetOption(args [][]byte) bool {
	for _, a := range args[min(3, len(args)):] {
		if bytes.EqualFold(a, []byte("get")) {
			return true
		}
	}
	return false
}

// lockCommandKeys locks the keys of a read-then-write command for c
// (readThenWriteKeys) when the server has a KeyLocker; release undoes
// it; false: c was answered the error (the lock could not be had).
func (s *Server) lockCommandKeys(c *client, cmd *command, args [][]byte) (release func(), ok bool) {
	if s.lua.locker == nil {
		return nil, true
	}
	keys := readThenWriteKeys(cmd, args)
	if len(keys) == 0 {
		return nil, true
	}
	release, err := s.lua.holdKeys(c, c.ctx, keys)
	if err != nil {
		release()
		c.writeError(engineError(err))
		return nil, false
	}
	return release, true
}

// execKeys returns the keys an EXEC locks: those watched and those its
// queued commands name (a script's declared keys are locked when it
// starts, the others when its commands name them).
func execKeys(watched []watch, queue []queued) [][]byte {
	keys := make([][]byte, 0, len(watched)+len(queue))
	for _, w := range watched {
		keys = append(keys, []byte(w.id))
	}
	for _, q := range queue {
		keys = append(keys, commandKeys(q.cmd, q.args)...)
	}
	return keys
}
