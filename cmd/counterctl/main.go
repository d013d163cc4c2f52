// Command counterctl is the command-line client of counterd, over the Go
// client package (and so over the HTTP API).
//
//	counterctl --version
//	counterctl [--addr URL] [--token T] [--ca FILE] [--json] [--timeout D] [--durability sync|async] CMD [ARGS]
//
// Run "counterctl help" for the commands. Global flags may also follow the
// command. Human output goes to stdout, errors to stderr as
// "counterctl: CODE: MESSAGE"; the exit status is 0 on success, 1 on an error
// and 2 on bad usage.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/counterd/counterd/client"
	"github.com/counterd/counterd/internal/buildinfo"
)

const defaultAddr = "http://127.0.0.1:8080"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// env is what every command gets: the global flags and the output streams.
type env struct {
	addr       string
	json       bool
	timeout    time.Duration
	durability string
	token      string
	ca         string         // --ca: PEM CA file trusted for https:// addresses
	c          *client.Client // the command's client, made by run before the command

	stdout, stderr io.Writer
	stderrFile     *os.File // stderr, when it is a file (for the progress bar)
}

// globalFlags registers the global flags on fs, bound to e.
func (e *env) globalFlags(fs *flag.FlagSet) {
	fs.StringVar(&e.addr, "addr", e.addr, "server address (env COUNTERD_ADDR)")
	fs.BoolVar(&e.json, "json", e.json, "print JSON instead of human output")
	fs.DurationVar(&e.timeout, "timeout", e.timeout, "timeout of each request")
	fs.StringVar(&e.durability, "durability", e.durability, "acknowledgement mode of mutations: sync or async (default: the server's)")
	fs.StringVar(&e.token, "token", e.token, "API token sent as a bearer token, for servers with --auth (env COUNTERD_TOKEN)")
	fs.StringVar(&e.ca, "ca", e.ca, "PEM CA file to trust for an https:// --addr, besides the system's (env COUNTERD_CA)")
}

// client returns a client for e's address with e's options plus opts.
func (e *env) client(opts ...client.Option) (*client.Client, error) {
	if e.durability != "" && e.durability != "sync" && e.durability != "async" {
		return nil, usagef("--durability must be sync or async, not %q", e.durability)
	}
	base := []client.Option{
		client.WithTimeout(e.timeout),
		client.WithDefaultDurability(e.durability),
		client.WithUserAgent("counterctl"),
		client.WithToken(e.token),
	}
	if e.ca != "" {
		base = append(base, client.WithCAFile(e.ca))
	}
	c, err := client.New(e.addr, append(base, opts...)...)
	if err != nil {
		return nil, usagef("%v", err)
	}
	return c, nil
}

// tlsConfig is the TLS configuration of a transport of e's own (bench):
// the system roots plus --ca; nil without --ca.
func (e *env) tlsConfig() (*tls.Config, error) {
	if e.ca == "" {
		return nil, nil
	}
	b, err := os.ReadFile(e.ca)
	if err != nil {
		return nil, usagef("--ca: %v", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(b) {
		return nil, usagef("--ca %s: no PEM certificate", e.ca)
	}
	return &tls.Config{RootCAs: pool}, nil
}

// runFunc runs a command with its positional arguments.
type runFunc func(ctx context.Context, e *env, args []string) error

// command is one subcommand. setup registers the command's own flags on fs
// and returns the function that runs it.
type command struct {
	name    string
	args    string // synopsis of the arguments
	summary string
	minArgs int
	maxArgs int // -1: no limit
	setup   func(fs *flag.FlagSet) runFunc
}

// usageError is bad usage: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	e := &env{addr: defaultAddr, timeout: 10 * time.Second, stdout: stdout, stderr: stderr}
	if a := os.Getenv("COUNTERD_ADDR"); a != "" {
		e.addr = a
	}
	e.token = os.Getenv("COUNTERD_TOKEN")
	e.ca = os.Getenv("COUNTERD_CA")
	if f, ok := stderr.(*os.File); ok {
		e.stderrFile = f
	}

	fs := flag.NewFlagSet("counterctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	e.globalFlags(fs)
	version := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stdout, fs)
			return 0
		}
		fmt.Fprintf(stderr, "counterctl: %v\n", err)
		printUsage(stderr, fs)
		return 2
	}
	if *version {
		fmt.Fprintln(stdout, "counterctl", buildinfo.Version())
		return 0
	}
	args = fs.Args()
	if len(args) == 0 {
		printUsage(stderr, fs)
		return 2
	}
	name, args := args[0], args[1:]
	if name == "help" {
		return help(stdout, stderr, fs, args)
	}
	cmd := lookup(name)
	if cmd == nil {
		fmt.Fprintf(stderr, "counterctl: unknown command %q (run 'counterctl help')\n", name)
		return 2
	}

	cfs := flag.NewFlagSet("counterctl "+cmd.name, flag.ContinueOnError)
	cfs.SetOutput(io.Discard)
	runCmd := cmd.setup(cfs)
	e.globalFlags(cfs)
	pos, err := parseInterspersed(cfs, args)
	if err == nil && (len(pos) < cmd.minArgs || (cmd.maxArgs >= 0 && len(pos) > cmd.maxArgs)) {
		err = usagef("%s: wrong number of arguments", cmd.name)
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printCommandUsage(stdout, cmd, cfs)
			return 0
		}
		fmt.Fprintf(stderr, "counterctl: %v\n", err)
		printCommandUsage(stderr, cmd, cfs)
		return 2
	}
	// One client for the command (bench builds its own, with a tuned
	// transport); a bad --addr or --durability is a usage error.
	if e.c, err = e.client(); err != nil {
		return report(stderr, cmd, cfs, err)
	}
	if err := runCmd(ctx, e, pos); err != nil {
		return report(stderr, cmd, cfs, err)
	}
	return 0
}

