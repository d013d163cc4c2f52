// Package pipeline wires the impressions pipeline into a counterd node:
// the collector (POST /events, RESP EVENTS.ADD), a stream (Kafka with
// --kafka, NATS JetStream with --nats) and the consumer that applies the
// rules (--rules) to the node's backend exactly once. With neither stream
// flag the collector applies each batch at once through the engine, with
// sync durability, so the pipeline works on one machine. docs/pipeline.md
// has the details and a worked example.
package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/ctxwait"
	"github.com/counterd/counterd/internal/pipeline/collector"
	"github.com/counterd/counterd/internal/pipeline/consumer"
	"github.com/counterd/counterd/internal/pipeline/event"
	"github.com/counterd/counterd/internal/pipeline/rules"
	"github.com/counterd/counterd/internal/pipeline/stream"
	"github.com/counterd/counterd/internal/tracing"
)

// Config is the pipeline part of counterd's configuration.
type Config struct {
	Kafka stream.KafkaConfig     // Brokers from --kafka; empty: no Kafka
	NATS  stream.JetStreamConfig // URL from --nats; empty: no NATS
	Rules string                 // --rules: rules file, reloaded on SIGHUP (empty: collect only)
	// NoConsume makes a node with a stream collect only (--events-no-consume).
	NoConsume    bool
	MaxBodyBytes int64 // --events-max-body: largest POST /events body (default 16 MiB)
	Limits       event.Limits
	// EventsTimeout bounds how long an append to the stream waits for its
	// acknowledgement before POST /events answers 503 stream_unavailable
	// (--events-timeout; default DefaultEventsTimeout).
	EventsTimeout time.Duration
	// FailFast makes Open fail when the stream is unreachable at start
	// (--events-fail-fast) instead of retrying in the background.
	FailFast bool
	// AllowedLateness and MaxSkew bound events' own times
	// (--events-allowed-lateness, --events-max-skew; zero: the defaults,
	// consumer.DefaultAllowedLateness and DefaultMaxSkew). See
	// docs/pipeline.md, "Event time".
	AllowedLateness time.Duration
	MaxSkew         time.Duration
	// CommitInterval is how long the consumer applies polls before it
	// waits for their durability and commits them to the stream
	// (--events-commit-interval; zero: consumer.DefaultCommitInterval;
	// a poll that drains the stream commits at once). See
	// docs/pipeline.md, "Commit interval".
	CommitInterval time.Duration
	// DeadLetterFile keeps the dead letters of the embedded mode (no
	// stream) across restarts; counterd uses events-dead.ndjson in its
	// data directory. Empty: they are only answered and logged.
	DeadLetterFile string
	// Tracer, when set, traces each batch consumed from the stream and
	// its apply (consumer.Applier.SetTracer); default nil: none.
	Tracer *tracing.Tracer
}

// Enabled reports whether the config asks for the pipeline at all.
func (c *Config) Enabled() bool {
	return len(c.Kafka.Brokers) > 0 || c.NATS.URL != "" || c.Rules != ""
}

// Validate checks the combination of settings.
func (c *Config) Validate() error {
	if len(c.Kafka.Brokers) > 0 && c.NATS.URL != "" {
		return errors.New("pipeline: --kafka and --nats are exclusive")
	}
	if c.NoConsume && len(c.Kafka.Brokers) == 0 && c.NATS.URL == "" {
		return errors.New("pipeline: --events-no-consume needs --kafka or --nats")
	}
	return nil
}

// Pipeline is a running pipeline. Close stops it.
type Pipeline struct {
	cfg     Config
	be      contract.Backend
	log     *slog.Logger
	m       *consumer.Metrics
	col     *collector.Collector
	applier *consumer.Applier // nil without rules
	dead    *deadLog          // embedded mode with DeadLetterFile; else nil
	link    *link             // with a stream; else nil

	mu      sync.Mutex // guards closers while the stream connects in the background
	closers []func() error
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	closeMu sync.Once
}

