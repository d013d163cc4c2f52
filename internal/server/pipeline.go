package server

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/counterd/counterd/internal/api/resp"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/pipeline"
	"github.com/counterd/counterd/internal/pipeline/stream"
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
}

func defaultEventsConfig() EventsConfig {
	return EventsConfig{KafkaTopic: "counterd-events", KafkaDeadTopic: "counterd-events-dead", KafkaGroup: "counterd", KafkaPartitions: 8,
		NATSStream: "COUNTERD_EVENTS", NATSSubject: "counterd.events", NATSDeadSubject: "counterd.events.dead", NATSConsumer: "counterd",
		NATSAckWait: 30 * time.Second,
		MaxBody:     16 << 20}
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
	}
}

func (e *EventsConfig) validate() error {
	if e.KafkaPartitions <= 0 || e.KafkaPartitions > 1<<16 || e.MaxBody <= 0 || e.NATSAckWait <= 0 {
		return errors.New("server: --kafka-partitions, --events-max-body and --nats-ack-wait must be positive")
	}
	pc := e.pipeline("")
	return pc.Validate()
}

// openPipeline starts the pipeline when a flag asks for it (nil otherwise).
func openPipeline(ctx context.Context, cfg Config, be engine.Backend, reg prometheus.Registerer, log *slog.Logger) (*pipeline.Pipeline, error) {
	pc := cfg.Events.pipeline(cfg.NodeID)
	if !pc.Enabled() {
		return nil, nil
	}
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
		return res.Accepted, err
	}
}

func atoi(s string) (int, error) { return strconv.Atoi(s) }

func atoi64(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) }
