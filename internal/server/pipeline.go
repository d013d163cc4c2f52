package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/counterd/counterd/internal/api/resp"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/pipeline"
	"github.com/counterd/counterd/internal/pipeline/consumer"
	"github.com/counterd/counterd/internal/pipeline/stream"
	"github.com/counterd/counterd/internal/tracing"
)

// EventsConfig is the pipeline's flags (docs/pipeline.md).
type EventsConfig struct {
	Kafka           string        // --kafka: comma-separated Kafka seed brokers (default none)
	KafkaTopic      string        // --kafka-topic (default counterd-events)
	KafkaDeadTopic  string        // --kafka-dead-topic (default counterd-events-dead)
	KafkaGroup      string        // --kafka-group (default counterd)
	KafkaPartitions int           // --kafka-partitions: of the topics counterd creates (default 8)
	NATS            string        // --nats: NATS server URL with JetStream (default none)
	NATSStream      string        // --nats-stream (default COUNTERD_EVENTS)
	NATSSubject     string        // --nats-subject (default counterd.events)
	NATSDeadSubject string        // --nats-dead-subject (default counterd.events.dead)
	NATSConsumer    string        // --nats-consumer: durable consumer name (default counterd)
	NATSAckWait     time.Duration // --nats-ack-wait: redelivery delay of messages a dead consumer fetched (default 30s)
	Rules           string        // --rules: rules file, reloaded on SIGHUP (default none)
	NoConsume       bool          // --events-no-consume: collect only (default false)
	MaxBody         int64         // --events-max-body: largest POST /events body (default 16 MiB)
	Timeout         time.Duration // --events-timeout: longest wait for the stream's acknowledgement before 503 stream_unavailable (default 5s)
	FailFast        bool          // --events-fail-fast: exit at start when the stream is unreachable instead of retrying (default false)
	AllowedLateness time.Duration // --events-allowed-lateness: events older than now minus it skip window rules (default 1h)
	MaxSkew         time.Duration // --events-max-skew: event times (events' ts, increments' ts/AT) further ahead of the clock are refused (default 5m)
	CommitInterval  time.Duration // --events-commit-interval: longest the consumer applies polls before one durability wait and one stream commit (default 1s)
}

func defaultEventsConfig() EventsConfig {
	return EventsConfig{KafkaTopic: "counterd-events", KafkaDeadTopic: "counterd-events-dead", KafkaGroup: "counterd", KafkaPartitions: 8,
		NATSStream: "COUNTERD_EVENTS", NATSSubject: "counterd.events", NATSDeadSubject: "counterd.events.dead", NATSConsumer: "counterd",
		NATSAckWait: 30 * time.Second,
		MaxBody:     16 << 20, Timeout: pipeline.DefaultEventsTimeout,
		AllowedLateness: consumer.DefaultAllowedLateness, MaxSkew: engine.DefaultMaxSkew,
		CommitInterval: consumer.DefaultCommitInterval}
}