// Open starts the pipeline over be: connects the stream, loads the rules,
// attaches their rollups and starts the consumer. reg may be nil.
func Open(ctx context.Context, cfg Config, be contract.Backend, reg prometheus.Registerer, log *slog.Logger) (*Pipeline, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Pipeline{cfg: cfg, be: be, log: log, m: consumer.NewMetrics(reg)}
	ok := false
	defer func() {
		if !ok {
			p.Close()
		}
	}()
	if cfg.Rules != "" {
		rs, err := p.loadRules(ctx)
		if err != nil {
			return nil, err
		}
		if p.applier, err = consumer.NewApplier(be, rs, cfg.Limits, p.m); err != nil {
			return nil, err
		}
		p.applier.SetEventTime(consumer.EventTime{AllowedLateness: cfg.AllowedLateness, MaxSkew: cfg.MaxSkew})
		p.applier.SetTracer(cfg.Tracer)
		if cfg.CommitInterval > 0 {
			p.applier.SetCommitInterval(cfg.CommitInterval)
		}
	}
	var sink collector.Sink
	rctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	switch {
	case len(cfg.Kafka.Brokers) > 0 || cfg.NATS.URL != "":
		name := cfg.streamName()
		p.link = newLink(name, cfg.EventsTimeout, reg, log)
		sink = collector.ProducerSink{P: p.link}
		// The first attempt waits at most --events-timeout unless the
		// node is to exit on failure: serving the rest is not held up by
		// a stream that does not answer.
		first := connectTimeout
		if !cfg.FailFast {
			first = min(first, p.link.timeout)
		}
		err := p.connect(ctx, rctx, first)
		switch {
		case err == nil:
		case cfg.FailFast || !errors.Is(err, stream.ErrUnavailable) || ctx.Err() != nil:
			return nil, err
		default:
			p.link.notYet(err)
			log.Warn("pipeline: stream unreachable at start; serving everything else and retrying (--events-fail-fast exits instead)",
				"stream", name, "err", err)
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.reconnect(rctx)
			}()
		}
	case p.applier != nil:
		if cfg.DeadLetterFile != "" {
			dl, err := openDeadLog(cfg.DeadLetterFile, defaultDeadLogBytes)
			if err != nil {
				return nil, err
			}
			p.dead = dl
			p.closers = append(p.closers, dl.Close)
		}
		sink = embeddedSink{a: p.applier, log: log, dead: p.dead}
	}
	p.col = collector.New(sink, collector.Options{Limits: cfg.Limits, MaxBodyBytes: cfg.MaxBodyBytes,
		Collected: func(fe string, n int) { p.m.Collected.WithLabelValues(fe).Add(float64(n)) },
		Rejected:  func(fe string, n int) { p.m.Rejected.WithLabelValues(fe).Add(float64(n)) }})
	if p.applier != nil {
		p.reloadOnHUP(rctx)
	}
	ok = true
	return p, nil
}

// streamName names the stream as the consumers do ("kafka:<topic>",
// "nats:<stream>").
func (c *Config) streamName() string {
	if len(c.Kafka.Brokers) > 0 {
		if c.Kafka.Topic == "" {
			return "kafka:counterd-events"
		}
		return "kafka:" + c.Kafka.Topic
	}
	if c.NATS.Stream == "" {
		return "nats:COUNTERD_EVENTS"
	}
	return "nats:" + c.NATS.Stream
}

// Start-up connection: one attempt's longest wait, and the backoff
// between attempts while the stream cannot be reached.
const (
	connectTimeout = 10 * time.Second
	retryFirst     = time.Second
	retryMax       = 30 * time.Second
)

// connect makes one attempt, of at most timeout, to reach the stream: creates the topics or
// the stream, the producer and, on a consuming node, the consumer, then
// hands the producer to the link and starts the probe and the consumer
// loop under rctx.
func (p *Pipeline) connect(ctx, rctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cfg := p.cfg
	consume := p.applier != nil && !cfg.NoConsume
	var (
		prod    stream.Producer
		ping    func(context.Context) error
		cons    stream.Consumer
		closers []func() error
	)
	if len(cfg.Kafka.Brokers) > 0 {
		if err := stream.EnsureKafkaTopics(ctx, cfg.Kafka); err != nil {
			return err
		}
		kp, err := stream.NewKafkaProducer(cfg.Kafka)
		if err != nil {
			return err
		}
		prod, ping, closers = kp, kp.Ping, append(closers, kp.Close)
		if consume {
			kc, err := stream.NewKafkaConsumer(cfg.Kafka)
			if err != nil {
				kp.Close()
				return err
			}
			cons = kc
		}
	} else {
		js, err := stream.OpenJetStream(ctx, cfg.NATS)
		if err != nil {
			return err
		}
		if consume {
			if err := js.Consume(ctx); err != nil {
				js.Close()
				return err
			}
			cons = js
		}
		prod, ping, closers = js, js.Ping, append(closers, js.Close)
	}
	p.mu.Lock()
	if rctx.Err() != nil { // closing
		p.mu.Unlock()
		if cons != nil {
			cons.Close()
		}
		for _, c := range closers {
			c()
		}
		return rctx.Err()
	}
	p.closers = append(p.closers, closers...)
	p.mu.Unlock()
	p.link.connected(prod, ping)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.link.watch(rctx)
	}()
	if cons != nil {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			_ = consumer.Run(rctx, p.applier, cons, p.log)
			cons.Close()
		}()
		p.log.Info("pipeline consuming", "stream", cons.Name(), "rules", cfg.Rules)
	}
	return nil
}

