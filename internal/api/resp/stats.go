package resp

import (
	"crypto/rand"
	"encoding/hex"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// What INFO, SLOWLOG and CLIENT LIST report (monitor_cmds.go): per
// command calls, time, rejections and failures (Redis's commandstats),
// error replies by code (errorstats), keyspace hits and misses, and the
// slow log.

// cmdStats are one command's (or container subcommand's) figures.
type cmdStats struct {
	name     string // as INFO commandstats names it: "get", "client|list"
	calls    atomic.Uint64
	ns       atomic.Int64  // time in the command, when the server times commands
	rejected atomic.Uint64 // refused before running (arity, permissions)
	failed   atomic.Uint64 // answered with an error
}

func (st *cmdStats) reset() {
	st.calls.Store(0)
	st.ns.Store(0)
	st.rejected.Store(0)
	st.failed.Store(0)
}

// containers are the commands whose subcommands have their own figures,
// with those subcommands (an unknown one counts against the container).
var containers = map[string][]string{
	"client":  {"id", "setname", "getname", "setinfo", "info", "list", "no-evict", "no-touch", "help"},
	"config":  {"get", "set", "resetstat", "help"},
	"command": {"count", "docs", "info", "list", "getkeys", "help"},
	"script":  {"load", "exists", "flush", "kill", "help"},
	"object":  {"encoding", "freq", "idletime", "refcount", "help"},
	"memory":  {"usage", "stats", "doctor", "malloc-stats", "purge", "help"},
	"slowlog": {"get", "len", "reset", "help"},
	"latency": {"latest", "history", "reset", "doctor", "graph", "histogram", "help"},
}

// initStats names every command's figures and makes its subcommands'.
func initStats(cmds map[string]*command) {
	for _, cmd := range cmds {
		cmd.stats.name = cmd.name
		if subs, ok := containers[cmd.name]; ok {
			cmd.subs = make(map[string]*cmdStats, len(subs))
			for _, sub := range subs {
				cmd.subs[sub] = &cmdStats{name: cmd.name + "|" + sub}
			}
		}
	}
}

// statsOf is the figures a call of cmd with args counts in.
func statsOf(cmd *command, args [][]byte) *cmdStats {
	if cmd.subs != nil && len(args) > 1 && len(args[1]) <= 16 {
		var b [16]byte
		n := copy(b[:], args[1])
		for i := range n {
			if 'A' <= b[i] && b[i] <= 'Z' {
				b[i] += 'a' - 'A'
			}
		}
		if st := cmd.subs[string(b[:n])]; st != nil {
			return st
		}
	}
	return &cmd.stats
}

// maxErrorCodes bounds the error codes errorstats tracks (Redis: 128).
const maxErrorCodes = 128

// errorStats counts error replies by their code (the first word).
type errorStats struct {
	total atomic.Uint64
	mu    sync.Mutex
	codes map[string]uint64
}

func (e *errorStats) count(msg string) {
	e.total.Add(1)
	code := msg
	if i := strings.IndexByte(msg, ' '); i >= 0 {
		code = msg[:i]
	}
	e.mu.Lock()
	if e.codes == nil {
		e.codes = make(map[string]uint64)
	}
	if _, ok := e.codes[code]; ok || len(e.codes) < maxErrorCodes {
		e.codes[strings.Clone(code)]++
	}
	e.mu.Unlock()
}

func (e *errorStats) reset() {
	e.total.Store(0)
	e.mu.Lock()
	e.codes = nil
	e.mu.Unlock()
}

// Slow log defaults: Redis's slowlog-log-slower-than (µs) and
// slowlog-max-len.
const (
	DefaultSlowlogSlowerThan = 10000
	DefaultSlowlogMaxLen     = 128
	slowlogMaxArgs           = 32  // Redis's SLOWLOG_ENTRY_MAX_ARGC
	slowlogMaxArgLen         = 128 // Redis's SLOWLOG_ENTRY_MAX_STRING
)

type slowEntry struct {
	id   int64
	at   int64 // unix seconds
	usec int64
	args []string
	addr string
	name string
}

// slowlog keeps the slowest commands' entries, newest first, like Redis's.
type slowlog struct {
	slowerThan atomic.Int64 // µs; negative: off
	maxLen     atomic.Int64
	mu         sync.Mutex
	nextID     int64
	entries    []slowEntry // oldest first (SLOWLOG GET reads from the end)
}

func (l *slowlog) add(c *client, args [][]byte, d time.Duration) {
	e := slowEntry{at: time.Now().Unix(), usec: int64(d / time.Microsecond), addr: c.addr, name: c.getName()}
	n := min(len(args), slowlogMaxArgs)
	e.args = make([]string, n)
	for i := range n {
		if i == slowlogMaxArgs-1 && len(args) > slowlogMaxArgs {
			e.args[i] = "... (" + strconv.Itoa(len(args)-slowlogMaxArgs+1) + " more arguments)"
			break
		}
		a := args[i]
		if len(a) > slowlogMaxArgLen {
			e.args[i] = string(a[:slowlogMaxArgLen]) + "... (" + strconv.Itoa(len(a)-slowlogMaxArgLen) + " more bytes)"
		} else {
			e.args[i] = string(a)
		}
	}
	l.mu.Lock()
	e.id = l.nextID
	l.nextID++
	l.entries = append(l.entries, e)
	l.trimAddedLocked()
	l.mu.Unlock()
}

// setMax changes slowlog-max-len: the log keeps its newest entries up to
// the new length.
func (l *slowlog) setMax(n int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries[:0:0], l.liveLocked()...)
	l.maxLen.Store(n)
	l.trimLocked()
}

