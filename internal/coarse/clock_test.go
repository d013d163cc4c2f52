package coarse

import (
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

var sink atomic.Int64

// within fails unless got (unix ns) lies in [lo-slack, hi+slack].
func within(t *testing.T, what string, got, lo, hi int64, slack time.Duration) {
	t.Helper()
	if got < lo-int64(slack) || got > hi+int64(slack) {
		t.Errorf("%s = %v, want within %v of [%v, %v]", what, time.Unix(0, got), slack, time.Unix(0, lo), time.Unix(0, hi))
	}
}

// waitFlags waits until cond holds of the clock's flags.
func waitFlags(t *testing.T, c *Clock, what string, cond func(uint32) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond(c.flags.Load()) {
		if time.Now().After(deadline) {
			t.Fatalf("flags %#x: never %s", c.flags.Load(), what)
		}
		time.Sleep(time.Millisecond)
	}
}

// startTicking reads until the reads start the ticker (two within
// `frequent` do; a loaded machine may separate two reads by more).
func startTicking(t *testing.T, c *Clock) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !c.Ticking() {
		if time.Now().After(deadline) {
			t.Fatalf("flags %#x: frequent reads never started the ticker", c.flags.Load())
		}
		c.Now()
	}
}

func TestIdleReadIsExact(t *testing.T) {
	c := New()
	defer c.Close()
	time.Sleep(20 * time.Millisecond)
	lo := time.Now().UnixNano()
	got := c.Now()
	hi := time.Now().UnixNano()
	// Nothing refreshed the clock for 20 ms: the read reads the system
	// clock (up to the wall-clock offset's noise allowance).
	within(t, "Now after an idle spell", got, lo, hi, time.Duration(maxSkew))
	if c.flags.Load()&ticking != 0 {
		t.Errorf("one read started the ticker")
	}
}

func TestTickerStartsAndParks(t *testing.T) {
	c := New()
	defer c.Close()
	startTicking(t, c)
	// While reads come, it ticks: the clock keeps up with time.
	m0 := c.Mono()
	start := time.Now()
	for time.Since(start) < 30*time.Millisecond {
		lo := time.Now().UnixNano()
		got := c.Now()
		hi := time.Now().UnixNano()
		// Generous: a loaded test machine delays the ticker.
		within(t, "Now while ticking", got, lo-int64(time.Second), hi, 0)
		if got > hi+int64(maxSkew) {
			t.Fatalf("Now %v is ahead of time.Now %v", got, hi)
		}
		time.Sleep(100 * time.Microsecond)
	}
	if d := time.Duration(c.Mono() - m0); d < 10*time.Millisecond {
		t.Errorf("Mono advanced %v in 30 ms of reads", d)
	}
	// Without reads it parks.
	waitFlags(t, c, "parked", func(f uint32) bool { return f&ticking == 0 })
}

func TestDriverRefreshes(t *testing.T) {
	c := New()
	defer c.Close()
	m0 := c.Sync()
	c.Drive(m0 + int64(time.Hour))
	if got := c.Mono(); got != m0+int64(time.Hour) {
		t.Errorf("Mono while driven = %d, want the driver's %d", got, m0+int64(time.Hour))
	}
	if got, want := c.Now(), m0+int64(time.Hour)+c.offset.Load(); got != want {
		t.Errorf("Now while driven = %d, want %d", got, want)
	}
	c.Refresh(m0 + 2*int64(time.Hour))
	if got := c.Mono(); got != m0+2*int64(time.Hour) {
		t.Errorf("Mono after Refresh = %d, want %d", got, m0+2*int64(time.Hour))
	}
	c.Refresh(m0) // older: ignored, the clock never goes back
	if got := c.Mono(); got != m0+2*int64(time.Hour) {
		t.Errorf("Mono after an older Refresh = %d, want %d", got, m0+2*int64(time.Hour))
	}
	c.Drive(m0) // a second driver
	c.Release()
	if f := c.flags.Load(); f < driverUnit {
		t.Errorf("flags %#x: one Release ended both drivers", f)
	}
	c.Release()
	if f := c.flags.Load(); f >= driverUnit {
		t.Errorf("flags %#x after the last Release", f)
	}
}

