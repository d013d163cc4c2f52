package resp

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/counterd/counterd/internal/contract"
)

// Monitoring as Redis 7 shapes it (issue 28): INFO's sections, ROLE,
// OBJECT, MEMORY, SLOWLOG, LATENCY and LASTSAVE, with counterd's own
// figures. Memory figures come from the Go runtime: counterd is built
// without cgo, so the engine's memtables, block cache and counters are
// allocated on the Go heap and counted there.

func monitorCommands() []*command {
	const r = flagReadonly
	sub := []argDoc{aStr("subcommand"), aOpt(aMany(aStr("arg")))}
	return []*command{
		{name: "role", arity: 1, flags: flagFast | flagLoading | flagNoScript,
			doc: &cmdDoc{"server", "Returns the replication role.", "2.8.12", "O(1)", nil},
			fn:  cmdRole},
		{name: "lastsave", arity: 1, flags: flagFast | flagLoading,
			doc: &cmdDoc{"server", "Returns the Unix timestamp of the last successful save to disk.", "1.0.0", "O(1)", nil},
			fn:  cmdLastSave},
		{name: "object", arity: -2, flags: r, first: 2, last: 2, step: 1,
			doc: &cmdDoc{"generic", "A container for object introspection commands: ENCODING, FREQ, IDLETIME, REFCOUNT.", "2.2.3", "Depends on subcommand.", sub},
			fn:  cmdObject},
		{name: "memory", arity: -2, flags: r, first: 2, last: 2, step: 1,
			doc: &cmdDoc{"server", "A container for memory diagnostics commands: USAGE, STATS, DOCTOR.", "4.0.0", "Depends on subcommand.", sub},
			fn:  cmdMemory},
		{name: "slowlog", arity: -2, flags: flagAdmin | flagLoading,
			doc: &cmdDoc{"server", "A container for slow log commands: GET, LEN, RESET.", "2.2.12", "Depends on subcommand.", sub},
			fn:  cmdSlowlog},
		{name: "latency", arity: -2, flags: flagAdmin | flagLoading | flagNoScript,
			doc: &cmdDoc{"server", "A container for latency diagnostics commands: LATEST, HISTORY, RESET, DOCTOR.", "2.8.13", "Depends on subcommand.", sub},
			fn:  cmdLatency},
	}
}

// ROLE: every counterd node is a master of the keys it serves (a cluster
// node of its share of the ring; the tiered mode writes its store).
func cmdRole(s *Server, c *client, args [][]byte) {
	c.writeArray(3)
	c.writeBulkString("master")
	c.writeInt(0)
	c.writeArray(0)
}

// LASTSAVE: when the engine last made its state durable (its last
// flush), or the start when it has not yet.
func cmdLastSave(s *Server, c *client, args [][]byte) {
	c.writeInt(s.lastSave().Unix())
}

func (s *Server) lastSave() time.Time {
	if st := s.eng.Stats(); !st.LastFlush.IsZero() {
		return st.LastFlush
	}
	return s.started
}

// objectOf reads key for OBJECT and MEMORY USAGE: false when it answered
// (nil for a missing key, or the engine's error).
func objectOf(s *Server, c *client, key []byte) (contract.View, bool) {
	id := str(key)
	if contract.ValidateID(id) != nil {
		c.writeNull()
		return contract.View{}, false
	}
	v, err := s.eng.Get(c.ctx, id)
	switch {
	case err != nil:
		c.writeError(engineError(err))
		return v, false
	case !v.Exists:
		c.writeNull()
		return v, false
	}
	return v, true
}

// encodingOf is the encoding Redis would report for the value: integers
// ("int"), a float's text (a short string: "embstr"), an hll ("raw"), a
// hash ("listpack" up to Redis's hash-max-listpack-entries and -value,
// else "hashtable").
func encodingOf(v *contract.View) string {
	switch v.Kind {
	case contract.KindFloat:
		if len(v.Float) <= 44 {
			return "embstr"
		}
		return "raw"
	case contract.KindHLL:
		return "raw"
	case contract.KindHash:
		if len(v.Fields) > 128 {
			return "hashtable"
		}
		for _, f := range v.Fields {
			if len(f.Name) > 64 || len(f.Float) > 64 {
				return "hashtable"
			}
		}
		return "listpack"
	}
	return "int"
}

