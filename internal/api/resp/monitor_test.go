package resp_test

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/counterd/counterd/internal/api/resp"
	"github.com/counterd/counterd/internal/testutil/redistest"
)

// TestMonitorCompat sends the monitoring commands whose replies do not
// depend on the server's own figures to counterd and redis-server, in
// RESP2 and RESP3, and requires the same bytes.
func TestMonitorCompat(t *testing.T) {
	ts := start(t, resp.Options{AllowFlush: true})
	real := redistest.New(t)
	seq := [][]string{
		{"SET", "c", "5"}, {"SET", "big", "123456789012"}, {"INCRBYFLOAT", "f", "1.5"}, {"PFADD", "h", "a"}, {"HSET", "hh", "a", "1"},
		{"OBJECT", "ENCODING", "c"}, {"OBJECT", "ENCODING", "big"}, {"OBJECT", "ENCODING", "f"}, {"OBJECT", "ENCODING", "h"},
		{"OBJECT", "ENCODING", "hh"}, {"OBJECT", "ENCODING", "nope"}, {"OBJECT", "REFCOUNT", "c"}, {"OBJECT", "REFCOUNT", "big"},
		{"OBJECT", "REFCOUNT", "hh"}, {"OBJECT", "REFCOUNT", "nope"}, {"OBJECT", "FREQ", "c"}, {"OBJECT", "FREQ", "nope"},
		{"OBJECT", "IDLETIME", "nope"}, {"OBJECT", "HELP"}, {"OBJECT"}, {"OBJECT", "FOO"}, {"OBJECT", "ENCODING"},
		{"OBJECT", "ENCODING", "c", "x"}, {"OBJECT", "help", "x"},
		{"ROLE"}, {"ROLE", "x"}, {"LASTSAVE", "x"},
		{"MEMORY", "HELP"}, {"MEMORY", "USAGE"}, {"MEMORY", "USAGE", "nope"}, {"MEMORY", "USAGE", "c", "SAMPLES"},
		{"MEMORY", "USAGE", "c", "SAMPLES", "x"}, {"MEMORY", "USAGE", "c", "SAMPLES", "5", "x"}, {"MEMORY", "USAGE", "c", "FOO", "1"},
		{"MEMORY", "STATS", "x"}, {"MEMORY", "FOO"}, {"MEMORY", "PURGE"}, {"MEMORY", "DOCTOR", "x"},
		{"SLOWLOG", "HELP"}, {"SLOWLOG", "LEN", "x"}, {"SLOWLOG", "GET", "x"}, {"SLOWLOG", "GET", "-2"}, {"SLOWLOG", "FOO"},
		{"SLOWLOG", "RESET"}, {"SLOWLOG", "GET", "1", "2"},
		{"LATENCY", "LATEST"}, {"LATENCY", "HISTORY", "command"}, {"LATENCY", "HISTORY"}, {"LATENCY", "RESET"},
		{"LATENCY", "RESET", "a", "b"}, {"LATENCY", "DOCTOR"}, {"LATENCY", "GRAPH", "command"}, {"LATENCY", "FOO"},
		{"LATENCY", "HELP"}, {"LATENCY", "HISTOGRAM", "nosuchcommand"}, {"LATENCY", "HISTOGRAM", "pfmerge"},
		{"CONFIG", "GET", "slowlog-max-len"}, {"CONFIG", "GET", "slowlog-log-slower-than"}, {"CONFIG", "GET", "latency-monitor-threshold"},
		{"CONFIG", "GET", "maxmemory-policy"},
		{"CONFIG", "SET", "slowlog-max-len", "64"}, {"CONFIG", "GET", "slowlog-max-len"}, {"CONFIG", "SET", "slowlog-max-len", "128"},
		{"CONFIG", "SET", "slowlog-log-slower-than", "x"},
		{"INFO", "nosuchsection"}, {"INFO", "modules"}, {"INFO", "cluster"},
	}
	for _, proto := range []string{"2", "3"} {
		t.Run("resp"+proto, func(t *testing.T) {
			c, r := dialRaw(t, ts.addr), dialRaw(t, real.Addr)
			for _, x := range []*rawConn{c, r} {
				rawDo(x, "HELLO", proto)
				rawDo(x, "FLUSHALL")
			}
			for _, args := range seq {
				got, want := rawDo(c, args...), rawDo(r, args...)
				if got != want {
					t.Errorf("%q\n  counterd: %q\n  redis:    %q", args, got, want)
				}
			}
			// HELLO's version is the release compared with here.
			for _, x := range []*rawConn{c, r} {
				rawDo(x, "CLIENT", "SETNAME", "mon")
			}
			hello := func(x *rawConn) string {
				out := rawDo(x, "HELLO", proto)
				i := strings.Index(out, "version")
				return out[i : i+strings.Index(out[i:], "proto")]
			}
			if got, want := hello(c), hello(r); got != want {
				t.Errorf("HELLO version: counterd %q, redis %q", got, want)
			}
			// CLIENT INFO: the protocol, the last command, a real fd.
			fields := func(x *rawConn) map[string]string {
				out := rawDo(x, "CLIENT", "INFO")
				if proto == "3" && !strings.HasPrefix(out, "=") {
					t.Errorf("CLIENT INFO in RESP3 is not a verbatim string: %q", out)
				}
				m := map[string]string{}
				for _, f := range strings.Fields(out[strings.Index(out, "id="):]) {
					if k, v, ok := strings.Cut(f, "="); ok {
						m[k] = v
					}
				}
				return m
			}
			got, want := fields(c), fields(r)
			for _, k := range []string{"resp", "cmd", "name", "db", "flags", "multi", "user"} {
				if got[k] != want[k] {
					t.Errorf("CLIENT INFO %s: counterd %q, redis %q", k, got[k], want[k])
				}
			}
			if fd, err := strconv.Atoi(got["fd"]); err != nil || fd <= 2 {
				t.Errorf("CLIENT INFO fd=%q, want a socket's descriptor", got["fd"])
			}
		})
	}
}