func TestDriverHoldsTheTickerOff(t *testing.T) {
	c := New()
	defer c.Close()
	startTicking(t, c)
	c.Drive(nanotime())
	// Reads while a driver drives do not count as demand: the ticker parks.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			c.Now()
			c.Refresh(nanotime())
			time.Sleep(50 * time.Microsecond)
		}
	}()
	waitFlags(t, c, "parked while driven", func(f uint32) bool { return f&ticking == 0 })
	close(stop)
	<-done
	c.Release()
	lo := time.Now().UnixNano()
	got := c.Now()
	hi := time.Now().UnixNano()
	within(t, "Now after Release", got, lo, hi, time.Duration(maxSkew))
}

// TestMonotonic: concurrent readers, drivers and the ticker; no reader
// ever sees Mono go back, and Now stays near the system clock.
func TestMonotonic(t *testing.T) {
	c := New()
	defer c.Close()
	var wg sync.WaitGroup
	end := time.Now().Add(100 * time.Millisecond)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			last := int64(0)
			for i := 0; time.Now().Before(end); i++ {
				if g == 0 && i%64 == 0 {
					c.Drive(nanotime())
					c.Refresh(nanotime())
					c.Release()
				}
				m := c.Mono()
				if m < last {
					t.Errorf("Mono went back: %d after %d", m, last)
					return
				}
				last = m
				if i%256 == 0 {
					time.Sleep(200 * time.Microsecond)
				}
			}
		}(g)
	}
	wg.Wait()
	lo := time.Now().UnixNano()
	within(t, "Now after the run", c.Now(), lo-int64(time.Second), time.Now().UnixNano(), 0)
}

func TestClose(t *testing.T) {
	c := New()
	startTicking(t, c)
	c.Close()
	c.Close()
	select {
	case <-c.done:
	default:
		t.Fatal("ticker still running after Close")
	}
	time.Sleep(5 * time.Millisecond)
	lo := time.Now().UnixNano()
	got := c.Now()
	hi := time.Now().UnixNano()
	within(t, "Now after Close", got, lo, hi, time.Duration(maxSkew))
}

// TestSynctest: inside a bubble the clock follows the bubble's time, and
// Close leaves no goroutine behind (synctest.Test fails otherwise).
func TestSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := New()
		start := c.Now()
		for i := 0; i < 1500; i++ { // reads every ms: the ticker runs
			time.Sleep(time.Millisecond)
			c.Now()
		}
		if d := time.Duration(c.Now() - start); d < 1490*time.Millisecond || d > 1510*time.Millisecond {
			t.Errorf("clock advanced %v in 1.5 s of reads", d)
		}
		time.Sleep(time.Second) // idle: the ticker parks
		if d := time.Duration(c.Now() - start); d < 2490*time.Millisecond || d > 2510*time.Millisecond {
			t.Errorf("clock advanced %v in 2.5 s", d)
		}
		c.Close()
	})
}

func BenchmarkNowTicking(b *testing.B) {
	c := New()
	defer c.Close()
	b.RunParallel(func(pb *testing.PB) {
		var s int64
		for pb.Next() {
			s += c.Now()
		}
		sink.Add(s)
	})
}

func BenchmarkNowDriven(b *testing.B) {
	c := New()
	defer c.Close()
	c.Drive(nanotime())
	defer c.Release()
	var s int64
	for i := 0; i < b.N; i++ {
		s += c.Now()
	}
	sink.Add(s)
}

// BenchmarkAtomicLoad is the floor: what a ticker-refreshed clock costs.
func BenchmarkAtomicLoad(b *testing.B) {
	var v atomic.Int64
	v.Store(1)
	b.RunParallel(func(pb *testing.PB) {
		var s int64
		for pb.Next() {
			s += v.Load()
		}
		sink.Add(s)
	})
}

func BenchmarkTimeNow(b *testing.B) {
	var s int64
	for i := 0; i < b.N; i++ {
		s += time.Now().UnixNano()
	}
	sink.Add(s)
}