// reconnect retries connect with backoff until it succeeds or ctx is
// done, logging each failed attempt once.
func (p *Pipeline) reconnect(ctx context.Context) {
	wait := retryFirst
	for attempt := 2; ; attempt++ {
		if ctxwait.Sleep(ctx, wait) != nil {
			return
		}
		err := p.connect(ctx, ctx, connectTimeout)
		if err == nil || ctx.Err() != nil {
			return
		}
		p.link.notYet(err)
		wait = min(2*wait, retryMax)
		p.log.Warn("pipeline: stream still unreachable, retrying", "stream", p.link.name, "attempt", attempt, "in", wait, "err", err)
	}
}

// Stream returns the stream's state as this node sees it; ok is false
// without a stream (embedded mode).
func (p *Pipeline) Stream() (st StreamState, ok bool) {
	if p.link == nil {
		return StreamState{}, false
	}
	return p.link.State(), true
}

// loadRules reads and compiles the rules file and attaches its rollups.
func (p *Pipeline) loadRules(ctx context.Context) (*rules.Set, error) {
	data, err := os.ReadFile(p.cfg.Rules)
	if err != nil {
		return nil, fmt.Errorf("pipeline: --rules: %w", err)
	}
	rs, err := rules.Load(p.cfg.Rules, data)
	if err != nil {
		return nil, err
	}
	for _, r := range rs.Rules {
		if r.RollupKey == "" {
			continue
		}
		if cur, ok, err := p.be.Rollup(ctx, r.RollupKey); err == nil && ok && cur == r.Rollup {
			continue
		}
		if err := p.be.SetRollup(ctx, r.RollupKey, r.Rollup); err != nil {
			return nil, fmt.Errorf("pipeline: rule %q rollup %q: %w", r.Name, r.RollupKey, err)
		}
	}
	return rs, nil
}

// Reload reads the rules file again; on an error the old rules stay.
func (p *Pipeline) Reload(ctx context.Context) error {
	if p.applier == nil {
		return errors.New("pipeline: no --rules to reload")
	}
	rs, err := p.loadRules(ctx)
	if err != nil {
		return err
	}
	p.applier.SetRules(rs)
	return nil
}

func (p *Pipeline) reloadOnHUP(ctx context.Context) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if err := p.Reload(ctx); err != nil {
					p.log.Error("pipeline: rules not reloaded, the old ones stay", "err", err)
				} else {
					p.log.Info("pipeline: rules reloaded", "rules", p.cfg.Rules, "count", len(p.applier.Rules().Rules))
				}
			}
		}
	}()
}

// Handler serves POST /events, GET /events/dead and GET /events/status.
func (p *Pipeline) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/events/dead" {
			p.serveDead(w, r)
			return
		}
		if r.URL.Path == "/events/status" {
			p.serveStatus(w, r)
			return
		}
		p.col.ServeHTTP(w, r)
	})
}

// ErrNoDeadLetterFile: dead letters are on the stream (or not kept).
var ErrNoDeadLetterFile = errors.New("pipeline: this node keeps no dead letters: with --kafka or --nats they are on the dead-letter topic or subject")

// DeadLetters returns the newest n dead letters the embedded mode kept,
// oldest first, in their stream form (docs/pipeline.md).
func (p *Pipeline) DeadLetters(n int) ([]json.RawMessage, error) {
	if p.dead == nil {
		return nil, ErrNoDeadLetterFile
	}
	return p.dead.Last(n)
}

// serveDead serves GET /events/dead?limit=N (default 100, at most 10000).
func (p *Pipeline) serveDead(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	fail := func(status int, code, msg string) {
		w.WriteHeader(status)
		b, _ := json.Marshal(map[string]any{"status": "error", "error": map[string]string{"code": code, "message": msg}})
		w.Write(append(b, '\n'))
	}
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		fail(http.StatusMethodNotAllowed, "method_not_allowed", "use GET")
		return
	}
	n := 100
	if s := r.URL.Query().Get("limit"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > 10000 {
			fail(http.StatusBadRequest, "invalid_argument", "limit must be 1..10000")
			return
		}
		n = v
	}
	dls, err := p.DeadLetters(n)
	if errors.Is(err, ErrNoDeadLetterFile) {
		fail(http.StatusNotFound, "not_found", err.Error())
		return
	}
	if err != nil {
		fail(http.StatusServiceUnavailable, "unavailable", err.Error())
		return
	}
	if dls == nil {
		dls = []json.RawMessage{}
	}
	b, _ := json.Marshal(map[string]any{"status": "ok", "dead_letters": dls})
	w.Write(append(b, '\n'))
}

