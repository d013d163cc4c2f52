//go:build !linux

package resp

import "net"

// Event loops are Linux only (loop_linux.go): elsewhere every connection
// has its goroutine and Options.EventLoops is ignored.

type eventLoop struct{}

func (s *Server) startLoops() error { return nil }

func (s *Server) stopLoops() {}

func (s *Server) detach(net.Conn) *fdConn { return nil }

func (s *Server) attach(*client) {}

type fdConn struct{ net.Conn }