// trimLocked drops the entries beyond the newest maxLen (l.mu held).
func (l *slowlog) trimLocked() {
	max := int(min(l.maxLen.Load(), math.MaxInt32))
	if len(l.entries) > max {
		l.entries = append(l.entries[:0:0], l.entries[len(l.entries)-max:]...)
	}
}

// trimAddedLocked is trimLocked in amortized O(1) per entry added: up to
// twice maxLen entries are kept, and the log is their newest maxLen
// (liveLocked).
func (l *slowlog) trimAddedLocked() {
	if max := min(l.maxLen.Load(), math.MaxInt32); int64(len(l.entries)) > 2*max {
		l.trimLocked()
	}
}

// liveLocked is the log: the newest maxLen entries (l.mu held).
func (l *slowlog) liveLocked() []slowEntry {
	max := int(min(l.maxLen.Load(), math.MaxInt32))
	if len(l.entries) > max {
		return l.entries[len(l.entries)-max:]
	}
	return l.entries
}

// newest returns up to n entries (all for n < 0), newest first.
func (l *slowlog) newest(n int64) []slowEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	live := l.liveLocked()
	if n < 0 || n > int64(len(live)) {
		n = int64(len(live))
	}
	out := make([]slowEntry, n)
	for i := range out {
		out[i] = live[len(live)-1-i]
	}
	return out
}

// len is SLOWLOG LEN.
func (l *slowlog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.liveLocked())
}

// skipSlowlog: commands Redis does not log (their arguments carry
// passwords, or their own commands are logged).
func skipSlowlog(name string) bool {
	switch name {
	case "auth", "hello", "exec":
		return true
	}
	return false
}

// opsSampler computes instantaneous_ops_per_sec from the commands
// counted between two INFO calls at least sampleEvery apart (no
// goroutine samples the count in between).
type opsSampler struct {
	mu    sync.Mutex
	at    int64 // nanotime of the last sample
	cmds  uint64
	rate  float64
	valid bool
}

const sampleEvery = 100 * time.Millisecond

func (o *opsSampler) sample(now int64, cmds uint64) int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.valid && time.Duration(now-o.at) >= sampleEvery && cmds >= o.cmds {
		o.rate = float64(cmds-o.cmds) / (float64(now-o.at) / 1e9)
	}
	if !o.valid || time.Duration(now-o.at) >= sampleEvery {
		o.at, o.cmds, o.valid = now, cmds, true
	}
	return int64(o.rate + 0.5)
}

// randomHex40 is a Redis run id or replication id.
func randomHex40() string {
	var b [20]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// connFD is the connection's descriptor as CLIENT LIST shows it (fd=):
// the socket's, or -1 for a connection without one (a script's, as in
// Redis).
func connFD(nc net.Conn) int {
	if f, ok := nc.(interface{ sysFD() int }); ok {
		return f.sysFD()
	}
	if t, ok := nc.(interface{ NetConn() net.Conn }); ok { // TLS
		nc = t.NetConn()
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return -1
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1
	}
	fd := -1
	if rc.Control(func(f uintptr) { fd = int(f) }) != nil {
		return -1
	}
	return fd
}