// Status is the answer of GET /events/status.
type Status struct {
	Status string `json:"status"` // "ok"
	// Consuming: this node applies events (--rules, and not
	// --events-no-consume).
	Consuming bool            `json:"consuming"`
	Stream    string          `json:"stream,omitempty"` // "kafka:<topic>", "nats:<stream>"; empty without one
	EventTime EventTimeStatus `json:"event_time"`
}

// EventTimeStatus is the event-time part of Status (docs/pipeline.md,
// "Event time").
type EventTimeStatus struct {
	// Watermark: the newest event time this node's consumer applied
	// (RFC 3339; null before the first).
	Watermark       *time.Time `json:"watermark"`
	AllowedLateness string     `json:"allowed_lateness"` // Go duration text
	MaxSkew         string     `json:"max_skew"`
	TooLate         int64      `json:"too_late"`  // events dead-lettered too_late since start
	TooEarly        int64      `json:"too_early"` // events dead-lettered too_early since start
}

// Status reports whether the node consumes and its event-time progress.
func (p *Pipeline) Status() Status {
	st := Status{Status: "ok"}
	if p.link != nil {
		st.Stream = p.cfg.streamName()
	}
	ets := consumer.EventTimeStatus{AllowedLateness: p.cfg.AllowedLateness, MaxSkew: p.cfg.MaxSkew}
	if ets.AllowedLateness <= 0 {
		ets.AllowedLateness = consumer.DefaultAllowedLateness
	}
	if ets.MaxSkew <= 0 {
		ets.MaxSkew = consumer.DefaultMaxSkew
	}
	if p.applier != nil {
		st.Consuming = p.link == nil || !p.cfg.NoConsume
		ets = p.applier.EventTimeStatus()
	}
	st.EventTime = EventTimeStatus{AllowedLateness: ets.AllowedLateness.String(), MaxSkew: ets.MaxSkew.String(),
		TooLate: ets.TooLate, TooEarly: ets.TooEarly}
	if !ets.Watermark.IsZero() {
		w := ets.Watermark
		st.EventTime.Watermark = &w
	}
	return st
}

// serveStatus serves GET /events/status.
func (p *Pipeline) serveStatus(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		w.WriteHeader(http.StatusMethodNotAllowed)
		b, _ := json.Marshal(map[string]any{"status": "error", "error": map[string]string{"code": "method_not_allowed", "message": "use GET"}})
		w.Write(append(b, '\n'))
		return
	}
	b, _ := json.Marshal(p.Status())
	w.Write(append(b, '\n'))
}

// AddEvents appends a batch from another front end (RESP EVENTS.ADD) and
// returns how many events were accepted.
func (p *Pipeline) AddEvents(ctx context.Context, body []byte) (collector.Result, error) {
	return p.col.Add(ctx, "resp", body)
}

// Close stops the consumer (what it applied but did not commit is
// redelivered and skipped) and disconnects. Safe to call twice.
func (p *Pipeline) Close() error {
	p.closeMu.Do(func() {
		if p.cancel != nil {
			p.cancel()
		}
		p.wg.Wait()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.closers {
			_ = c()
		}
	})
	return nil
}

// embeddedSink applies a batch at once (no stream): durable before it
// returns, dead letters in the answer and the log.
type embeddedSink struct {
	a    *consumer.Applier
	log  *slog.Logger
	dead *deadLog // nil: not kept
}

// Reject keeps the refused events in the dead-letter log, when there is
// one, and logs them.
func (s embeddedSink) Reject(_ context.Context, frontend string, rs []event.Rejected) error {
	for _, r := range rs {
		s.log.Warn("pipeline: event refused", "index", r.Index, "reason", r.Err.Err.Error())
	}
	if s.dead == nil {
		return nil
	}
	return s.dead.Append("collector:"+frontend, collector.RejectedDeadLetters(rs))
}

func (s embeddedSink) Append(ctx context.Context, b *event.Batch) ([]collector.DeadLetter, error) {
	seq := time.Now().UnixNano()
	dead, err := s.a.Events(ctx, seq, b.Events)
	if err != nil {
		return nil, err
	}
	if s.dead != nil {
		if err := s.dead.Append("http", dead); err != nil {
			return nil, err
		}
	}
	out := make([]collector.DeadLetter, len(dead))
	for i, d := range dead {
		idx := int(d.Record.Offset - seq)
		ev, _ := event.Decode(b.Events[idx], event.Limits{}) // checked by the collector
		out[i] = collector.DeadLetter{Index: idx, ID: ev.ID, Reason: d.Reason}
		s.log.Warn("pipeline: dead letter", "id", ev.ID, "reason", d.Reason)
	}
	return out, nil
}
