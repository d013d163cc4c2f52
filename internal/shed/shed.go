// Package shed bounds the work admitted in front of the engine: at most
// MaxInflight requests run at once, at most MaxQueue more wait (each for at
// most MaxWait) for one of them to finish, and everything beyond is refused
// at once with ErrOverloaded. A refused request costs a few atomic
// operations, so under overload a node answers "busy" in microseconds
// instead of letting every request wait its turn behind thousands of
// others.
//
// How: a buffered channel of MaxInflight tokens; a request that finds none
// free counts itself into the queue (an atomic counter) and waits for a
// token, its context or MaxWait, whichever comes first.
package shed

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"time"
)

// ErrOverloaded is returned by Acquire when a request is shed.
var ErrOverloaded = errors.New("shed: overloaded, retry later")

// Config sets a Limiter's bounds. Zero fields take the defaults.
type Config struct {
	// MaxInflight is the most requests admitted at once. Default
	// 64 * GOMAXPROCS: engine operations take microseconds, so this many
	// keep every core busy while bounding the goroutines that contend
	// for the engine's locks.
	MaxInflight int
	// MaxQueue is the most requests waiting for a slot. Default
	// 4 * MaxInflight. -1: none wait (shed as soon as all slots are busy).
	MaxQueue int
	// MaxWait is the longest a request waits in the queue. Default 20ms:
	// a queued request either starts soon or is told to retry.
	MaxWait time.Duration
	// Disabled admits everything (the limiter only counts).
	Disabled bool
}

// WithDefaults returns c with zero fields set to the defaults.
func (c Config) WithDefaults() Config {
	if c.MaxInflight <= 0 {
		c.MaxInflight = 64 * runtime.GOMAXPROCS(0)
	}
	if c.MaxQueue == 0 {
		c.MaxQueue = 4 * c.MaxInflight
	}
	if c.MaxQueue < 0 {
		c.MaxQueue = 0
	}
	if c.MaxWait <= 0 {
		c.MaxWait = 20 * time.Millisecond
	}
	return c
}

// Limiter admits or sheds requests. It is safe for concurrent use and
// needs no Close.
type Limiter struct {
	cfg    Config
	tokens chan struct{}
	queued atomic.Int64
	shed   atomic.Uint64
	// OnShed, when set before use, is called for every shed request with
	// the front end that shed it (for metrics).
	OnShed func(frontEnd string)
}

// New returns a Limiter with cfg's bounds (defaults for zero fields).
func New(cfg Config) *Limiter {
	cfg = cfg.WithDefaults()
	return &Limiter{cfg: cfg, tokens: make(chan struct{}, cfg.MaxInflight)}
}

// Config returns the limiter's bounds, defaults applied.
func (l *Limiter) Config() Config { return l.cfg }

// Acquire admits a request or returns ErrOverloaded (or ctx's error while
// queued). After a nil error the caller must call Release once. frontEnd
// names the caller in OnShed ("http", "resp", "grpc").
func (l *Limiter) Acquire(ctx context.Context, frontEnd string) error {
	if l.cfg.Disabled {
		return nil
	}
	select {
	case l.tokens <- struct{}{}:
		return nil
	default:
	}
	if l.queued.Add(1) > int64(l.cfg.MaxQueue) {
		l.queued.Add(-1)
		return l.shedOne(frontEnd)
	}
	defer l.queued.Add(-1)
	t := time.NewTimer(l.cfg.MaxWait)
	defer t.Stop()
	select {
	case l.tokens <- struct{}{}:
		return nil
	case <-t.C:
		return l.shedOne(frontEnd)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Release gives back the slot of an admitted request.
func (l *Limiter) Release() {
	if l.cfg.Disabled {
		return
	}
	<-l.tokens
}

func (l *Limiter) shedOne(frontEnd string) error {
	l.shed.Add(1)
	if l.OnShed != nil {
		l.OnShed(frontEnd)
	}
	return ErrOverloaded
}

// Shed returns how many requests were shed so far.
func (l *Limiter) Shed() uint64 { return l.shed.Load() }

// Inflight returns how many requests hold a slot now.
func (l *Limiter) Inflight() int { return len(l.tokens) }