const errLFU = "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust."

// OBJECT ENCODING|FREQ|IDLETIME|REFCOUNT key, OBJECT HELP.
func cmdObject(s *Server, c *client, args [][]byte) {
	sub := args[1]
	if eqFold(sub, "help") {
		if len(args) != 2 {
			c.writeError(subArityError("object", "help"))
			return
		}
		writeHelp(c, "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
			"ENCODING <key>",
			"    Return the kind of internal representation used in order to store the value",
			"    associated with a <key>.",
			"FREQ <key>",
			"    Return the access frequency index of the <key>. The returned integer is",
			"    proportional to the logarithm of the recent access frequency of the key.",
			"IDLETIME <key>",
			"    Return the idle time of the <key>, that is the approximated number of",
			"    seconds elapsed since the last access to the key.",
			"REFCOUNT <key>",
			"    Return the number of references of the value associated with the specified",
			"    <key>.",
			"HELP",
			"    Prints this help.")
		return
	}
	name := ""
	for _, n := range []string{"encoding", "freq", "idletime", "refcount"} {
		if eqFold(sub, n) {
			name = n
		}
	}
	if name == "" {
		c.writeError(subcommandError(args))
		return
	}
	if len(args) != 3 {
		c.writeError(subArityError("object", name))
		return
	}
	v, ok := objectOf(s, c, args[2])
	if !ok {
		return
	}
	switch name {
	case "encoding":
		c.writeBulkString(encodingOf(&v))
	case "freq":
		c.writeError(errLFU) // maxmemory-policy is noeviction
	case "idletime":
		// counterd keeps no access time: the time since the last write.
		idle := int64(0)
		if !v.UpdatedAt.IsZero() {
			idle = max(int64(s.eng.Now().Sub(v.UpdatedAt)/time.Second), 0)
		}
		c.writeInt(idle)
	case "refcount":
		// Redis shares the integers 0..9999 (OBJ_SHARED_REFCOUNT).
		if v.Kind == contract.KindCounter && v.Value >= 0 && v.Value < 10000 {
			c.writeInt(math.MaxInt32)
		} else {
			c.writeInt(1)
		}
	}
}

// usageOf estimates the bytes a counter takes in memory: its id, a fixed
// overhead per entry, and its state (a float's text, hash fields, hll
// registers, shards, replica slots, window buckets).
func usageOf(v *contract.View) int64 {
	n := int64(48 + len(v.ID))
	switch v.Kind {
	case contract.KindFloat:
		n += int64(16 + len(v.Float))
	case contract.KindHash:
		for _, f := range v.Fields {
			n += int64(24 + len(f.Name) + len(f.Float))
		}
	case contract.KindHLL:
		p := v.Precision
		if p == 0 {
			p = 14
		}
		n += int64(1) << p
	case contract.KindSharded:
		n += int64(8 * len(v.Shards))
	case contract.KindPN:
		n += int64(24 * len(v.Replicas))
	case contract.KindWindow:
		n += int64(16 * len(v.Buckets))
	}
	if !v.ExpiresAt.IsZero() {
		n += 16
	}
	return n
}

