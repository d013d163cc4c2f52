package resp

import (
	"fmt"
	"net"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/counterd/counterd/internal/contract"
)

// PING [message]
func cmdPing(s *Server, c *client, args [][]byte) {
	if len(args) > 2 {
		c.writeError("ERR wrong number of arguments for 'ping' command")
		return
	}
	if len(args) == 2 {
		c.writeBulk(args[1])
		return
	}
	c.writeStatus("PONG")
}

// ECHO message
func cmdEcho(s *Server, c *client, args [][]byte) { c.writeBulk(args[1]) }

// SELECT index: counterd has one database, 0.
func cmdSelect(s *Server, c *client, args [][]byte) {
	n, ok := parseInt(args[1])
	switch {
	case !ok:
		c.writeError(errNotInteger)
	case n != 0:
		c.writeError("ERR DB index is out of range")
	default:
		c.writeOK()
	}
}

// QUIT: answer OK and close after the reply is flushed.
func cmdQuit(s *Server, c *client, args [][]byte) {
	c.writeOK()
	c.closing = true
}

// RESET: back to a fresh connection state (RESP2, no name, no MULTI).
func cmdReset(s *Server, c *client, args [][]byte) {
	c.resetMulti()
	c.auth = authState{} // like Redis: back to the unauthenticated default user
	c.proto = 2
	c.respVer.Store(2)
	c.mu.Lock()
	c.name, c.libName, c.libVer = "", "", ""
	c.mu.Unlock()
	c.writeStatus("RESET")
}

// TIME
func cmdTime(s *Server, c *client, args [][]byte) {
	now := time.Now()
	c.writeArray(2)
	c.writeBulkInt(now.Unix())
	c.writeBulkInt(int64(now.Nanosecond() / 1000))
}

