package server

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// onSIGHUP calls reload on every SIGHUP until ctx is done, from a
// goroutine of its own (one per reloadable file: --tls-cert and --peer-ca,
// --quotas).
func onSIGHUP(ctx context.Context, reload func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				reload()
			}
		}
	}()
}