// MEMORY USAGE key [SAMPLES count] | STATS | DOCTOR | HELP
func cmdMemory(s *Server, c *client, args [][]byte) {
	sub := args[1]
	switch {
	case eqFold(sub, "usage"):
		if len(args) < 3 {
			c.writeError(subArityError("memory", "usage"))
			return
		}
		for i := 3; i < len(args); i++ {
			if eqFold(args[i], "samples") && i+1 < len(args) {
				n, ok := parseInt(args[i+1])
				if !ok {
					c.writeError(errNotInteger)
					return
				}
				if n < 0 {
					c.writeError(errSyntax)
					return
				}
				i++
				continue
			}
			c.writeError(errSyntax)
			return
		}
		id := str(args[2])
		v, ok := objectOf(s, c, args[2])
		if !ok {
			return
		}
		v.ID = id
		c.writeInt(usageOf(&v))
	case eqFold(sub, "stats"):
		if len(args) != 2 {
			c.writeError(subArityError("memory", "stats"))
			return
		}
		m := s.memory()
		st := s.eng.Stats()
		perKey, dataset := int64(0), m.used-m.startup
		if dataset < 0 {
			dataset = 0
		}
		if st.Keys > 0 {
			perKey = dataset / int64(st.Keys)
		}
		ints := [][2]any{
			{"peak.allocated", m.peak}, {"total.allocated", m.used}, {"startup.allocated", m.startup},
			{"replication.backlog", 0}, {"clients.slaves", 0}, {"clients.normal", m.clients},
			{"cluster.links", 0}, {"aof.buffer", 0}, {"lua.caches", 0}, {"functions.caches", 0},
			{"overhead.total", m.startup + m.clients}, {"keys.count", st.Keys}, {"keys.bytes-per-key", perKey},
			{"dataset.bytes", dataset},
		}
		floats := [][2]any{
			{"dataset.percentage", pct(dataset, m.used)}, {"peak.percentage", pct(m.used, m.peak)},
		}
		more := [][2]any{
			{"allocator.allocated", m.objects}, {"allocator.active", m.active}, {"allocator.resident", m.rss},
		}
		c.writeMap(len(ints) + len(floats) + len(more) + 2)
		for _, kv := range ints {
			c.writeBulkString(kv[0].(string))
			c.writeInt(toInt64(kv[1]))
		}
		for _, kv := range floats {
			c.writeBulkString(kv[0].(string))
			c.writeDouble(kv[1].(float64))
		}
		for _, kv := range more {
			c.writeBulkString(kv[0].(string))
			c.writeInt(toInt64(kv[1]))
		}
		c.writeBulkString("fragmentation")
		c.writeDouble(ratio(m.rss, m.used))
		c.writeBulkString("fragmentation.bytes")
		c.writeInt(m.rss - m.used)
	case eqFold(sub, "doctor"):
		if len(args) != 2 {
			c.writeError(subArityError("memory", "doctor"))
			return
		}
		c.writeVerbatim(s.memoryDoctor())
	case eqFold(sub, "malloc-stats"):
		if len(args) != 2 {
			c.writeError(subArityError("memory", "malloc-stats"))
			return
		}
		c.writeVerbatim(mallocStats())
	case eqFold(sub, "purge"):
		if len(args) != 2 {
			c.writeError(subArityError("memory", "purge"))
			return
		}
		debug.FreeOSMemory() // Redis: jemalloc's purge of dirty pages
		c.writeOK()
	case eqFold(sub, "help"):
		if len(args) != 2 {
			c.writeError(subArityError("memory", "help"))
			return
		}
		writeHelp(c, "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
			"DOCTOR",
			"    Return memory problems reports.",
			"MALLOC-STATS",
			"    Return internal statistics report from the memory allocator.",
			"PURGE",
			"    Attempt to purge dirty pages for reclamation by the allocator.",
			"STATS",
			"    Return information about the memory usage of the server.",
			"USAGE <key> [SAMPLES <count>]",
			"    Return memory in bytes used by <key> and its value. Nested values are",
			"    sampled up to <count> times (default: 5, 0 means sample all).",
			"HELP",
			"    Prints this help.")
	default:
		c.writeError(subcommandError(args))
	}
}

func toInt64(x any) int64 {
	switch v := x.(type) {
	case int:
		return int64(v)
	case int64:
		return v
	}
	return 0
}

func pct(a, b int64) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) * 100 / float64(b)
}