// infoFields parses INFO's text into section -> field -> value.
func infoFields(text string) map[string]map[string]string {
	out := map[string]map[string]string{}
	var sec map[string]string
	for _, l := range strings.Split(text, "\r\n") {
		if name, ok := strings.CutPrefix(l, "# "); ok {
			sec = map[string]string{}
			out[name] = sec
			continue
		}
		if k, v, ok := strings.Cut(l, ":"); ok && sec != nil {
			sec[k] = v
		}
	}
	return out
}

// TestInfoSections: INFO's default and "all" sections are Redis's, each
// with the fields exporters read under Redis's names, and the figures
// move with what the server does.
func TestInfoSections(t *testing.T) {
	ts := start(t, resp.Options{AllowFlush: true, Registerer: prometheus.NewRegistry()})
	real := redistest.New(t)
	c, r := dialRaw(t, ts.addr), dialRaw(t, real.Addr)
	info := func(x *rawConn, args ...string) map[string]map[string]string {
		out := rawDo(x, append([]string{"INFO"}, args...)...)
		return infoFields(out[strings.Index(out, "\r\n")+2:])
	}
	headers := func(m map[string]map[string]string) string {
		var hs []string
		for h := range m {
			hs = append(hs, h)
		}
		return fmt.Sprint(sortStrings(hs))
	}
	for _, args := range [][]string{nil, {"default"}, {"server", "keyspace"}, {"STATS"}} {
		got, want := info(c, args...), info(r, args...)
		if headers(got) != headers(want) {
			t.Errorf("INFO %q sections: counterd %s, redis %s", args, headers(got), headers(want))
		}
	}
	fields := map[string][]string{
		"Server":      {"redis_version", "redis_mode", "os", "arch_bits", "process_id", "run_id", "tcp_port", "uptime_in_seconds", "uptime_in_days", "executable"},
		"Clients":     {"connected_clients", "maxclients", "blocked_clients"},
		"Memory":      {"used_memory", "used_memory_human", "used_memory_rss", "used_memory_rss_human", "used_memory_peak", "used_memory_startup", "maxmemory", "maxmemory_human", "maxmemory_policy", "mem_fragmentation_ratio", "total_system_memory"},
		"Persistence": {"loading", "rdb_changes_since_last_save", "rdb_last_save_time", "rdb_last_bgsave_status", "aof_enabled"},
		"Stats":       {"total_connections_received", "total_commands_processed", "instantaneous_ops_per_sec", "rejected_connections", "keyspace_hits", "keyspace_misses", "evicted_keys", "expired_keys", "total_error_replies"},
		"Replication": {"role", "connected_slaves", "master_replid", "master_repl_offset"},
		"CPU":         {"used_cpu_sys", "used_cpu_user", "used_cpu_sys_children", "used_cpu_user_children"},
		"Cluster":     {"cluster_enabled"},
	}
	got, want := info(c, "everything"), info(r, "everything")
	for sec, fs := range fields {
		for _, f := range fs {
			if _, ok := want[sec][f]; !ok {
				t.Fatalf("redis-server's INFO %s has no %s: the list is wrong", sec, f)
			}
			if _, ok := got[sec][f]; !ok {
				t.Errorf("INFO %s has no %s", sec, f)
			}
		}
	}
	if got["Server"]["redis_version"] != want["Server"]["redis_version"] {
		t.Errorf("redis_version %q, redis-server %q", got["Server"]["redis_version"], want["Server"]["redis_version"])
	}
	for _, f := range []string{"used_memory", "used_memory_rss", "used_memory_peak"} {
		if n, err := strconv.ParseInt(got["Memory"][f], 10, 64); err != nil || n < 1<<20 {
			t.Errorf("%s = %q, want the runtime's figure", f, got["Memory"][f])
		}
	}
	if got["Replication"]["role"] != "master" || got["Server"]["counterd_mode"] != "embedded" {
		t.Errorf("role %q, counterd_mode %q", got["Replication"]["role"], got["Server"]["counterd_mode"])
	}

	// Figures that follow the commands: hits, misses, commandstats,
	// errorstats, keyspace.
	rawDo(c, "CONFIG", "RESETSTAT")
	before := info(c, "stats")["Stats"]
	rawDo(c, "SET", "a", "1")
	rawDo(c, "EXPIRE", "a", "100")
	rawDo(c, "GET", "a")
	rawDo(c, "GET", "nope")
	rawDo(c, "MGET", "a", "nope", "nope2")
	rawDo(c, "HGET", "a", "f") // WRONGTYPE
	rawDo(c, "INCRBY", "a")    // arity: rejected
	rawDo(c, "CLIENT", "LIST") // a subcommand
	rawDo(c, "NOSUCHCMD", "x") // ERR
	after := info(c, "everything")
	num := func(m map[string]string, k string) int64 {
		n, _ := strconv.ParseInt(m[k], 10, 64)
		return n
	}
	if h, m := num(after["Stats"], "keyspace_hits")-num(before, "keyspace_hits"), num(after["Stats"], "keyspace_misses")-num(before, "keyspace_misses"); h != 2 || m != 3 {
		t.Errorf("keyspace hits %d misses %d, want 2 and 3", h, m)
	}
	if n := num(after["Stats"], "total_commands_processed"); n < 9 {
		t.Errorf("total_commands_processed %d after 9 commands", n)
	}
	cs := after["Commandstats"]
	for k, want := range map[string]*regexp.Regexp{
		"cmdstat_get":         regexp.MustCompile(`^calls=2,usec=\d+,usec_per_call=\d+\.\d\d,rejected_calls=0,failed_calls=0$`),
		"cmdstat_hget":        regexp.MustCompile(`^calls=1,.*,rejected_calls=0,failed_calls=1$`),
		"cmdstat_incrby":      regexp.MustCompile(`^calls=0,.*,rejected_calls=1,failed_calls=0$`),
		"cmdstat_client|list": regexp.MustCompile(`^calls=1,`),
	} {
		if !want.MatchString(cs[k]) {
			t.Errorf("%s:%s, want %s", k, cs[k], want)
		}
	}
	es := after["Errorstats"]
	if es["errorstat_WRONGTYPE"] != "count=1" || es["errorstat_ERR"] != "count=2" {
		t.Errorf("errorstats %v", es)
	}
	if ks := after["Keyspace"]["db0"]; ks != "keys=1,expires=1,avg_ttl=0" {
		t.Errorf("keyspace db0:%s", ks)
	}
	// instantaneous_ops_per_sec: the rate between two INFO calls at least
	// 100 ms apart, so positive once commands ran in between (polled:
	// how long the calls take depends on the machine's load).
	deadline := time.Now().Add(10 * time.Second)
	for {
		for i := 0; i < 50; i++ {
			rawDo(c, "PING")
		}
		time.Sleep(150 * time.Millisecond)
		if num(info(c, "stats")["Stats"], "instantaneous_ops_per_sec") > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("instantaneous_ops_per_sec stayed 0 under commands")
		}
	}
	// LATENCY HISTOGRAM: Redis's shape, the calls, a cumulative
	// distribution ending at the calls (RESP2: flat pairs).
	h := rawDo(c, "LATENCY", "HISTOGRAM", "get", "nosuchcommand")
	if !regexp.MustCompile(`^\*2\r\n\$3\r\nget\r\n\*4\r\n\$5\r\ncalls\r\n:2\r\n\$14\r\nhistogram_usec\r\n\*\d+\r\n(:\d+\r\n:[12]\r\n)*:\d+\r\n:2\r\n$`).MatchString(h) {
		t.Errorf("LATENCY HISTOGRAM get nosuchcommand = %q", h)
	}
	// CLIENT LIST names the last command of each connection.
	other := dialRaw(t, ts.addr)
	rawDo(other, "HELLO", "3")
	rawDo(other, "PING")
	list := rawDo(c, "CLIENT", "LIST")
	if !regexp.MustCompile(`fd=\d+ .*cmd=ping .*resp=3`).MatchString(list) || !strings.Contains(list, "cmd=client|list") {
		t.Errorf("CLIENT LIST:\n%s", list)
	}
}

