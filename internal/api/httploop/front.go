package httploop

import (
	"net"
	"sync"
	"sync/atomic"
)

// Front is a net.Listener for the HTTP server that puts the plain TCP
// connections it accepts on event loops (Linux) and hands the server the
// others: those it cannot detach, and those whose requests a loop does
// not serve, with the bytes the loop already read (handed over for good:
// the server then answers every request of that connection).
type Front struct {
	inner net.Listener
	opts  Options
	ch    chan net.Conn // to the HTTP server's Accept
	done  chan struct{}
	once  sync.Once
	err   error
	errMu sync.Mutex
	wg    sync.WaitGroup
	loops []*loop // Linux
	next  int     // the loop of the next connection

	served, handedOver, shed atomic.Int64
}

// Served is the number of requests the loops answered (shed ones
// included); HandedOver the number of connections handed to the HTTP
// server by a loop; Shed the requests a loop shed.
func (f *Front) Served() int64 { return f.served.Load() }

// HandedOver: see Served.
func (f *Front) HandedOver() int64 { return f.handedOver.Load() }

// Shed: see Served.
func (f *Front) Shed() int64 { return f.shed.Load() }

// Accept returns the next connection for the HTTP server.
func (f *Front) Accept() (net.Conn, error) {
	select {
	case c := <-f.ch:
		return c, nil
	case <-f.done:
		f.errMu.Lock()
		defer f.errMu.Unlock()
		if f.err != nil {
			return nil, f.err
		}
		return nil, net.ErrClosed
	}
}

// Addr is the listener's address.
func (f *Front) Addr() net.Addr { return f.inner.Addr() }

// Loops is the number of event loops running.
func (f *Front) Loops() int { return len(f.loops) }

func (f *Front) acceptLoop() {
	defer f.wg.Done()
	for {
		c, err := f.inner.Accept()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			f.errMu.Lock()
			if f.err == nil {
				f.err = err
			}
			f.errMu.Unlock()
			f.shut()
			return
		}
		if f.attach(c) {
			continue
		}
		f.toServer(c)
	}
}

// toServer gives c to the HTTP server, or closes it once the front is
// closed.
func (f *Front) toServer(c net.Conn) {
	select {
	case f.ch <- c:
	case <-f.done:
		c.Close()
	}
}

func (f *Front) shut() { f.once.Do(func() { close(f.done) }) }

// prefixConn is a connection handed over with the bytes a loop read.
type prefixConn struct {
	net.Conn
	pre  []byte
	orig net.Conn // the accepted connection (its Close releases counts)
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(p, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

func (c *prefixConn) Close() error {
	err := c.Conn.Close()
	if c.orig != nil {
		c.orig.Close()
	}
	return err
}
