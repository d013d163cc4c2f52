package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/counterd/counterd/client"
)

type eventsConfig struct {
	batch       int
	concurrency int
	noProgress  bool
	dead        int // > 0: list that many kept dead letters instead of sending
}

func setupEvents(fs *flag.FlagSet) runFunc {
	var cfg eventsConfig
	fs.IntVar(&cfg.batch, "batch", 1000, "events per POST /events")
	fs.IntVar(&cfg.concurrency, "concurrency", 4, "batches in flight at once")
	fs.BoolVar(&cfg.noProgress, "no-progress", false, "do not show a progress bar")
	fs.IntVar(&cfg.dead, "dead", 0, "instead of sending: print the newest N dead letters a node without a stream kept")
	return func(ctx context.Context, e *env, args []string) error {
		if cfg.dead > 0 {
			if len(args) > 0 {
				return usagef("events --dead takes no FILE")
			}
			return printDeadLetters(ctx, e, cfg.dead)
		}
		if len(args) != 1 {
			return usagef("events needs a FILE (or --dead N)")
		}
		return sendEvents(ctx, e, cfg, args[0])
	}
}

// eventsSummary is what counterctl events prints (also its --json form).
type eventsSummary struct {
	Events      int                      `json:"events"`
	Batches     int                      `json:"batches"`
	ElapsedMs   float64                  `json:"elapsed_ms"`
	PerSec      float64                  `json:"events_per_sec"`
	DeadLetters []client.EventDeadLetter `json:"dead_letters,omitempty"`
	// Rejected are the events the server refused (not appended), with
	// their index in the file's order.
	Rejected []client.RejectedEvent `json:"rejected,omitempty"`
}

// readEvents reads a file of events: NDJSON, or one JSON array.
func readEvents(path string, stdin io.Reader) ([]json.RawMessage, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, err
	}
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) > 0 && t[0] == '[' {
		var evs []json.RawMessage
		if err := json.Unmarshal(t, &evs); err != nil {
			return nil, usagef("%s: not a JSON array of events: %v", path, err)
		}
		return evs, nil
	}
	var evs []json.RawMessage
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if !json.Valid(line) {
			return nil, usagef("%s:%d: not a JSON event", path, n)
		}
		evs = append(evs, json.RawMessage(bytes.Clone(line)))
	}
	return evs, sc.Err()
}

// sendEvents posts the file's events in batches, several at once.
func sendEvents(ctx context.Context, e *env, cfg eventsConfig, path string) error {
	if cfg.batch < 1 || cfg.concurrency < 1 {
		return usagef("--batch and --concurrency must be at least 1")
	}
	evs, err := readEvents(path, os.Stdin)
	if err != nil {
		return err
	}
	var batches [][]json.RawMessage
	for i := 0; i < len(evs); i += cfg.batch {
		batches = append(batches, evs[i:min(i+cfg.batch, len(evs))])
	}
	start := time.Now()
	var sent atomic.Int64
	stop := eventsProgress(e, cfg, int64(len(evs)), &sent)
	var (
		mu       sync.Mutex
		firstErr error
		dead     []client.EventDeadLetter
		rejected []client.RejectedEvent
		next     atomic.Int64
		wg       sync.WaitGroup
	)
	for range min(cfg.concurrency, len(batches)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(batches) || ctx.Err() != nil {
					return
				}
				b, _ := json.Marshal(batches[i])
				res, err := e.c.SendEventsRaw(ctx, b)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("batch %d (events %d..%d): %w", i, i*cfg.batch, i*cfg.batch+len(batches[i])-1, err)
				}
				for _, d := range res.DeadLetters {
					d.Index += i * cfg.batch
					dead = append(dead, d)
				}
				for _, r := range res.Rejected {
					r.Index += i * cfg.batch
					rejected = append(rejected, r)
				}
				mu.Unlock()
				if err != nil {
					return
				}
				sent.Add(int64(len(batches[i])))
			}
		})
	}
	wg.Wait()
	stop()
	if firstErr != nil {
		return firstErr
	}
	el := time.Since(start)
	s := eventsSummary{Events: len(evs), Batches: len(batches), ElapsedMs: float64(el.Microseconds()) / 1000,
		PerSec: float64(len(evs)) / el.Seconds(), DeadLetters: dead, Rejected: rejected}
	sort.Slice(s.Rejected, func(a, b int) bool { return s.Rejected[a].Index < s.Rejected[b].Index })
	sort.Slice(s.DeadLetters, func(a, b int) bool { return s.DeadLetters[a].Index < s.DeadLetters[b].Index })
	if e.json {
		return printJSON(e.stdout, s)
	}
	fmt.Fprintf(e.stdout, "sent %d events in %d batches in %s (%.0f events/s)\n", s.Events, s.Batches, human(el), s.PerSec)
	if len(s.Rejected) > 0 {
		fmt.Fprintf(e.stdout, "%d events refused (dead-lettered, not counted):\n", len(s.Rejected))
	}
	for _, r := range s.Rejected {
		fmt.Fprintf(e.stdout, "refused: event %d: %s\n", r.Index, r.Error)
	}
	for _, d := range s.DeadLetters {
		fmt.Fprintf(e.stdout, "dead letter: event %d (%s): %s\n", d.Index, d.ID, d.Reason)
	}
	return nil
}

// eventsProgress shows a bar of events sent on a terminal's stderr.
func eventsProgress(e *env, cfg eventsConfig, total int64, sent *atomic.Int64) (stop func()) {
	if !showProgress(e, cfg.noProgress) {
		return func() {}
	}
	bar := progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(e.stderr),
		progressbar.OptionSetDescription("events"),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("events"),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetWidth(30))
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				bar.Set64(sent.Load())
				bar.Finish()
				return
			case <-t.C:
				bar.Set64(sent.Load())
			}
		}
	})
	return func() { close(quit); wg.Wait() }
}

// printDeadLetters prints the node's kept dead letters, one JSON object a
// line (the same with --json).
func printDeadLetters(ctx context.Context, e *env, n int) error {
	dls, err := e.c.EventDeadLetters(ctx, n)
	if err != nil {
		return err
	}
	for _, d := range dls {
		fmt.Fprintf(e.stdout, "%s\n", d)
	}
	return nil
}