func ratio(a, b int64) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// memoryDoctor reports what Redis's doctor would look for that counterd
// has: a memory limit nearly reached, and a resident size far above what
// the runtime uses.
func (s *Server) memoryDoctor() string {
	m := s.memory()
	if m.used < 5<<20 {
		return "Hi Sam, this instance is empty or is using very little memory, my issues detector can't be used in these conditions. Please, leave for your mission on Earth and fill it with some data. The new Sam and I will be back to our programming as soon as I finished rebooting."
	}
	var issues []string
	if m.limit > 0 && m.used > m.limit*9/10 {
		issues = append(issues, fmt.Sprintf(" * Memory limit: counterd uses %s of its %s limit (--memory-limit, GOMEMLIMIT); the Go runtime collects garbage more often as it gets near.", human(m.used), human(m.limit)))
	}
	if m.rss > 0 && m.used > 0 && float64(m.rss)/float64(m.used) > 1.4 {
		issues = append(issues, fmt.Sprintf(" * High RSS overhead: the resident size (%s) is %.2f times what the runtime uses (%s); freed memory is returned to the system over time.", human(m.rss), float64(m.rss)/float64(m.used), human(m.used)))
	}
	if len(issues) == 0 {
		return "Hi Sam, I can't find any memory issue in your instance. I can only account for what occurs on this base."
	}
	return "Sam, I detected a few issues in this counterd instance memory implants:\n\n" + strings.Join(issues, "\n\n") + "\n\nI'm here to keep you safe, Sam. I want to help you.\n"
}

// SLOWLOG GET [count] | LEN | RESET | HELP
func cmdSlowlog(s *Server, c *client, args [][]byte) {
	sub := args[1]
	l := &s.slow
	switch {
	case eqFold(sub, "get"):
		if len(args) > 3 { // Redis: GET takes -2 arguments, and then this
			c.writeError("ERR unknown subcommand or wrong number of arguments for '" + string(truncate(args[1], 128)) + "'. Try SLOWLOG HELP.")
			return
		}
		count := int64(10)
		if len(args) == 3 {
			n, ok := parseInt(args[2])
			if !ok || n < -1 {
				c.writeError("ERR count should be greater than or equal to -1")
				return
			}
			count = n
		}
		es := l.newest(count)
		c.writeArray(len(es))
		for _, e := range es {
			c.writeArray(6)
			c.writeInt(e.id)
			c.writeInt(e.at)
			c.writeInt(e.usec)
			c.writeArray(len(e.args))
			for _, a := range e.args {
				c.writeBulkString(a)
			}
			c.writeBulkString(e.addr)
			c.writeBulkString(e.name)
		}
	case eqFold(sub, "len"):
		if len(args) != 2 {
			c.writeError(subArityError("slowlog", "len"))
			return
		}
		c.writeInt(int64(l.len()))
	case eqFold(sub, "reset"):
		if len(args) != 2 {
			c.writeError(subArityError("slowlog", "reset"))
			return
		}
		l.mu.Lock()
		l.entries = nil
		l.mu.Unlock()
		c.writeOK()
	case eqFold(sub, "help"):
		if len(args) != 2 {
			c.writeError(subArityError("slowlog", "help"))
			return
		}
		writeHelp(c, "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
			"GET [<count>]",
			"    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
			"    Entries are made of:",
			"    id, timestamp, time in microseconds, arguments array, client IP and port,",
			"    client name",
			"LEN",
			"    Return the length of the slowlog.",
			"RESET",
			"    Reset the slowlog.",
			"HELP",
			"    Prints this help.")
	default:
		c.writeError(subcommandError(args))
	}
}