func (c *Config) bindEventsFlags(fs *flag.FlagSet) {
	e := &c.Events
	str := func(p *string, name, usage string) { fs.StringVar(p, name, envStr(name, *p), usage) }
	str(&e.Kafka, "kafka", "event pipeline on Kafka: comma-separated seed brokers (docs/pipeline.md)")
	str(&e.KafkaTopic, "kafka-topic", "Kafka topic of events")
	str(&e.KafkaDeadTopic, "kafka-dead-topic", "Kafka topic of dead letters (at least as many partitions as --kafka-topic)")
	str(&e.KafkaGroup, "kafka-group", "Kafka consumer group of the counterd nodes")
	fs.IntVar(&e.KafkaPartitions, "kafka-partitions", envParse(c, "kafka-partitions", e.KafkaPartitions, atoi), "partitions of the Kafka topics counterd creates")
	str(&e.NATS, "nats", "event pipeline on NATS JetStream: server URL (docs/pipeline.md)")
	str(&e.NATSStream, "nats-stream", "JetStream stream of events and dead letters")
	str(&e.NATSSubject, "nats-subject", "NATS subject of events")
	str(&e.NATSDeadSubject, "nats-dead-subject", "NATS subject of dead letters")
	str(&e.NATSConsumer, "nats-consumer", "JetStream durable consumer shared by the counterd nodes")
	fs.DurationVar(&e.NATSAckWait, "nats-ack-wait", envParse(c, "nats-ack-wait", e.NATSAckWait, time.ParseDuration), "how long a message fetched by a consumer that died waits before it is delivered again")
	str(&e.Rules, "rules", "pipeline rules file (YAML with CEL expressions); SIGHUP reloads it")
	fs.BoolVar(&e.NoConsume, "events-no-consume", envParse(c, "events-no-consume", e.NoConsume, parseBool), "with --kafka or --nats: collect events but do not consume them on this node")
	fs.Int64Var(&e.MaxBody, "events-max-body", envParse(c, "events-max-body", e.MaxBody, atoi64), "largest POST /events body in bytes")
	fs.DurationVar(&e.Timeout, "events-timeout", envParse(c, "events-timeout", e.Timeout, time.ParseDuration), "with --kafka or --nats: longest wait for the stream to acknowledge a batch before POST /events answers 503 stream_unavailable")
	fs.DurationVar(&e.AllowedLateness, "events-allowed-lateness", envParse(c, "events-allowed-lateness", e.AllowedLateness, time.ParseDuration), "events whose ts is older than now minus this skip window rules (an event left with no rule is dead-lettered too_late); rollups take any ts inside their retention")
	fs.DurationVar(&e.MaxSkew, "events-max-skew", envParse(c, "events-max-skew", e.MaxSkew, time.ParseDuration), "event times further ahead of the clock are refused: events (dead-lettered too_early), and the ts of HTTP increments and the AT of RESP COUNTERD.INCRBY/PFADD (invalid argument)")
	fs.DurationVar(&e.CommitInterval, "events-commit-interval", envParse(c, "events-commit-interval", e.CommitInterval, time.ParseDuration), "longest the consumer applies polls of a busy stream before it waits once for their durability and commits them all (a poll that drains the stream commits at once); each commit costs an engine flush")
	fs.BoolVar(&e.FailFast, "events-fail-fast", envParse(c, "events-fail-fast", e.FailFast, parseBool), "with --kafka or --nats: exit at start when the stream is unreachable instead of serving everything else and retrying")
}

func (e *EventsConfig) pipeline(nodeID string) pipeline.Config {
	var brokers []string
	for _, b := range strings.Split(e.Kafka, ",") {
		if b = strings.TrimSpace(b); b != "" {
			brokers = append(brokers, b)
		}
	}
	return pipeline.Config{
		Kafka: stream.KafkaConfig{Brokers: brokers, Topic: e.KafkaTopic, DeadTopic: e.KafkaDeadTopic, Group: e.KafkaGroup,
			Partitions: int32(e.KafkaPartitions), InstanceID: nodeID},
		NATS: stream.JetStreamConfig{URL: e.NATS, Stream: e.NATSStream, Subject: e.NATSSubject,
			DeadSubject: e.NATSDeadSubject, Consumer: e.NATSConsumer, AckWait: e.NATSAckWait},
		Rules: e.Rules, NoConsume: e.NoConsume, MaxBodyBytes: e.MaxBody,
		EventsTimeout: e.Timeout, FailFast: e.FailFast,
		AllowedLateness: e.AllowedLateness, MaxSkew: e.MaxSkew, CommitInterval: e.CommitInterval,
	}
}

