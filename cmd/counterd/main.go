// Command counterd runs a counterd node. With no flags it serves the HTTP API
// on 127.0.0.1:8080 and the Redis protocol on 127.0.0.1:6380, keeping its
// state in ./data. See ../../README.md and docs/.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/counterd/counterd/internal/buildinfo"
	"github.com/counterd/counterd/internal/server"
)

func main() {
	cfg := server.DefaultConfig()
	fs := flag.NewFlagSet("counterd", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported in one line below, help by server.PrintUsage
	cfg.BindFlags(fs)
	version := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			server.PrintUsage(os.Stdout, fs)
			return
		}
		fail(2, server.FlagError(fs, err))
	}
	if *version {
		fmt.Println("counterd", buildinfo.Version())
		return
	}
	if fs.NArg() > 0 {
		// counterd takes flags only; a stray word ("counterd version")
		// must not start a server that ignores it.
		fail(2, server.StrayArgs(fs))
	}
	if cfg.ConfigFile != "" {
		if err := server.ApplyConfigFile(fs, cfg.ConfigFile); err != nil {
			fail(2, err.Error())
		}
	}
	if err := cfg.EnvErr(); err != nil {
		fail(2, err.Error())
	}
	if err := cfg.Validate(); err != nil {
		fail(2, err.Error())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := server.Run(ctx, cfg, server.NewLogger(&cfg)); err != nil {
		fail(1, err.Error())
	}
}

func fail(code int, msg string) {
	fmt.Fprintln(os.Stderr, "counterd:", msg)
	os.Exit(code)
}