// TestSlowlog: with slowlog-log-slower-than 0 every command is logged,
// newest first, with Redis's entry shape and argument limits.
func TestSlowlog(t *testing.T) {
	ts := start(t, resp.Options{Registerer: prometheus.NewRegistry()})
	c := dialRaw(t, ts.addr)
	rawDo(c, "CLIENT", "SETNAME", "slowpoke")
	if got := rawDo(c, "CONFIG", "SET", "slowlog-log-slower-than", "0"); got != "+OK\r\n" {
		t.Fatalf("CONFIG SET = %q", got)
	}
	rawDo(c, "SLOWLOG", "RESET")
	long := strings.Repeat("x", 200)
	many := []string{"MGET"}
	for i := 0; i < 40; i++ {
		many = append(many, "k"+strconv.Itoa(i))
	}
	rawDo(c, "SET", "k", "1")
	rawDo(c, "ECHO", long)
	rawDo(c, many...)
	rawDo(c, "AUTH", "secret") // never logged
	got := rawDo(c, "SLOWLOG", "GET", "3")
	for _, want := range []string{
		"*3\r\n*6\r\n:", // three entries of six fields
		"*32\r\n$4\r\nMGET\r\n", "$23\r\n... (10 more arguments)\r\n",
		"$4\r\nECHO\r\n$147\r\n" + strings.Repeat("x", 128) + "... (72 more bytes)\r\n",
		"$8\r\nslowpoke\r\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("SLOWLOG GET 3 has no %q:\n%q", want, got)
		}
	}
	if strings.Contains(got, "secret") || strings.Contains(rawDo(c, "SLOWLOG", "GET", "-1"), "secret") {
		t.Errorf("AUTH's password is in the slow log")
	}
	rawDo(c, "CONFIG", "SET", "slowlog-max-len", "2")
	if got := rawDo(c, "SLOWLOG", "LEN"); got != ":2\r\n" {
		t.Errorf("SLOWLOG LEN after slowlog-max-len 2 = %q", got)
	}
	rawDo(c, "CONFIG", "SET", "slowlog-log-slower-than", "-1")
	rawDo(c, "SLOWLOG", "RESET")
	rawDo(c, "PING")
	if got := rawDo(c, "SLOWLOG", "LEN"); got != ":0\r\n" {
		t.Errorf("SLOWLOG LEN with the log off = %q", got)
	}
	if got := rawDo(c, "CONFIG", "SET", "maxclients", "5"); !strings.HasPrefix(got, "-ERR CONFIG SET is not supported") {
		t.Errorf("CONFIG SET maxclients = %q", got)
	}
}

func sortStrings(s []string) []string {
	sort.Strings(s)
	return s
}