func (e *EventsConfig) validate() error {
	if e.KafkaPartitions <= 0 || e.KafkaPartitions > 1<<16 || e.MaxBody <= 0 || e.NATSAckWait <= 0 {
		return errors.New("server: --kafka-partitions, --events-max-body and --nats-ack-wait must be positive")
	}
	if e.Timeout <= 0 {
		return errors.New("server: --events-timeout must be positive")
	}
	if e.AllowedLateness <= 0 || e.MaxSkew <= 0 || e.CommitInterval <= 0 {
		return errors.New("server: --events-allowed-lateness, --events-max-skew and --events-commit-interval must be positive")
	}
	pc := e.pipeline("")
	return pc.Validate()
}

// openPipeline starts the pipeline when a flag asks for it (nil otherwise).
func openPipeline(ctx context.Context, cfg Config, be contract.Backend, tp *tracing.Tracer, reg prometheus.Registerer, log *slog.Logger) (*pipeline.Pipeline, error) {
	pc := cfg.Events.pipeline(cfg.NodeID)
	if !pc.Enabled() {
		return nil, nil
	}
	pc.Tracer = tp
	pc.DeadLetterFile = filepath.Join(cfg.Data, "events-dead.ndjson") // used without a stream only
	return pipeline.Open(ctx, pc, be, reg, log)
}

// eventsAdder is the RESP EVENTS.ADD hook of p (nil without a pipeline).
func eventsAdder(p *pipeline.Pipeline) resp.EventsAdder {
	if p == nil {
		return nil
	}
	return func(ctx context.Context, b []byte) (int, error) {
		res, err := p.AddEvents(ctx, b)
		if errors.Is(err, stream.ErrUnavailable) {
			// RESP answers "-ERR stream_unavailable: ...", the code of
			// POST /events' 503 (docs/resp.md).
			err = fmt.Errorf("stream_unavailable: %w", err)
		}
		return res.Accepted, err
	}
}

// readyWithStream serves GET /readyz through next and, on a node with a
// stream, adds the named check "stream" to the answer's "checks" object
// (docs/operations.md, Readiness). The stream does not change the status
// by default: reads and counter writes work without it, so a load
// balancer of the whole API keeps the node. GET /readyz?for=events is for
// a load balancer of POST /events only: 503 while the stream is not
// connected.
func readyWithStream(streamState func() (pipeline.StreamState, bool), next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st, ok := streamState()
		if !ok || r.Method != http.MethodGet {
			next.ServeHTTP(w, r)
			return
		}
		rec := &bufferedResponse{header: http.Header{}, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		var body map[string]json.RawMessage
		if json.Unmarshal(rec.body.Bytes(), &body) != nil || body == nil {
			rec.flush(w) // not a JSON object: left as it is
			return
		}
		checks := map[string]json.RawMessage{}
		if c, ok := body["checks"]; ok {
			_ = json.Unmarshal(c, &checks)
		}
		checks["stream"], _ = json.Marshal(st)
		body["checks"], _ = json.Marshal(checks)
		status := rec.status
		if !st.OK && r.URL.Query().Get("for") == "events" && status < 300 {
			status = http.StatusServiceUnavailable
			body["status"] = json.RawMessage(`"error"`)
			body["error"], _ = json.Marshal(map[string]string{"code": "stream_unavailable",
				"message": "stream " + st.Stream + " " + st.State + ": " + st.Error})
		}
		b, _ := json.Marshal(body)
		rec.body.Reset()
		rec.body.Write(append(b, '\n'))
		rec.header.Del("Content-Length")
		rec.status = status
		rec.flush(w)
	})
}

// bufferedResponse holds an answer to edit before it is sent.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header         { return b.header }
func (b *bufferedResponse) WriteHeader(status int)      { b.status = status }
func (b *bufferedResponse) Write(p []byte) (int, error) { return b.body.Write(p) }

func (b *bufferedResponse) flush(w http.ResponseWriter) {
	for k, v := range b.header {
		w.Header()[k] = v
	}
	w.WriteHeader(b.status)
	w.Write(b.body.Bytes())
}

func atoi(s string) (int, error) { return strconv.Atoi(s) }

func atoi64(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) }
