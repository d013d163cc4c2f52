// Package collector is the pipeline's front door: POST /events (and the
// RESP command EVENTS.ADD, through Collector.Add) takes a batch of events,
// checks it against event.Limits and hands it to a Sink: a stream
// producer, which answers once the stream acknowledged the batch, or in
// the embedded mode the consumer's applier, which answers once the
// effects are on disk. A bad event is refused on its own (dead-lettered
// and answered in Result.Rejected) while the batch's good events are
// appended; a batch that is not a list of events, or has no good event,
// is refused whole with a typed error and appends nothing.
package collector

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/counterd/counterd/internal/pipeline/event"
	"github.com/counterd/counterd/internal/pipeline/stream"
)

// Sink takes a checked batch. Dead letters are returned by the embedded
// sink, which applies the rules at once; stream sinks return none (the
// consumers dead-letter later). The batch's bytes are the request's
// buffer, reused once Append returned without an error: a Sink keeps no
// reference to them.
type Sink interface {
	Append(ctx context.Context, b *event.Batch) ([]DeadLetter, error)
}

// Rejecter is a Sink that also keeps the events the collector refused
// one by one (a partial batch): on the stream's dead letters, or in the
// embedded dead-letter log. A Sink that is not one only answers them.
// Like the batch, the events' bytes are the request's buffer: a
// Rejecter keeps no reference to them.
type Rejecter interface {
	Reject(ctx context.Context, frontend string, rs []event.Rejected) error
}

// ProducerSink adapts a stream.Producer: a batch is one stream message,
// or several when larger than stream.MaxMessageBytes.
type ProducerSink struct{ P stream.Producer }

// Append appends to the stream.
func (s ProducerSink) Append(ctx context.Context, b *event.Batch) ([]DeadLetter, error) {
	return nil, s.P.Append(ctx, b.Frame(stream.MaxMessageBytes))
}

// Reject publishes the refused events on the stream's dead letters, when
// the producer can (stream.DeadLetterProducer).
func (s ProducerSink) Reject(ctx context.Context, frontend string, rs []event.Rejected) error {
	dp, ok := s.P.(stream.DeadLetterProducer)
	if !ok {
		return nil
	}
	return dp.AppendDeadLetters(ctx, "collector:"+frontend, RejectedDeadLetters(rs))
}

// RejectedDeadLetters are the dead letters of refused events: no stream
// position (partition and offset -1), their index in the batch, their
// bytes and the reason.
func RejectedDeadLetters(rs []event.Rejected) []stream.DeadLetter {
	out := make([]stream.DeadLetter, len(rs))
	for i, r := range rs {
		out[i] = stream.DeadLetter{Record: stream.Record{Partition: -1, Offset: -1, Index: int32(r.Index), Value: r.Raw},
			Reason: r.Err.Err.Error()}
	}
	return out
}

// ErrNoSink: the node has no stream and no rules to apply events with.
var ErrNoSink = errors.New("collector: events are not accepted: no --kafka, --nats or --rules")

// ErrBodyTooLarge: the request body exceeds Options.MaxBodyBytes.
var ErrBodyTooLarge = errors.New("collector: request body too large")

// Options configure a Collector. Zero fields take the defaults.
type Options struct {
	Limits       event.Limits
	MaxBodyBytes int64 // largest POST /events body (default 16 MiB)
	// Collected, when set, is called with the number of events accepted
	// and the front end ("http", "resp").
	Collected func(frontend string, n int)
	// Rejected, when set, is called with the number of events of a
	// partial batch that were refused, and the front end.
	Rejected func(frontend string, n int)
}

// Collector checks batches and appends them to its sink. Safe for
// concurrent use.
type Collector struct {
	sink Sink // nil: ErrNoSink
	opts Options
}

// New returns a Collector over sink (nil refuses every batch with ErrNoSink).
func New(sink Sink, opts Options) *Collector {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 16 << 20
	}
	return &Collector{sink: sink, opts: opts}
}

// Result is what an accepted batch answers.
type Result struct {
	Accepted int `json:"accepted"`
	// Rejected are the events refused one by one (bad JSON, a missing id,
	// type or ts, too large): they were dead-lettered, not appended.
	Rejected []RejectedEvent `json:"rejected"`
	// DeadLetters, in the embedded mode, are the events the rules could
	// not apply (index in the batch and reason); they changed nothing.
	DeadLetters []DeadLetter `json:"dead_letters,omitempty"`
}

// RejectedEvent is an event of a batch that the collector refused.
type RejectedEvent struct {
	Index int    `json:"index"`
	Error string `json:"error"`
}