// LATENCY LATEST | HISTORY event | RESET [event ...] | DOCTOR | GRAPH
// event | HISTOGRAM [command ...] | HELP: counterd has no latency monitor
// (Redis's latency-monitor-threshold is 0, monitoring off), so there are
// no events: the replies Redis gives then. HISTOGRAM answers each
// command's calls and its latency distribution from the Prometheus
// histogram counterd_resp_command_duration_seconds.
func cmdLatency(s *Server, c *client, args [][]byte) {
	sub := args[1]
	switch {
	case eqFold(sub, "latest"):
		if len(args) != 2 {
			c.writeError(subArityError("latency", "latest"))
			return
		}
		c.writeArray(0)
	case eqFold(sub, "history"):
		if len(args) != 3 {
			c.writeError(subArityError("latency", "history"))
			return
		}
		c.writeArray(0)
	case eqFold(sub, "reset"):
		c.writeInt(0)
	case eqFold(sub, "histogram"):
		s.latencyHistogram(c, args[2:])
	case eqFold(sub, "graph"):
		if len(args) != 3 {
			c.writeError(subArityError("latency", "graph"))
			return
		}
		c.writeError("ERR No samples available for event '" + string(truncate(args[2], 128)) + "'")
	case eqFold(sub, "doctor"):
		if len(args) != 2 {
			c.writeError(subArityError("latency", "doctor"))
			return
		}
		c.writeVerbatim("I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Redis instance. You may use \"CONFIG SET latency-monitor-threshold <milliseconds>.\" in order to enable it. If we weren't in a deep space mission I'd suggest to take a look at https://redis.io/topics/latency-monitor.\n")
	case eqFold(sub, "help"):
		if len(args) != 2 {
			c.writeError(subArityError("latency", "help"))
			return
		}
		writeHelp(c, "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
			"DOCTOR",
			"    Return a human readable latency analysis report.",
			"GRAPH <event>",
			"    Return an ASCII latency graph for the <event> class.",
			"HISTORY <event>",
			"    Return time-latency samples for the <event> class.",
			"LATEST",
			"    Return the latest latency samples for all events.",
			"RESET [<event> ...]",
			"    Reset latency data of one or more <event> classes.",
			"    (default: reset all data for all event classes)",
			"HISTOGRAM [COMMAND ...]",
			"    Return a cumulative distribution of latencies in the format of a histogram for the specified command names.",
			"    If no commands are specified then all histograms are replied.",
			"HELP",
			"    Prints this help.")
	default:
		c.writeError(subcommandError(args))
	}
}

// mallocStats is MEMORY MALLOC-STATS: the Go runtime's memory classes
// (Redis: jemalloc's report).
func mallocStats() string {
	descs := rtmetrics.All()
	var ss []rtmetrics.Sample
	for _, d := range descs {
		if strings.HasPrefix(d.Name, "/memory/classes/") || strings.HasPrefix(d.Name, "/gc/heap/") {
			if d.Kind == rtmetrics.KindUint64 {
				ss = append(ss, rtmetrics.Sample{Name: d.Name})
			}
		}
	}
	rtmetrics.Read(ss)
	var b strings.Builder
	b.WriteString("___ Begin Go runtime memory statistics ___\n")
	for _, x := range ss {
		fmt.Fprintf(&b, "%s %d\n", x.Name, x.Value.Uint64())
	}
	b.WriteString("--- End Go runtime memory statistics ---\n")
	return b.String()
}

// memFigures are the memory figures INFO and MEMORY STATS report.
type memFigures struct {
	used, peak, startup, rss, objects, active, limit, clients, system int64
}

var memSamples = []rtmetrics.Sample{
	{Name: "/memory/classes/total:bytes"},
	{Name: "/memory/classes/heap/released:bytes"},
	{Name: "/memory/classes/heap/free:bytes"},
	{Name: "/memory/classes/heap/objects:bytes"},
}

// usedMemory reads the runtime's figures (no stop of the world):
// used is every byte the runtime has mapped and not released or kept
// free (heap objects and their spans' slack, stacks, runtime metadata,
// the engine's state); objects the live heap objects; active what is
// mapped and not released.
func usedMemory() (used, objects, active int64) {
	ss := make([]rtmetrics.Sample, len(memSamples))
	copy(ss, memSamples)
	rtmetrics.Read(ss)
	v := func(i int) int64 {
		if ss[i].Value.Kind() != rtmetrics.KindUint64 {
			return 0
		}
		return int64(ss[i].Value.Uint64())
	}
	total, released, free, objs := v(0), v(1), v(2), v(3)
	return total - released - free, objs, total - released
}

func (s *Server) memory() memFigures {
	var m memFigures
	m.used, m.objects, m.active = usedMemory()
	for {
		p := s.peakMem.Load()
		if uint64(m.used) <= p || s.peakMem.CompareAndSwap(p, uint64(m.used)) {
			break
		}
	}
	m.peak = int64(s.peakMem.Load())
	m.startup = s.startMem
	m.rss = residentBytes()
	if m.rss == 0 {
		m.rss = m.active
	}
	if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
		m.limit = l
	}
	m.clients = s.nconns.Load() * int64(minReadBuf)
	m.system = systemMemory()
	return m
}