// report prints err and returns the exit status.
func report(stderr io.Writer, cmd *command, fs *flag.FlagSet, err error) int {
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "counterctl: %s\n", ue.msg)
		printCommandUsage(stderr, cmd, fs)
		return 2
	}
	var ce *client.Error
	if errors.As(err, &ce) {
		code := ce.Code
		if code == "" {
			code = fmt.Sprintf("http %d", ce.Status)
		}
		msg := ce.Message
		if ce.Index >= 0 {
			msg += fmt.Sprintf(" (op %d)", ce.Index)
		}
		fmt.Fprintf(stderr, "counterctl: %s: %s\n", code, msg)
		return 1
	}
	fmt.Fprintf(stderr, "counterctl: %v\n", err)
	return 1
}

// parseInterspersed parses fs from args where flags and positional
// arguments may be mixed ("get ID --json"). A negative number ("-5") is a
// positional argument, and everything after "--" is.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' || isNumber(a) {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			continue // Parse reports it
		}
		if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
			continue
		}
		if i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	if err := fs.Parse(flags); err != nil {
		return nil, err
	}
	return pos, nil
}

func isNumber(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}

func lookup(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

func help(stdout, stderr io.Writer, fs *flag.FlagSet, args []string) int {
	if len(args) == 0 {
		printUsage(stdout, fs)
		return 0
	}
	cmd := lookup(args[0])
	if cmd == nil {
		fmt.Fprintf(stderr, "counterctl: unknown command %q\n", args[0])
		return 2
	}
	cfs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	cmd.setup(cfs)
	printCommandUsage(stdout, cmd, cfs)
	return 0
}

func printUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "usage: counterctl [global flags] COMMAND [ARGS]")
	fmt.Fprintln(w, "\nCommands:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s %s\t%s\n", c.name, c.args, c.summary)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nGlobal flags (also accepted after the command):")
	printFlags(w, fs)
	fmt.Fprintln(w, "\nRun 'counterctl help COMMAND' or 'counterctl COMMAND -h' for a command's flags.")
}

func printCommandUsage(w io.Writer, cmd *command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: counterctl %s %s\n\n%s\n", cmd.name, cmd.args, cmd.summary)
	var own []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		switch f.Name {
		case "addr", "json", "timeout", "durability", "token":
		default:
			own = append(own, f)
		}
	})
	if len(own) > 0 {
		fmt.Fprintln(w, "\nFlags:")
		printFlagList(w, own)
	}
	fmt.Fprintln(w, "\nGlobal flags: --addr URL, --json, --timeout D, --durability sync|async, --token T (see 'counterctl help')")
}

func printFlags(w io.Writer, fs *flag.FlagSet) {
	var all []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) { all = append(all, f) })
	printFlagList(w, all)
}

func printFlagList(w io.Writer, fl []*flag.Flag) {
	sort.Slice(fl, func(i, j int) bool { return fl[i].Name < fl[j].Name })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, f := range fl {
		arg, usage := flag.UnquoteUsage(f)
		def := ""
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
			def = fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(tw, "  --%s %s\t%s%s\n", f.Name, arg, usage, def)
	}
	tw.Flush()
}
