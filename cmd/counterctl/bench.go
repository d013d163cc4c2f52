package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/counterd/counterd/client"
)

// benchConfig holds the flags of bench.
type benchConfig struct {
	concurrency int
	duration    time.Duration
	requests    int64
	keys        int
	op          string
	prefix      string
	idempotent  bool
	noProgress  bool
}

func setupBench(fs *flag.FlagSet) runFunc {
	var cfg benchConfig
	fs.IntVar(&cfg.concurrency, "concurrency", 50, "number of concurrent workers")
	fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "how long to run (ignored with --requests)")
	fs.Int64Var(&cfg.requests, "requests", 0, "run exactly `N` operations instead of for --duration")
	fs.IntVar(&cfg.keys, "keys", 1, "number of distinct ids (1: one hot key)")
	fs.StringVar(&cfg.op, "op", "incr", "operation: incr, get, pfadd or hincr")
	fs.StringVar(&cfg.prefix, "prefix", "bench:", "prefix of the ids: PREFIX0 .. PREFIX{keys-1}")
	fs.BoolVar(&cfg.idempotent, "idempotent", false, "send an Idempotency-Key with every mutation")
	fs.BoolVar(&cfg.noProgress, "no-progress", false, "do not show a progress bar")
	return func(ctx context.Context, e *env, args []string) error {
		return bench(ctx, e, cfg)
	}
}

// benchSummary is the result of a bench run (also its --json form).
type benchSummary struct {
	Op          string  `json:"op"`
	Concurrency int     `json:"concurrency"`
	Keys        int     `json:"keys"`
	Durability  string  `json:"durability,omitempty"`
	Ops         int64   `json:"ops"`
	Errors      int64   `json:"errors"`
	ElapsedMs   float64 `json:"elapsed_ms"`
	OpsPerSec   float64 `json:"ops_per_sec"`
	P50Ms       float64 `json:"p50_ms"`
	P90Ms       float64 `json:"p90_ms"`
	P99Ms       float64 `json:"p99_ms"`
	MaxMs       float64 `json:"max_ms"`
	FirstError  string  `json:"first_error,omitempty"`

	elapsed, p50, p90, p99, max time.Duration
}