// residentBytes is the process's resident set size (Linux: /proc), 0
// where unknown.
func residentBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}

// systemMemory is the machine's memory (Linux: /proc/meminfo), 0 where
// unknown.
func systemMemory() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb * 1024
			}
		}
	}
	return 0
}

// human formats bytes as Redis's bytesToHuman does.
func human(n int64) string {
	d := float64(n)
	switch {
	case n < 1024:
		return strconv.FormatInt(n, 10) + "B"
	case n < 1<<20:
		return fmt.Sprintf("%.2fK", d/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.2fM", d/(1<<20))
	case n < 1<<40:
		return fmt.Sprintf("%.2fG", d/(1<<30))
	case n < 1<<50:
		return fmt.Sprintf("%.2fT", d/(1<<40))
	}
	return fmt.Sprintf("%.2fP", d/(1<<50))
}

// infoSections are INFO's sections in Redis's order; def marks the ones
// INFO and INFO default give, all the ones INFO all adds.
var infoSections = []struct {
	name string
	def  bool
}{
	{"server", true}, {"clients", true}, {"memory", true}, {"persistence", true}, {"stats", true},
	{"replication", true}, {"cpu", true}, {"modules", true}, {"commandstats", false}, {"errorstats", true},
	{"cluster", true}, {"keyspace", true},
}

// INFO [section ...]: Redis 7's sections and field names, with
// counterd's figures; fields of features counterd does not have (forks,
// AOF rewrites, pub/sub, eviction) are 0 as in a Redis that does not use
// them, and counterd's own figures are named counterd_*.
func cmdInfo(s *Server, c *client, args [][]byte) {
	want := map[string]bool{}
	if len(args) == 1 {
		want["default"] = true
	}
	for _, a := range args[1:] {
		want[strings.ToLower(string(a))] = true
	}
	all := want["all"] || want["everything"]
	var b strings.Builder
	kv := func(k string, v any) { fmt.Fprintf(&b, "%s:%v\r\n", k, v) }
	st := s.eng.Stats()
	for _, sec := range infoSections {
		if !want[sec.name] && !all && !(sec.def && want["default"]) {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		title := strings.ToUpper(sec.name[:1]) + sec.name[1:]
		if sec.name == "cpu" {
			title = "CPU"
		}
		b.WriteString("# " + title + "\r\n")
		switch sec.name {
		case "server":
			up := time.Since(s.started)
			exe, _ := os.Executable()
			kv("redis_version", RedisVersion)
			kv("redis_git_sha1", "00000000")
			kv("redis_git_dirty", 0)
			kv("redis_mode", "standalone")
			kv("os", runtime.GOOS+" "+runtime.GOARCH)
			kv("arch_bits", strconv.Itoa(strconv.IntSize))
			kv("multiplexing_api", "epoll")
			kv("process_id", os.Getpid())
			kv("process_supervised", "no")
			kv("run_id", s.runID)
			kv("tcp_port", s.port())
			kv("server_time_usec", time.Now().UnixMicro())
			kv("uptime_in_seconds", int64(up/time.Second))
			kv("uptime_in_days", int64(up/(24*time.Hour)))
			kv("executable", exe)
			kv("config_file", "")
			kv("io_threads_active", 0)
			kv("counterd_version", s.opts.Version)
			kv("counterd_mode", s.eng.Capabilities().Mode)
			kv("go_version", runtime.Version())
		case "clients":
			kv("connected_clients", s.nconns.Load())
			kv("cluster_connections", 0)
			kv("maxclients", s.opts.MaxConns)
			kv("blocked_clients", 0)
			kv("tracking_clients", 0)
			kv("clients_in_timeout_table", 0)
		case "memory":
			m := s.memory()
			kv("used_memory", m.used)
			kv("used_memory_human", human(m.used))
			kv("used_memory_rss", m.rss)
			kv("used_memory_rss_human", human(m.rss))
			kv("used_memory_peak", m.peak)
			kv("used_memory_peak_human", human(m.peak))
			kv("used_memory_peak_perc", fmt.Sprintf("%.2f%%", pct(m.used, m.peak)))
			kv("used_memory_startup", m.startup)
			kv("used_memory_dataset", max(m.used-m.startup, 0))
			kv("allocator_allocated", m.objects)
			kv("allocator_active", m.active)
			kv("allocator_resident", m.rss)
			kv("total_system_memory", m.system)
			kv("total_system_memory_human", human(m.system))
			kv("number_of_cached_scripts", s.lua.cached())
			kv("maxmemory", m.limit)
			kv("maxmemory_human", human(m.limit))
			kv("maxmemory_policy", "noeviction")
			kv("mem_fragmentation_ratio", fmt.Sprintf("%.2f", ratio(m.rss, m.used)))
			kv("mem_fragmentation_bytes", m.rss-m.used)
			kv("mem_allocator", "go-"+runtime.Version())
		case "persistence":
			last := s.lastSave().Unix()
			status := "ok"
			if s.eng.Ready() != nil {
				status = "err"
			}
			kv("loading", 0)
			kv("async_loading", 0)
			kv("rdb_changes_since_last_save", st.DirtyKeys)
			kv("rdb_bgsave_in_progress", 0)
			kv("rdb_last_save_time", last)
			kv("rdb_last_bgsave_status", status)
			kv("rdb_saves", st.Flushes)
			kv("aof_enabled", 0)
			kv("aof_rewrite_in_progress", 0)
			kv("aof_last_write_status", status)
			kv("counterd_flushes", st.Flushes)
			kv("counterd_flush_failures", st.FlushFailures)
			lf := int64(0)
			if !st.LastFlush.IsZero() {
				lf = st.LastFlush.Unix()
			}
			kv("counterd_last_flush_time", lf)
			kv("counterd_dirty_keys", st.DirtyKeys)
		case "stats":
			cmds := s.totalCmds.Load()
			kv("total_connections_received", s.totalConns.Load())
			kv("total_commands_processed", cmds)
			kv("instantaneous_ops_per_sec", s.ops.sample(nanotime(), cmds))
			kv("rejected_connections", s.rejectedConns.Load())
			kv("expired_keys", 0)
			kv("evicted_keys", 0)
			kv("keyspace_hits", s.hits.Load())
			kv("keyspace_misses", s.misses.Load())
			kv("pubsub_channels", 0)
			kv("pubsub_patterns", 0)
			kv("total_forks", 0)
			kv("total_error_replies", s.errStats.total.Load())
			kv("total_protocol_errors", s.protoErrors.Load())
			kv("counterd_engine_ops", st.Ops)
			kv("counterd_flushes", st.Flushes)
			lf := int64(0)
			if !st.LastFlush.IsZero() {
				lf = st.LastFlush.Unix()
			}
			kv("counterd_last_flush_time", lf)
			kv("counterd_dirty_keys", st.DirtyKeys)
			kv("counterd_idempotency_records", st.IdemRecords)
		case "replication":
			kv("role", "master")
			kv("connected_slaves", 0)
			kv("master_failover_state", "no-failover")
			kv("master_replid", s.replID)
			kv("master_replid2", strings.Repeat("0", 40))
			kv("master_repl_offset", 0)
			kv("second_repl_offset", -1)
			kv("repl_backlog_active", 0)
			kv("repl_backlog_size", 0)
			kv("repl_backlog_first_byte_offset", 0)
			kv("repl_backlog_histlen", 0)
		case "cpu":
			sys, user, csys, cuser := cpuTimes()
			kv("used_cpu_sys", fmt.Sprintf("%.6f", sys))
			kv("used_cpu_user", fmt.Sprintf("%.6f", user))
			kv("used_cpu_sys_children", fmt.Sprintf("%.6f", csys))
			kv("used_cpu_user_children", fmt.Sprintf("%.6f", cuser))
		case "modules":
		case "commandstats":
			for _, st := range s.allStats() {
				calls := st.calls.Load()
				rej, failed := st.rejected.Load(), st.failed.Load()
				if calls == 0 && rej == 0 && failed == 0 {
					continue
				}
				usec := st.ns.Load() / 1000
				per := 0.0
				if calls > 0 {
					per = float64(st.ns.Load()) / 1000 / float64(calls)
				}
				fmt.Fprintf(&b, "cmdstat_%s:calls=%d,usec=%d,usec_per_call=%.2f,rejected_calls=%d,failed_calls=%d\r\n",
					st.name, calls, usec, per, rej, failed)
			}
		case "errorstats":
			s.errStats.mu.Lock()
			codes := make([]string, 0, len(s.errStats.codes))
			for code := range s.errStats.codes {
				codes = append(codes, code)
			}
			sort.Strings(codes)
			for _, code := range codes {
				fmt.Fprintf(&b, "errorstat_%s:count=%d\r\n", code, s.errStats.codes[code])
			}
			s.errStats.mu.Unlock()
		case "cluster":
			kv("cluster_enabled", 0)
		case "keyspace":
			if st.Keys > 0 {
				fmt.Fprintf(&b, "db0:keys=%d,expires=%d,avg_ttl=0\r\n", st.Keys, st.Expires)
			}
		}
	}
	c.writeVerbatim(b.String())
}

// allStats is every command's and subcommand's figures, by name.
func (s *Server) allStats() []*cmdStats {
	var out []*cmdStats
	for _, cmd := range s.cmds {
		out = append(out, &cmd.stats)
		for _, st := range cmd.subs {
			out = append(out, st)
		}
	}
	out = append(out, &s.unknown.stats)
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// resetStats is CONFIG RESETSTAT's: every figure INFO counts, and the
// slow log is kept (as Redis keeps it).
func (s *Server) resetStats() {
	s.totalCmds.Store(0)
	s.totalConns.Store(0)
	s.rejectedConns.Store(0)
	s.protoErrors.Store(0)
	s.hits.Store(0)
	s.misses.Store(0)
	s.errStats.reset()
	for _, st := range s.allStats() {
		st.reset()
	}
	u, _, _ := usedMemory()
	s.peakMem.Store(uint64(u))
}

// overflowUsec is LATENCY HISTOGRAM's key for the calls slower than the
// histogram's last bound (1 s).
const overflowUsec = math.MaxInt32

// latencyHistogram is LATENCY HISTOGRAM [command ...]: a map of each
// command (every one with calls when none is named; unknown names are
// left out, as in Redis) to its calls and histogram_usec, the cumulative
// count of calls at each bucket bound in microseconds where the count
// grows (Redis: powers of two; counterd: the Prometheus histogram's
// bounds). Without metrics commands are not timed: the map is empty.
func (s *Server) latencyHistogram(c *client, names [][]byte) {
	var cmds []*command
	if len(names) == 0 {
		for _, cmd := range s.sortedCommands() {
			if cmd.stats.calls.Load() > 0 {
				cmds = append(cmds, cmd)
			}
		}
	} else {
		seen := map[*command]bool{}
		for _, n := range names {
			cmd := s.cmds[strings.ToLower(string(n))]
			if cmd != nil && !seen[cmd] && cmd.stats.calls.Load() > 0 {
				seen[cmd] = true
				cmds = append(cmds, cmd)
			}
		}
	}
	c.writeMap(len(cmds))
	for _, cmd := range cmds {
		type bucket struct{ usec, n int64 }
		var bs []bucket
		if m, ok := cmd.dur.(prometheus.Metric); ok {
			var d dto.Metric
			if m.Write(&d) == nil && d.Histogram != nil {
				prev := int64(0)
				for _, b := range d.Histogram.Bucket {
					if n := int64(b.GetCumulativeCount()); n > prev {
						bs = append(bs, bucket{int64(math.Round(b.GetUpperBound() * 1e6)), n})
						prev = n
					}
				}
				if n := int64(d.Histogram.GetSampleCount()); n > prev {
					bs = append(bs, bucket{overflowUsec, n})
				}
			}
		}
		c.writeBulkString(cmd.name)
		c.writeMap(2)
		c.writeBulkString("calls")
		c.writeInt(int64(cmd.stats.calls.Load()))
		c.writeBulkString("histogram_usec")
		c.writeMap(len(bs))
		for _, b := range bs {
			c.writeInt(b.usec)
			c.writeInt(b.n)
		}
	}
}