// AUTH [username] password: counterd has no passwords, like a Redis whose
// default user is "nopass".
func cmdAuth(s *Server, c *client, args [][]byte) {
	switch len(args) {
	case 2:
		c.writeError("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
	case 3:
		c.writeOK()
	default:
		c.writeError(errSyntax)
	}
}

// HELLO [protover [AUTH username password] [SETNAME clientname]]
func cmdHello(s *Server, c *client, args [][]byte) {
	proto := c.proto
	if len(args) > 1 {
		n, ok := parseInt(args[1])
		if !ok {
			c.writeError("ERR Protocol version is not an integer or out of range")
			return
		}
		if n < 2 || n > 3 {
			c.writeError("NOPROTO unsupported protocol version")
			return
		}
		proto = int(n)
	}
	name, setName := "", false
	for i := 2; i < len(args); i++ {
		more := len(args) - i - 1
		switch a := args[i]; {
		case eqFold(a, "auth") && more >= 2:
			if !s.helloAuth(c, args[i+1], args[i+2]) {
				return
			}
			i += 2
		case eqFold(a, "setname") && more >= 1:
			name, setName = string(args[i+1]), true
			if !validName(name) {
				c.writeError("ERR Client names cannot contain spaces, newlines or special characters.")
				return
			}
			i++
		default:
			c.writeError("ERR Syntax error in HELLO option '" + string(truncate(a, 128)) + "'")
			return
		}
	}
	if !s.helloAuthed(c) {
		return
	}
	if setName {
		c.setName(name)
	}
	c.proto = proto
	c.respVer.Store(int32(proto))
	c.writeMap(8)
	c.writeBulkString("server")
	c.writeBulkString("counterd")
	c.writeBulkString("version")
	c.writeBulkString(RedisVersion)
	c.writeBulkString("proto")
	c.writeInt(int64(proto))
	c.writeBulkString("id")
	c.writeInt(c.id)
	c.writeBulkString("mode")
	c.writeBulkString("standalone")
	c.writeBulkString("role")
	c.writeBulkString("master")
	c.writeBulkString("modules")
	c.writeArray(0)
	c.writeBulkString("counterd_version")
	c.writeBulkString(s.opts.Version)
}

// validName reports whether a client name or library name is made of
// printable non-space ASCII only, as Redis requires.
func validName(n string) bool {
	for i := 0; i < len(n); i++ {
		if n[i] < '!' || n[i] > '~' {
			return false
		}
	}
	return true
}

func subcommandError(args [][]byte) string {
	return "ERR unknown subcommand '" + string(truncate(args[1], 128)) + "'. Try " + strings.ToUpper(string(args[0])) + " HELP."
}

func subArityError(cmd, sub string) string {
	return "ERR wrong number of arguments for '" + cmd + "|" + sub + "' command"
}

// CLIENT ID|SETNAME|GETNAME|SETINFO|INFO|LIST|NO-EVICT|NO-TOUCH|HELP
func cmdClient(s *Server, c *client, args [][]byte) {
	sub := args[1]
	switch {
	case eqFold(sub, "id"):
		if len(args) != 2 {
			c.writeError(subArityError("client", "id"))
			return
		}
		c.writeInt(c.id)
	case eqFold(sub, "setname"):
		if len(args) != 3 {
			c.writeError(subArityError("client", "setname"))
			return
		}
		name := string(args[2])
		if !validName(name) {
			c.writeError("ERR Client names cannot contain spaces, newlines or special characters.")
			return
		}
		c.setName(name)
		c.writeOK()
	case eqFold(sub, "getname"):
		if len(args) != 2 {
			c.writeError(subArityError("client", "getname"))
			return
		}
		if n := c.getName(); n != "" {
			c.writeBulkString(n)
		} else {
			c.writeNull()
		}
	case eqFold(sub, "setinfo"):
		if len(args) != 4 {
			c.writeError(subArityError("client", "setinfo"))
			return
		}
		val := string(args[3])
		var dst *string
		switch attr := args[2]; {
		case eqFold(attr, "lib-name"):
			dst = &c.libName
		case eqFold(attr, "lib-ver"):
			dst = &c.libVer
		default:
			c.writeError("ERR Unrecognized option '" + string(truncate(attr, 128)) + "'")
			return
		}
		if !validName(val) {
			c.writeError("ERR " + strings.ToLower(string(args[2])) + " cannot contain spaces, newlines or special characters.")
			return
		}
		c.mu.Lock()
		*dst = val
		c.mu.Unlock()
		c.writeOK()
	case eqFold(sub, "info"):
		c.writeVerbatim(c.infoLine() + "\n")
	case eqFold(sub, "list"):
		s.mu.Lock()
		cs := make([]*client, 0, len(s.clients))
		for cl := range s.clients {
			cs = append(cs, cl)
		}
		s.mu.Unlock()
		sort.Slice(cs, func(i, j int) bool { return cs[i].id < cs[j].id })
		var b strings.Builder
		for _, cl := range cs {
			b.WriteString(cl.infoLine())
			b.WriteByte('\n')
		}
		c.writeVerbatim(b.String())
	case eqFold(sub, "no-evict"), eqFold(sub, "no-touch"):
		if len(args) != 3 || !(eqFold(args[2], "on") || eqFold(args[2], "off")) {
			c.writeError(errSyntax)
			return
		}
		c.writeOK() // nothing is evicted and there is no LRU to touch
	case eqFold(sub, "help"):
		writeHelp(c, "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
			"GETNAME", "    Return the name of the current connection.",
			"ID", "    Return the ID of the current connection.",
			"INFO", "    Return information about the current client connection.",
			"LIST", "    Return information about client connections.",
			"SETNAME <name>", "    Assign the name <name> to the current connection.",
			"SETINFO <option> <value>", "    Set client meta attr. Options are: LIB-NAME, LIB-VER.",
			"NO-EVICT (ON|OFF)", "    Accepted and ignored.",
			"NO-TOUCH (ON|OFF)", "    Accepted and ignored.",
			"HELP", "    Print this help.")
	default:
		c.writeError(subcommandError(args))
	}
}

// infoLine is the CLIENT LIST line of c. It may run on another client's
// goroutine: only fields set at creation, atomics or fields guarded by
// c.mu are read. fd is the socket's descriptor (-1 for a script's
// connection, as in Redis), cmd the last command run (or "NULL"), idle
// the seconds since its last batch of commands.
func (c *client) infoLine() string {
	c.mu.Lock()
	name, lib, ver := c.name, c.libName, c.libVer
	c.mu.Unlock()
	age := int64(time.Since(c.created) / time.Second)
	idle := max(int64(time.Duration(nanotime()-c.active.Load())/time.Second), 0)
	cmd := "NULL"
	if st := c.lastCmd.Load(); st != nil {
		cmd = st.name
	}
	return fmt.Sprintf("id=%d addr=%s laddr=%s fd=%d name=%s age=%d idle=%d flags=N db=0 sub=0 psub=0 ssub=0 multi=-1 qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd=%s user=default redir=-1 resp=%d lib-name=%s lib-ver=%s",
		c.id, c.addr, c.laddr, c.fd0, name, age, idle, cmd, c.respVer.Load(), lib, ver)
}

func writeHelp(c *client, lines ...string) {
	c.writeArray(len(lines))
	for _, l := range lines {
		c.writeStatus(l)
	}
}

// FLUSHALL [ASYNC|SYNC], FLUSHDB [ASYNC|SYNC]: refused unless
// Options.AllowFlush.
func cmdFlush(s *Server, c *client, args [][]byte) {
	if len(args) > 2 || len(args) == 2 && !eqFold(args[1], "sync") && !eqFold(args[1], "async") {
		c.writeError(errSyntax)
		return
	}
	if !s.opts.AllowFlush {
		c.writeError("ERR " + strings.ToUpper(string(args[0])) + " is disabled on this counterd server (start it with --allow-flushall to enable it)")
		return
	}
	if err := s.eng.FlushAll(c.ctx, contract.WriteOptions{}); err != nil {
		c.writeError(engineError(err))
		return
	}
	c.writeOK()
}

// CONFIG GET parameter [parameter ...] answers from a small table of
// read-only values (enough for redis-benchmark and tools that probe);
// CONFIG SET is refused; CONFIG RESETSTAT resets INFO's counters.
func cmdConfig(s *Server, c *client, args [][]byte) {
	sub := args[1]
	switch {
	case eqFold(sub, "get"):
		if len(args) < 3 {
			c.writeError(subArityError("config", "get"))
			return
		}
		params := s.configTable()
		var out [][2]string
		seen := map[string]bool{}
		for _, p := range args[2:] {
			pat := strings.ToLower(string(p))
			for _, kv := range params {
				if seen[kv[0]] {
					continue
				}
				if ok, _ := path.Match(pat, kv[0]); ok || pat == kv[0] {
					out = append(out, kv)
					seen[kv[0]] = true
				}
			}
		}
		c.writeMap(len(out))
		for _, kv := range out {
			c.writeBulkString(kv[0])
			c.writeBulkString(kv[1])
		}
	case eqFold(sub, "set"):
		if len(args) < 4 || len(args)%2 != 0 {
			c.writeError(subArityError("config", "set"))
			return
		}
		s.configSet(c, args[2:])
	case eqFold(sub, "resetstat"):
		s.resetStats()
		c.writeOK()
	case eqFold(sub, "help"):
		writeHelp(c, "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
			"GET <pattern>", "    Return parameters matching the glob-like <pattern> and their values.",
			"RESETSTAT", "    Reset statistics reported by the INFO command.",
			"HELP", "    Print this help.")
	default:
		c.writeError(subcommandError(args))
	}
}

// configSet is CONFIG SET parameter value [...]: only the slow log's
// two parameters may be set (the rest are read-only), all or none, with
// Redis's errors.
func (s *Server) configSet(c *client, pv [][]byte) {
	type set struct {
		dst *atomic.Int64
		v   int64
	}
	var sets []set
	seen := map[string]bool{}
	for i := 0; i+1 < len(pv); i += 2 {
		name := strings.ToLower(string(pv[i]))
		if seen[name] {
			c.writeError("ERR CONFIG SET failed (possibly related to argument '" + name + "') - duplicate parameter")
			return
		}
		seen[name] = true
		n, ok := parseInt(pv[i+1])
		fail := func(why string) {
			c.writeError("ERR CONFIG SET failed (possibly related to argument '" + name + "') - " + why)
		}
		switch name {
		case "slowlog-log-slower-than", "slowlog-max-len":
			dst, min := &s.slow.slowerThan, int64(-1)
			if name == "slowlog-max-len" {
				dst, min = &s.slow.maxLen, 0
			}
			if !ok {
				fail("argument couldn't be parsed into an integer")
				return
			}
			if n < min {
				fail("argument must be between " + strconv.FormatInt(min, 10) + " and 9223372036854775807 inclusive")
				return
			}
			sets = append(sets, set{dst, n})
		default:
			c.writeError("ERR CONFIG SET is not supported by counterd: '" + string(truncate(pv[i], 128)) + "' is read-only")
			return
		}
	}
	for _, st := range sets {
		if st.dst == &s.slow.maxLen {
			s.slow.setMax(st.v)
		} else {
			st.dst.Store(st.v)
		}
	}
	c.writeOK()
}

func (s *Server) configTable() [][2]string {
	idle := int64(s.opts.IdleTimeout / time.Second)
	return [][2]string{
		{"appendonly", "no"},
		{"databases", "1"},
		{"maxclients", strconv.Itoa(s.opts.MaxConns)},
		{"maxmemory", strconv.FormatInt(s.memory().limit, 10)},
		{"maxmemory-policy", "noeviction"},
		{"proto-max-bulk-len", strconv.Itoa(s.opts.MaxBulkLen)},
		{"client-query-buffer-limit", strconv.Itoa(s.opts.MaxCommandBytes)},
		{"save", ""},
		{"timeout", strconv.FormatInt(idle, 10)},
		{"cluster-enabled", "no"},
		{"slowlog-log-slower-than", strconv.FormatInt(s.slow.slowerThan.Load(), 10)},
		{"slowlog-max-len", strconv.FormatInt(s.slow.maxLen.Load(), 10)},
		{"latency-monitor-threshold", "0"},
		{"latency-tracking", "no"},
		{"lua-time-limit", strconv.FormatInt(int64(s.lua.limit/time.Millisecond), 10)},
		{"busy-reply-threshold", strconv.FormatInt(int64(s.lua.limit/time.Millisecond), 10)},
	}
}

func (s *Server) port() int {
	if a, ok := s.Addr().(*net.TCPAddr); ok && a != nil {
		return a.Port
	}
	return 0
}
