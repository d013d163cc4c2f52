package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/counterd/counterd/internal/ctxwait"
	"github.com/counterd/counterd/internal/pipeline/stream"
)

// Stream states (StreamState.State, GET /readyz).
const (
	StateConnecting  = "connecting"  // not reached yet since the start
	StateConnected   = "connected"   // the last probe or append succeeded
	StateUnreachable = "unreachable" // lost after it was connected
)

// StreamState is the stream as this node last saw it.
type StreamState struct {
	Stream string    `json:"stream"` // "kafka:<topic>", "nats:<stream>"
	OK     bool      `json:"ok"`
	State  string    `json:"state"`
	Since  time.Time `json:"since"`           // when it entered State
	Error  string    `json:"error,omitempty"` // the latest reason while not connected
}

// DefaultEventsTimeout is --events-timeout's default.
const DefaultEventsTimeout = 5 * time.Second

// Probe periods of a connected and of a lost stream, and a probe's
// longest wait.
const (
	probeUp      = time.Second
	probeDown    = 500 * time.Millisecond
	probeTimeout = 2 * time.Second
)

// link is the node's producer side of the stream as the collector and
// /readyz see it: before the stream is first reached, and while it is
// lost, appends answer at once with an error wrapping
// stream.ErrUnavailable (503 stream_unavailable) instead of waiting; while
// connected, an append waits at most the events timeout. A probe every
// second (every half second while lost; each waits at most 2 s) decides
// loss and recovery; each is logged once and followed by the
// counterd_pipeline_stream_up gauge.
type link struct {
	name    string
	timeout time.Duration
	log     *slog.Logger
	up      prometheus.Gauge

	mu    sync.Mutex
	prod  stream.Producer             // nil until connected; guarded by mu
	ping  func(context.Context) error // guarded by mu
	state StreamState                 // guarded by mu
}

func newLink(name string, timeout time.Duration, reg prometheus.Registerer, log *slog.Logger) *link {
	if timeout <= 0 {
		timeout = DefaultEventsTimeout
	}
	l := &link{name: name, timeout: timeout, log: log,
		up: prometheus.NewGauge(prometheus.GaugeOpts{Name: "counterd_pipeline_stream_up",
			Help: "1 while the event stream (Kafka or NATS JetStream) is reachable from this node, else 0 (docs/pipeline.md, Outages)."}),
		state: StreamState{Stream: name, State: StateConnecting, Since: time.Now()}}
	if reg != nil {
		reg.MustRegister(l.up)
	}
	return l
}

// State returns the stream's state.
func (l *link) State() StreamState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state
}

// connected installs the producer once the stream was reached.
func (l *link) connected(p stream.Producer, ping func(context.Context) error) {
	l.mu.Lock()
	l.prod, l.ping = p, ping
	l.mu.Unlock()
	l.report(nil)
}

// notYet records why a connection attempt before the first one failed.
func (l *link) notYet(err error) {
	l.mu.Lock()
	if l.state.State == StateConnecting {
		l.state.Error = err.Error()
	}
	l.mu.Unlock()
}

// report records a probe's outcome; a change of state is
// logged once and sets the gauge.
func (l *link) report(err error) {
	l.mu.Lock()
	st := &l.state
	now := time.Now()
	switch {
	case err == nil && !st.OK:
		was, since := st.State, st.Since
		*st = StreamState{Stream: l.name, OK: true, State: StateConnected, Since: now}
		l.mu.Unlock()
		l.up.Set(1)
		if was == StateConnecting {
			l.log.Info("pipeline: stream connected", "stream", l.name)
		} else {
			l.log.Info("pipeline: stream reachable again", "stream", l.name, "down_for", now.Sub(since).Round(time.Millisecond))
		}
		return
	case err != nil && st.OK:
		*st = StreamState{Stream: l.name, State: StateUnreachable, Since: now, Error: err.Error()}
		l.mu.Unlock()
		l.up.Set(0)
		l.log.Warn("pipeline: stream unreachable: POST /events and EVENTS.ADD answer stream_unavailable until it is back",
			"stream", l.name, "err", err)
		return
	case err != nil:
		st.Error = err.Error() // still down: the newest reason, not logged again
	}
	l.mu.Unlock()
}

// unavailable is the error of an append refused while the stream is not
// connected.
func (st StreamState) unavailable() error {
	return fmt.Errorf("%w: %s %s since %s: %s", stream.ErrUnavailable, st.Stream, st.State,
		st.Since.UTC().Format(time.RFC3339), st.Error)
}

// Append appends msgs within the events timeout (stream.Producer).
func (l *link) Append(ctx context.Context, msgs [][]byte) error {
	return l.do(ctx, func(ctx context.Context, p stream.Producer) error { return p.Append(ctx, msgs) })
}

// AppendDeadLetters publishes the collector's refused events within the
// events timeout (stream.DeadLetterProducer).
func (l *link) AppendDeadLetters(ctx context.Context, source string, dls []stream.DeadLetter) error {
	return l.do(ctx, func(ctx context.Context, p stream.Producer) error {
		dp, ok := p.(stream.DeadLetterProducer)
		if !ok {
			return nil
		}
		return dp.AppendDeadLetters(ctx, source, dls)
	})
}

// Close does nothing: the producer is closed by the pipeline.
func (l *link) Close() error { return nil }

// do runs fn on the producer, answering within the events timeout even
// when the producer's client would wait longer (it goes on in the
// background: some messages may still be appended, which the consumers'
// deduplication by event id makes harmless for a retry).
func (l *link) do(ctx context.Context, fn func(context.Context, stream.Producer) error) error {
	l.mu.Lock()
	p, st := l.prod, l.state
	l.mu.Unlock()
	if p == nil || !st.OK {
		return st.unavailable()
	}
	tctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- fn(tctx, p) }()
	var err error
	select {
	case err = <-done:
	case <-tctx.Done():
	}
	if err == nil && tctx.Err() == nil {
		return nil
	}
	if ctx.Err() != nil { // the caller went away: says nothing of the stream
		return ctx.Err()
	}
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("%w: %s: no acknowledgement within %s (--events-timeout)", stream.ErrUnavailable, l.name, l.timeout)
	}
	// The probe alone decides the stream's state: a client catching up
	// after an outage may time out an append or two while the stream is
	// back, which should not be logged as a second outage.
	return err
}

// watch probes the stream until ctx is done.
func (l *link) watch(ctx context.Context) {
	for {
		l.mu.Lock()
		ok, ping := l.state.OK, l.ping
		l.mu.Unlock()
		wait := probeUp
		if !ok {
			wait = probeDown
		}
		if ctxwait.Sleep(ctx, wait) != nil {
			return
		}
		pctx, cancel := context.WithTimeout(ctx, min(probeTimeout, l.timeout))
		err := ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil && !errors.Is(err, stream.ErrUnavailable) {
			err = fmt.Errorf("%w: %v", stream.ErrUnavailable, err)
		}
		l.report(err)
	}
}
