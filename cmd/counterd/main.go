// Command counterd runs a counterd node. With no flags it serves the HTTP API
// on 127.0.0.1:8080 and the Redis protocol on 127.0.0.1:6380, keeping its
// state in ./data. See ../../README.md and docs/.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/counterd/counterd/internal/buildinfo"
	"github.com/counterd/counterd/internal/server"
)

func main() {
	cfg := server.DefaultConfig()
	fs := flag.NewFlagSet("counterd", flag.ExitOnError)
	cfg.BindFlags(fs)
	version := fs.Bool("version", false, "print the version and exit")
	fs.Parse(os.Args[1:])
	if *version {
		fmt.Println("counterd", buildinfo.Version())
		return
	}
	if fs.NArg() > 0 {
		// counterd takes flags only; a stray word ("counterd version")
		// must not start a server that ignores it.
		fmt.Fprintln(os.Stderr, "counterd:", strayArgs(fs))
		fs.SetOutput(os.Stderr)
		fs.Usage()
		os.Exit(2)
	}
	if err := cfg.EnvErr(); err != nil {
		fmt.Fprintln(os.Stderr, "counterd:", err)
		os.Exit(2)
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "counterd:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := server.Run(ctx, cfg, server.NewLogger(&cfg)); err != nil {
		fmt.Fprintln(os.Stderr, "counterd:", err)
		os.Exit(1)
	}
}

// strayArgs describes the positional arguments left after fs parsed the
// command line, suggesting the flag of the same name when there is one.
func strayArgs(fs *flag.FlagSet) string {
	a := fs.Arg(0)
	msg := fmt.Sprintf("unexpected argument %q: counterd takes flags only", a)
	if f := fs.Lookup(strings.TrimLeft(a, "-")); f != nil {
		msg += fmt.Sprintf(" (did you mean --%s?)", f.Name)
	}
	return msg
}
