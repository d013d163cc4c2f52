package server

import (
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// flagGroups orders counterd --help by topic. Every flag belongs to one
// group (TestEveryFlagHasAGroup); a flag missing here is listed under
// "other" so help never hides it.
var flagGroups = []struct {
	title string
	flags []string
}{
	{"Listen", []string{"http", "resp", "grpc", "admin", "allowed-hosts", "cors-origin", "trusted-proxies",
		"http-read-header-timeout", "http-read-body-timeout", "http-write-timeout", "http-idle-timeout",
		"http-event-loops", "resp-idle-timeout", "resp-event-loops", "resp-coalesce", "lua-time-limit", "shutdown-timeout"}},
	{"Authentication and TLS", []string{"auth", "insecure", "tls-cert", "tls-key", "peer-ca", "gossip-key-file"}},
	{"Storage", []string{"data", "min-free-disk", "memory-limit", "durability", "flush-interval", "idempotency-retention", "idempotency-memory",
		"redis", "postgres", "snapshot-interval", "audit-namespaces", "allow-flushall"}},
	{"Cluster", []string{"node-id", "gossip", "join", "cluster-timing", "cluster-lease", "cluster-lease-drift", "ratelimit-global-interval"}},
	{"Regions", []string{"region", "peer-regions", "region-interval", "region-sync-interval"}},
	{"Event pipeline", []string{"kafka", "kafka-topic", "kafka-dead-topic", "kafka-group", "kafka-partitions",
		"nats", "nats-stream", "nats-subject", "nats-dead-subject", "nats-consumer", "nats-ack-wait",
		"rules", "events-no-consume", "events-max-body", "events-timeout", "events-fail-fast",
		"events-allowed-lateness", "events-max-skew", "events-commit-interval"}},
	{"Limits", []string{"max-body", "max-batch", "quotas", "ratelimit-policies", "http-max-conns", "resp-max-conns",
		"resp-max-bulk", "resp-max-command", "resp-query-buffer-total", "resp-max-args",
		"max-inflight", "max-queue", "max-queue-wait", "max-queue-per-client", "http-admission",
		"shed-rate-per-client", "max-conns-per-client", "max-busy-conns-per-client"}},
	{"Logging and operation", []string{"config", "log-level", "log-format", "pprof", "otlp-endpoint", "trace-sample-ratio", "version"}},
}

// PrintUsage writes counterd --help: the flags grouped by topic, each
// with its type, default and environment variable.
func PrintUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: %s [flags]\n\n", fs.Name())
	fmt.Fprintln(w, "Every flag may also be set by its environment variable or as a key of the --config file;")
	fmt.Fprintln(w, "a flag beats the environment, which beats the file, which beats the default.")
	listed := map[string]bool{}
	for _, g := range flagGroups {
		var fl []*flag.Flag
		for _, name := range g.flags {
			if f := fs.Lookup(name); f != nil {
				fl = append(fl, f)
				listed[name] = true
			}
		}
		printGroup(w, g.title, fl)
	}
	var other []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		if !listed[f.Name] {
			other = append(other, f)
		}
	})
	printGroup(w, "Other", other)
}

func printGroup(w io.Writer, title string, fl []*flag.Flag) {
	if len(fl) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s:\n", title)
	for _, f := range fl {
		typ, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if typ != "" {
			line += " " + typ
		}
		fmt.Fprintln(w, line)
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
			usage += fmt.Sprintf(" (default %q)", f.DefValue)
		}
		fmt.Fprintf(w, "      %s\n", strings.ReplaceAll(usage, "\n", "\n      "))
	}
}

// FlagError turns an error of fs.Parse into counterd's one-line message:
// what was wrong, the nearest flag when one is close, and where the full
// list is.
func FlagError(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	const undefined = "flag provided but not defined: "
	if rest, ok := strings.CutPrefix(msg, undefined); ok {
		name := strings.TrimLeft(rest, "-")
		msg = fmt.Sprintf("unknown flag --%s%s", name, suggestFlag(fs, name))
	} else {
		msg = strings.Replace(msg, " flag -", " flag --", 1) // "invalid value ... for flag -x: ...", "flag needs an argument: -x"
		msg = strings.Replace(msg, "argument: -", "argument: --", 1)
	}
	return msg + "; run counterd --help for the flags"
}

// StrayArgs describes the positional arguments left after fs parsed the
// command line, suggesting the flag of the same name when there is one.
func StrayArgs(fs *flag.FlagSet) string {
	a := fs.Arg(0)
	msg := fmt.Sprintf("unexpected argument %q: counterd takes flags only", a)
	if f := fs.Lookup(strings.TrimLeft(a, "-")); f != nil {
		msg += fmt.Sprintf(" (did you mean --%s?)", f.Name)
	} else if s := suggestFlag(fs, strings.TrimLeft(a, "-")); s != "" {
		msg += s
	}
	return msg + "; run counterd --help for the flags"
}

// suggestFlag is " (did you mean --x?)" for the flag nearest to name by
// edit distance, or "" when none is near enough to be a likely typo.
func suggestFlag(fs *flag.FlagSet, name string) string {
	type cand struct {
		name string
		d    int
	}
	var cs []cand
	fs.VisitAll(func(f *flag.Flag) {
		d := editDistance(name, f.Name)
		if strings.HasPrefix(f.Name, name) || strings.HasPrefix(name, f.Name) {
			d = min(d, 1)
		}
		cs = append(cs, cand{f.Name, d})
	})
	sort.Slice(cs, func(i, j int) bool { return cs[i].d < cs[j].d || cs[i].d == cs[j].d && cs[i].name < cs[j].name })
	if len(cs) == 0 || cs[0].d > max(2, len(name)/3) {
		return ""
	}
	return fmt.Sprintf(" (did you mean --%s?)", cs[0].name)
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
