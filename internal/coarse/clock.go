// Package coarse is a clock for hot paths: a read is a few atomic loads
// instead of a clock read (time.Now is ~70 ns on the VMs measured in
// BENCHMARKS.md), and the clock costs no wake-ups while nobody reads it.
//
// A Clock's time is refreshed by whoever is busy, in this order:
//
//   - drivers: a goroutine that reads the monotonic clock anyway (the
//     Redis-protocol event loop reads it once per round) hands the
//     reading over with Drive and Refresh, and while one drives, every
//     read is a plain load;
//   - the ticker: while reads come often (two within 2 ms) and no driver
//     drives, a goroutine the Clock owns refreshes it every Resolution,
//     and parks once a few ticks pass without a read;
//   - the reader itself: when neither of them runs, a read reads the
//     system clock (time.Now), so the first read after an idle spell is
//     exact.
//
// A reading is therefore at most about Resolution old while the ticker
// runs, as old as the driver's round (its commands' run time) while a
// driver drives, and exact otherwise; scheduling delays come on top, as
// for any ticker.
//
// The 1 ms ticker this replaces woke the process about 1000 times a
// second even when idle, and each wake-up cost the Go scheduler about
// three context switches (netpoll, an M woken to spin, its sleep): under
// redis-benchmark -P 1 that was a third of counterd's context switches
// per request.
package coarse

import (
	"sync"
	"sync/atomic"
	"time"
	_ "unsafe" // go:linkname
)

// Resolution is how often the ticker refreshes the clock.
const Resolution = time.Millisecond

// Clock.flags bits.
const (
	ticking    = 1 << 0 // the ticker refreshes the clock
	demand     = 1 << 1 // a read since the ticker's last tick
	open       = 1 << 2 // until Close; after it every read reads the system clock
	driverUnit = 1 << 3 // drivers are counted from this bit up

	// fast: a read is a plain load iff flags >= fast, that is while a
	// driver drives, or while the ticker runs (open) and already knows
	// of the demand.
	fast = ticking | demand | open
)

// idleTicks: the ticker parks after this many ticks without a read.
const idleTicks = 3

// frequent: two reads of the system clock closer than this start the ticker.
const frequent = 2 * Resolution

// maxSkew: a change of the wall clock's offset from the monotonic clock
// below this is measurement noise (the two are read one after the other),
// not a step of the wall clock, and is ignored.
const maxSkew = int64(time.Millisecond)

