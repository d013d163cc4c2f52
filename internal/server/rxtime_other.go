//go:build !linux

package server

import (
	"net"
	"time"
)

// rxReader is Linux-only (SO_TIMESTAMPNS); elsewhere admission counts no
// wait before the read.
type rxReader struct{}

func newRxReader(net.Conn) *rxReader { return nil }

func (*rxReader) read([]byte) (int, time.Time, error) { panic("unreachable") }

func (*rxReader) tryRead([]byte) (int, time.Time, bool, error) { panic("unreachable") }

func (*rxReader) quiet(bool) { panic("unreachable") }
