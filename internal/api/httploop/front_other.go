//go:build !linux

package httploop

import (
	"context"
	"net"
)

// Event loops are Linux only: elsewhere every connection goes to the
// HTTP server.

type loop struct{}

// New returns a Front on ln; outside Linux it runs no loops.
func New(ln net.Listener, opts Options) (*Front, error) {
	f := &Front{inner: ln, opts: opts, ch: make(chan net.Conn), done: make(chan struct{})}
	f.wg.Add(1)
	go f.acceptLoop()
	return f, nil
}

func (f *Front) attach(net.Conn) bool { return false }

// Close closes the listener.
func (f *Front) Close() error {
	err := f.inner.Close()
	f.shut()
	return err
}

// Stop is Close.
func (f *Front) Stop() { f.Close(); f.wg.Wait() }

// Shutdown is Close.
func (f *Front) Shutdown(ctx context.Context) error { f.Stop(); return nil }