// DeadLetter is an event of the batch that was dead-lettered.
type DeadLetter struct {
	Index  int    `json:"index"`
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

// Add checks a batch (JSON array or NDJSON) and appends its good events.
// Bad events are refused one by one: dead-lettered first (so a failure
// there appends nothing and the client may retry the batch), then
// answered in Result.Rejected. The whole batch is refused when it cannot
// be split into events or none is good.
func (c *Collector) Add(ctx context.Context, frontend string, body []byte) (Result, error) {
	if c.sink == nil {
		return Result{}, ErrNoSink
	}
	b, err := event.CheckBatchPartial(body, c.opts.Limits)
	if err != nil {
		return Result{}, err
	}
	res := Result{Rejected: []RejectedEvent{}}
	if len(b.Rejected) > 0 {
		if r, ok := c.sink.(Rejecter); ok {
			if err := r.Reject(ctx, frontend, b.Rejected); err != nil {
				return Result{}, err
			}
		}
		res.Rejected = make([]RejectedEvent, len(b.Rejected))
		for i, r := range b.Rejected {
			res.Rejected[i] = RejectedEvent{Index: r.Index, Error: r.Err.Err.Error()}
		}
		if c.opts.Rejected != nil {
			c.opts.Rejected(frontend, len(b.Rejected))
		}
	}
	dead, err := c.sink.Append(ctx, b)
	if err != nil {
		return Result{}, err
	}
	if b.Index != nil {
		for i := range dead { // the sink numbers the events it was given
			dead[i].Index = b.Index[dead[i].Index]
		}
	}
	if c.opts.Collected != nil {
		c.opts.Collected(frontend, len(b.Events))
	}
	res.Accepted, res.DeadLetters = len(b.Events), dead
	return res, nil
}

// Wire error codes of POST /events (docs/pipeline.md).
const (
	codeInvalidEvent = "invalid_event"
	codeTooLarge     = "too_large"
	codeUnavailable  = "unavailable"
	codeMethod       = "method_not_allowed"
	// codeStreamUnavailable: the stream (Kafka, NATS JetStream) is not
	// reachable or did not acknowledge within --events-timeout; some of
	// the batch may have been appended, and a retry is safe (event ids
	// deduplicate).
	codeStreamUnavailable = "stream_unavailable"
)

// Classify returns the wire code and HTTP status of an Add error.
func Classify(err error) (code string, status int) {
	switch {
	case errors.Is(err, event.ErrInvalid):
		return codeInvalidEvent, http.StatusBadRequest
	case errors.Is(err, event.ErrTooLarge), errors.Is(err, ErrBodyTooLarge):
		return codeTooLarge, http.StatusRequestEntityTooLarge
	case errors.Is(err, stream.ErrUnavailable):
		return codeStreamUnavailable, http.StatusServiceUnavailable
	}
	return codeUnavailable, http.StatusServiceUnavailable
}

// ServeHTTP serves POST /events: 202 with the Result once the batch is
// durable on the stream (or, embedded, applied and on disk).
func (c *Collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		writeJSON(w, http.StatusMethodNotAllowed, errorBody(codeMethod, "use POST", nil))
		return
	}
	buf := bodyBuffers.Get().(*[]byte)
	body, err := readBody(http.MaxBytesReader(w, r.Body, c.opts.MaxBodyBytes), (*buf)[:0], r.ContentLength, c.opts.MaxBodyBytes)
	if err != nil {
		bodyBuffers.Put(buf)
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			err = fmt.Errorf("%w: more than %d bytes", ErrBodyTooLarge, c.opts.MaxBodyBytes)
		} else {
			err = fmt.Errorf("%w: read body: %v", event.ErrInvalid, err)
		}
		c.fail(w, err)
		return
	}
	res, err := c.Add(r.Context(), "http", body)
	if err != nil {
		// A stream's client may still hold the body (a publish that did
		// not answer): the buffer is not reused.
		c.fail(w, err)
		return
	}
	if cap(body) <= maxPooledBody {
		*buf = body[:0]
		bodyBuffers.Put(buf)
	}
	writeJSON(w, http.StatusAccepted, struct {
		Status string `json:"status"`
		Result
	}{"accepted", res})
}

// bodyBuffers holds request body buffers for reuse (*[]byte); bodies up
// to maxPooledBody are kept.
var bodyBuffers = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledBody = 4 << 20

// readBody reads r into buf, sized from the request's Content-Length
// (when it declares one up to max) instead of growing as it reads.
func readBody(r io.Reader, buf []byte, contentLength, max int64) ([]byte, error) {
	if contentLength > 0 && contentLength <= max && int64(cap(buf)) < contentLength+1 {
		buf = make([]byte, 0, contentLength+1) // +1: the read that finds the end
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

func (c *Collector) fail(w http.ResponseWriter, err error) {
	code, status := Classify(err)
	var idx *int
	var ee *event.Error
	if errors.As(err, &ee) {
		idx = &ee.Index
	}
	writeJSON(w, status, errorBody(code, err.Error(), idx))
}