// Clock is a coarse clock (see the package documentation). Its zero value
// is not usable; call New, and Close when done.
type Clock struct {
	_      [64]byte      // keep the hot line to itself
	flags  atomic.Uint32 // ticking, demand, open, drivers
	mono   atomic.Int64  // the latest reading of the monotonic clock (runtime nanotime's scale)
	wall   atomic.Int64  // unix ns: mono + offset
	offset atomic.Int64  // unix ns minus mono, as of the last system clock read
	_      [64]byte

	lastSlow atomic.Int64 // mono of the last read that went to the system clock

	// epoch and epochMono anchor the mono scale: a time.Time's monotonic
	// reading becomes epochMono + t.Sub(epoch). Reading time only through
	// time.Now keeps the clock right inside a testing/synctest bubble.
	epoch     time.Time
	epochMono int64

	wake chan struct{} // starts the ticker (buffered: one token)
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// New returns a running Clock. It starts one goroutine, parked until reads
// come often; Close stops it.
func New() *Clock {
	c := &Clock{
		wake: make(chan struct{}, 1),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	c.epoch = time.Now()
	c.epochMono = nanotime()
	c.mono.Store(c.epochMono)
	c.flags.Store(open)
	c.offset.Store(c.epoch.UnixNano() - c.epochMono)
	c.wall.Store(c.epoch.UnixNano())
	c.lastSlow.Store(c.epochMono - int64(frequent))
	go c.run()
	return c
}

// Close stops the ticker; reads after it read the system clock. It is safe
// to call more than once.
func (c *Clock) Close() {
	c.once.Do(func() {
		c.flags.And(^uint32(open))
		close(c.stop)
		<-c.done
	})
}

// Now returns the time in unix ns.
func (c *Clock) Now() int64 {
	if c.flags.Load() >= fast {
		return c.wall.Load()
	}
	return c.slowNow()
}

//go:noinline
func (c *Clock) slowNow() int64 {
	c.slow()
	return c.wall.Load()
}

// Mono returns the monotonic time in ns, on the scale of the runtime's
// monotonic clock (what Drive takes). It never goes backwards.
func (c *Clock) Mono() int64 {
	if c.flags.Load() >= fast {
		return c.mono.Load()
	}
	return c.slow()
}

// Ticking reports whether the ticker runs (tests and diagnostics).
func (c *Clock) Ticking() bool { return c.flags.Load()&ticking != 0 }

// Drive starts a driver's spell: until the matching Release, the driver
// promises to hand over its monotonic clock readings (runtime nanotime,
// for example the one an event loop takes when epoll_wait returns) with
// Refresh often enough for every reader, and reads are plain loads.
// Drivers may overlap; each Drive needs its Release.
func (c *Clock) Drive(mono int64) {
	c.flags.Add(driverUnit)
	c.store(mono)
}

// Refresh hands over a newer monotonic reading during a Drive spell.
func (c *Clock) Refresh(mono int64) { c.store(mono) }

// Release ends a Drive spell, before the driver blocks or stops
// refreshing. Reads then go back to the ticker or the system clock.
func (c *Clock) Release() { c.flags.Add(^uint32(driverUnit - 1)) }

// Sync reads the system clock into the clock (the wall clock's offset
// included: drivers call it now and then so that a step of the wall clock
// is seen while they drive) and returns its monotonic reading.
func (c *Clock) Sync() int64 {
	t := time.Now()
	m := c.epochMono + int64(t.Sub(c.epoch))
	if d := t.UnixNano() - m - c.offset.Load(); d > maxSkew || d < -maxSkew {
		c.offset.Store(t.UnixNano() - m)
		c.wall.Store(c.mono.Load() + t.UnixNano() - m)
	}
	return c.store(m)
}

// store moves mono forward to m (never back: readers see a monotonic
// clock whatever the order of concurrent refreshes) and returns the clock's
// reading.
func (c *Clock) store(m int64) int64 {
	for {
		cur := c.mono.Load()
		if m <= cur {
			return cur
		}
		if c.mono.CompareAndSwap(cur, m) {
			c.wall.Store(m + c.offset.Load())
			return m
		}
	}
}

// slow is a read that is not a plain load: the first since the ticker's
// last tick (which marks the demand that keeps it ticking), or one that
// reads the system clock because nothing refreshes the clock; if such
// reads come often, it starts the ticker.
func (c *Clock) slow() int64 {
	f := c.flags.Load()
	if f >= driverUnit {
		return c.mono.Load()
	}
	if f&(ticking|open) == ticking|open {
		c.flags.Or(demand)
		return c.mono.Load()
	}
	m := c.Sync()
	if m-c.lastSlow.Swap(m) < int64(frequent) {
		c.startTicker()
	}
	return m
}

// startTicker sets ticking and wakes the ticker, unless it runs.
func (c *Clock) startTicker() {
	for {
		f := c.flags.Load()
		if f&(ticking|open) != open {
			return
		}
		if c.flags.CompareAndSwap(f, f|ticking|demand) {
			select {
			case c.wake <- struct{}{}:
			default: // a token is there already
			}
			return
		}
	}
}

// run is the ticker: parked until slow starts it, it refreshes the clock
// every Resolution until idleTicks ticks pass without a read.
func (c *Clock) run() {
	defer close(c.done)
	t := time.NewTicker(Resolution)
	t.Stop()
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-c.wake:
		}
		t.Reset(Resolution)
		idle := 0
		for c.keepTicking(&idle) {
			select {
			case <-c.stop:
				return
			case <-t.C:
			}
			c.Sync()
		}
		t.Stop()
	}
}

// keepTicking reports whether the ticker goes on: it does while reads
// come (demand, cleared here) or for idleTicks ticks after the last one;
// otherwise it clears ticking, and the next read reads the system clock.
func (c *Clock) keepTicking(idle *int) bool {
	for {
		f := c.flags.Load()
		switch {
		case f&open == 0:
			return false
		case f&demand != 0:
			if c.flags.CompareAndSwap(f, f&^demand) {
				*idle = 0
				return true
			}
		case *idle < idleTicks:
			*idle++
			return true
		default:
			if c.flags.CompareAndSwap(f, f&^ticking) {
				return false
			}
		}
	}
}

// nanotime is the runtime's monotonic clock (what time.Now reads besides
// the wall clock).
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64