func bench(ctx context.Context, e *env, cfg benchConfig) error {
	switch {
	case cfg.concurrency < 1:
		return usagef("--concurrency must be at least 1")
	case cfg.keys < 1:
		return usagef("--keys must be at least 1")
	case cfg.requests < 0:
		return usagef("--requests must not be negative")
	case cfg.requests == 0 && cfg.duration <= 0:
		return usagef("--duration must be positive")
	}
	var do func(ctx context.Context, c *client.Client, id string, i int64) error
	switch cfg.op {
	case "incr":
		do = func(ctx context.Context, c *client.Client, id string, _ int64) error {
			_, err := c.Incr(ctx, id, 1)
			return err
		}
	case "get":
		do = func(ctx context.Context, c *client.Client, id string, _ int64) error {
			_, err := c.Get(ctx, id)
			return err
		}
	case "pfadd":
		do = func(ctx context.Context, c *client.Client, id string, i int64) error {
			_, err := c.PFAdd(ctx, id, "item-"+strconv.FormatInt(i, 10))
			return err
		}
	case "hincr":
		do = func(ctx context.Context, c *client.Client, id string, i int64) error {
			_, err := c.HIncr(ctx, id, map[string]int64{"f" + strconv.FormatInt(i%8, 10): 1})
			return err
		}
	default:
		return usagef("--op must be incr, get, pfadd or hincr, not %q", cfg.op)
	}

	// One idle connection per worker, so that workers do not open and close
	// connections all the time.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = cfg.concurrency
	tr.MaxIdleConnsPerHost = cfg.concurrency
	tc, err := e.tlsConfig()
	if err != nil {
		return err
	}
	tr.TLSClientConfig = tc
	defer tr.CloseIdleConnections()
	c, err := e.client(
		client.WithHTTPClient(&http.Client{Transport: tr}),
		client.WithRetries(0), // count every failure
		client.WithIdempotencyKeys(cfg.idempotent),
	)
	if err != nil {
		return err
	}
	ids := make([]string, cfg.keys)
	for i := range ids {
		ids[i] = cfg.prefix + strconv.Itoa(i)
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if cfg.requests == 0 {
		runCtx, cancel = context.WithTimeout(runCtx, cfg.duration)
		defer cancel()
	}

	var (
		next, done, errs atomic.Int64
		firstErr         error
		errOnce          sync.Once
		wg               sync.WaitGroup
	)
	lat := make([][]time.Duration, cfg.concurrency)
	start := time.Now()
	stopBar := startProgress(e, cfg, &done, start)
	for w := range cfg.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				i := next.Add(1) - 1
				if cfg.requests > 0 && i >= cfg.requests {
					return
				}
				t := time.Now()
				err := do(runCtx, c, ids[i%int64(len(ids))], i)
				d := time.Since(t)
				if err != nil && runCtx.Err() != nil {
					return // the run ended during this op: not an error of the server
				}
				lat[w] = append(lat[w], d)
				done.Add(1)
				if err != nil {
					errs.Add(1)
					errOnce.Do(func() { firstErr = err })
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	stopBar()

	all := slices.Concat(lat...)
	slices.Sort(all)
	s := benchSummary{
		Op:          cfg.op,
		Concurrency: cfg.concurrency,
		Keys:        cfg.keys,
		Durability:  e.durability,
		Ops:         int64(len(all)),
		Errors:      errs.Load(),
		elapsed:     elapsed,
		p50:         percentile(all, 0.50),
		p90:         percentile(all, 0.90),
		p99:         percentile(all, 0.99),
	}
	if len(all) > 0 {
		s.max = all[len(all)-1]
	}
	if elapsed > 0 {
		s.OpsPerSec = math.Round(float64(s.Ops)/elapsed.Seconds()*10) / 10
	}
	s.ElapsedMs, s.P50Ms, s.P90Ms, s.P99Ms, s.MaxMs = ms(s.elapsed), ms(s.p50), ms(s.p90), ms(s.p99), ms(s.max)
	if firstErr != nil {
		s.FirstError = firstErr.Error()
	}
	if e.json {
		return printJSON(e.stdout, s)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "op:\t%s (concurrency %d, keys %d)\n", s.Op, s.Concurrency, s.Keys)
	fmt.Fprintf(tw, "ops:\t%d\n", s.Ops)
	fmt.Fprintf(tw, "errors:\t%d\n", s.Errors)
	fmt.Fprintf(tw, "elapsed:\t%s\n", human(s.elapsed))
	fmt.Fprintf(tw, "ops/s:\t%.1f\n", s.OpsPerSec)
	fmt.Fprintf(tw, "p50:\t%s\n", human(s.p50))
	fmt.Fprintf(tw, "p90:\t%s\n", human(s.p90))
	fmt.Fprintf(tw, "p99:\t%s\n", human(s.p99))
	fmt.Fprintf(tw, "max:\t%s\n", human(s.max))
	if s.FirstError != "" {
		fmt.Fprintf(tw, "first error:\t%s\n", s.FirstError)
	}
	return tw.Flush()
}

// showProgress reports whether a progress bar goes to stderr: it is a
// terminal and --no-progress was not given.
func showProgress(e *env, noProgress bool) bool {
	return !noProgress && e.stderrFile != nil && term.IsTerminal(int(e.stderrFile.Fd()))
}

// startProgress shows a progress bar on stderr while a bench runs, if
// stderr is a terminal and --no-progress is not given. It returns the
// function that stops it.
func startProgress(e *env, cfg benchConfig, done *atomic.Int64, start time.Time) (stop func()) {
	if !showProgress(e, cfg.noProgress) {
		return func() {}
	}
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(e.stderr),
		progressbar.OptionSetDescription("bench " + cfg.op),
		progressbar.OptionThrottle(100 * time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetWidth(30),
	}
	var bar *progressbar.ProgressBar
	var update func()
	if cfg.requests > 0 {
		bar = progressbar.NewOptions64(cfg.requests, append(opts, progressbar.OptionShowCount())...)
		update = func() {
			n := done.Load()
			bar.Describe(fmt.Sprintf("bench %s: %.0f ops/s", cfg.op, float64(n)/time.Since(start).Seconds()))
			bar.Set64(n)
		}
	} else {
		// The bar shows time; the description shows the operations.
		ticks := int64(cfg.duration / (100 * time.Millisecond))
		bar = progressbar.NewOptions64(max(ticks, 1), opts...)
		update = func() {
			bar.Describe(fmt.Sprintf("bench %s: %d ops", cfg.op, done.Load()))
			bar.Set64(min(int64(time.Since(start)/(100*time.Millisecond)), bar.GetMax64()))
		}
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				update()
			}
		}
	}()
	return func() {
		close(quit)
		wg.Wait()
		bar.Finish()
		bar.Clear()
	}
}

// percentile returns the p-quantile of sorted (nearest rank).
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Millisecond)*1000) / 1000
}

// human rounds d to about four significant digits.
func human(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= 10*time.Millisecond:
		return d.Round(10 * time.Microsecond)
	case d >= time.Millisecond:
		return d.Round(time.Microsecond)
	case d >= 10*time.Microsecond:
		return d.Round(10 * time.Nanosecond)
	}
	return d
}
