package stream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/counterd/counterd/internal/pipeline/event"
)

// KafkaConfig names the brokers and topics. Zero fields take the defaults.
type KafkaConfig struct {
	Brokers    []string // seed brokers (required)
	Topic      string   // events topic (default "counterd-events")
	DeadTopic  string   // dead-letter topic (default "counterd-events-dead")
	Group      string   // consumer group (default "counterd")
	Partitions int32    // partitions of topics this creates (default 8)
	// Replication of topics this creates (default 1; use 3 on a real cluster).
	Replication int16
	// InstanceID, when set, makes this node a static group member (KIP-345):
	// restarted with the same id it takes its partitions back at once
	// instead of after the session timeout. counterd uses --node-id.
	InstanceID string
}

func (c *KafkaConfig) defaults() error {
	if len(c.Brokers) == 0 {
		return errors.New("stream: kafka: no brokers")
	}
	if c.Topic == "" {
		c.Topic = "counterd-events"
	}
	if c.DeadTopic == "" {
		c.DeadTopic = "counterd-events-dead"
	}
	if c.Group == "" {
		c.Group = "counterd"
	}
	if c.Partitions <= 0 {
		c.Partitions = 8
	}
	if c.Replication <= 0 {
		c.Replication = 1
	}
	if c.Topic == c.DeadTopic {
		return errors.New("stream: kafka: the events and dead-letter topics must differ")
	}
	return nil
}

// EnsureKafkaTopics creates the events and dead-letter topics when they
// do not exist; the dead-letter topic needs at least as many partitions
// as the events topic (dead letters of partition p go to partition p).
func EnsureKafkaTopics(ctx context.Context, cfg KafkaConfig) error {
	if err := cfg.defaults(); err != nil {
		return err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...))
	if err != nil {
		return fmt.Errorf("stream: kafka: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	parts := map[string]int{}
	for _, topic := range []string{cfg.Topic, cfg.DeadTopic} {
		td, err := adm.ListTopics(ctx, topic)
		if err != nil {
			return fmt.Errorf("%w: kafka: list topics: %v", ErrUnavailable, err)
		}
		if d, ok := td[topic]; ok && d.Err == nil {
			parts[topic] = len(d.Partitions)
			continue
		}
		n := cfg.Partitions
		if topic == cfg.DeadTopic && parts[cfg.Topic] > 0 {
			n = int32(parts[cfg.Topic])
		}
		res, err := adm.CreateTopics(ctx, n, cfg.Replication, nil, topic)
		if err != nil {
			return fmt.Errorf("%w: kafka: create topic %s: %v", ErrUnavailable, topic, err)
		}
		if r, ok := res[topic]; ok && r.Err != nil && !strings.Contains(r.Err.Error(), "TOPIC_ALREADY_EXISTS") {
			return fmt.Errorf("stream: kafka: create topic %s: %w", topic, r.Err)
		}
		parts[topic] = int(n)
	}
	if parts[cfg.DeadTopic] < parts[cfg.Topic] {
		return fmt.Errorf("stream: kafka: dead-letter topic %s has %d partitions, fewer than the %d of %s", cfg.DeadTopic, parts[cfg.DeadTopic], parts[cfg.Topic], cfg.Topic)
	}
	return nil
}

// KafkaProducer appends events to the events topic, several per record
// (event.Frame: the collector frames them). Copies of an event may land in different partitions: the
// consumers deduplicate by event id across partitions. Safe for concurrent
// use.
type KafkaProducer struct {
	cl        *kgo.Client
	topic     string
	deadTopic string
}

// NewKafkaProducer connects to cfg.Brokers. Call Close.
func NewKafkaProducer(cfg KafkaConfig) (*KafkaProducer, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...), kgo.DefaultProduceTopic(cfg.Topic),
		kgo.ProducerLinger(time.Millisecond), kgo.ProducerBatchMaxBytes(1<<20))
	if err != nil {
		return nil, fmt.Errorf("stream: kafka: %w", err)
	}
	return &KafkaProducer{cl: cl, topic: cfg.Topic, deadTopic: cfg.DeadTopic}, nil
}

// Append produces the messages with acks from all in-sync replicas.
func (p *KafkaProducer) Append(ctx context.Context, msgs [][]byte) error {
	recs := make([]*kgo.Record, len(msgs))
	for i, m := range msgs {
		recs[i] = &kgo.Record{Value: m}
	}
	if err := p.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("%w: kafka: produce: %v", ErrUnavailable, err)
	}
	return nil
}

// AppendDeadLetters produces dls to the dead-letter topic (any
// partition: they have no source partition) with acks from all in-sync
// replicas.
func (p *KafkaProducer) AppendDeadLetters(ctx context.Context, source string, dls []DeadLetter) error {
	recs := make([]*kgo.Record, len(dls))
	for i := range dls {
		recs[i] = &kgo.Record{Topic: p.deadTopic, Value: EncodeDeadLetter(source, &dls[i])}
	}
	if err := p.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("%w: kafka: produce dead letters: %v", ErrUnavailable, err)
	}
	return nil
}

// Ping reports whether a broker answers (a broker-only metadata request).
func (p *KafkaProducer) Ping(ctx context.Context) error {
	if err := p.cl.Ping(ctx); err != nil {
		return fmt.Errorf("%w: kafka: %v", ErrUnavailable, err)
	}
	return nil
}

// Close flushes nothing (Append waits) and disconnects.
func (p *KafkaProducer) Close() error { p.cl.Close(); return nil }

// KafkaConsumer is one member of the consumer group.
type KafkaConsumer struct {
	cfg  KafkaConfig
	cl   *kgo.Client // group member
	dlq  *kgo.Client // produces dead letters to the partition they came from
	adm  *kadm.Client
	name string

	mu sync.Mutex
	// deadHigh is, by partition, the last source position already on the
	// dead-letter topic (offset -1: none); forgotten when the partition
	// is revoked, since another member may have added to it. Guarded by mu.
	deadHigh map[int32]Record
	lag      map[int32]int64 // from the last fetch; guarded by mu
	// holding: Poll returned records that Commit has not committed yet
	// (a rebalance waits for them); guarded by mu.
	holding bool
}

// NewKafkaConsumer joins cfg.Group on cfg.Topic. Call Close.
func NewKafkaConsumer(cfg KafkaConfig) (*KafkaConsumer, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	c := &KafkaConsumer{cfg: cfg, name: "kafka:" + cfg.Topic, deadHigh: map[int32]Record{}, lag: map[int32]int64{}}
	forget := func(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
		c.mu.Lock()
		for _, p := range lost[cfg.Topic] {
			delete(c.deadHigh, p)
			delete(c.lag, p)
		}
		c.mu.Unlock()
	}
	var err error
	opts := []kgo.Opt{kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumerGroup(cfg.Group), kgo.ConsumeTopics(cfg.Topic),
		kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200 * time.Millisecond),
		kgo.OnPartitionsRevoked(forget), kgo.OnPartitionsLost(forget)}
	if cfg.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(cfg.InstanceID))
	}
	c.cl, err = kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("stream: kafka: %w", err)
	}
	c.dlq, err = kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...), kgo.DefaultProduceTopic(cfg.DeadTopic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		c.cl.Close()
		return nil, fmt.Errorf("stream: kafka: %w", err)
	}
	c.adm = kadm.NewClient(c.dlq)
	return c, nil
}

// Name is "kafka:" + the events topic.
func (c *KafkaConsumer) Name() string { return c.name }

// Poll fetches the next records (at most PollMessages stream records).
// Rebalances wait until Commit: while records it returned are not
// committed, a rebalance stays held back even across further polls, so
// that a partition is not handed to another member under records this
// one applied and has yet to commit. Records a fetch returned are
// returned even when ctx is done meanwhile: the client has moved past
// them, so dropping them would let a later commit skip them.
func (c *KafkaConsumer) Poll(ctx context.Context) ([][]Record, error) {
	for {
		fs := c.cl.PollRecords(ctx, PollMessages)
		if fs.IsClientClosed() {
			return nil, fmt.Errorf("%w: kafka: client closed", ErrUnavailable)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				ferr = fmt.Errorf("%w: kafka: fetch %s/%d: %v", ErrUnavailable, t, p, err)
			}
		})
		var out [][]Record
		c.mu.Lock()
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) == 0 {
				return
			}
			n := 0
			for _, r := range p.Records {
				n += event.Framed(r.Value)
			}
			g := make([]Record, 0, n)
			for _, r := range p.Records {
				event.EachFramed(r.Value, func(i int, ev []byte) {
					g = append(g, Record{Partition: r.Partition, Offset: r.Offset, Index: int32(i), Value: ev})
				})
			}
			c.lag[p.Partition] = p.HighWatermark - (g[len(g)-1].Offset + 1)
			out = append(out, g)
		})
		if len(out) > 0 {
			c.holding = true
		}
		holding := c.holding
		c.mu.Unlock()
		if len(out) > 0 {
			return out, nil
		}
		if !holding {
			c.cl.AllowRebalance()
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if ferr != nil {
			return nil, ferr
		}
	}
}

// headerSource carries a dead letter's source position, "offset.index".
const headerSource = "counterd-source-position"

// DeadLetter produces dls to the dead-letter topic, partition = source
// partition. Records at or before the last source position already there
// are skipped, so a redelivery after a crash publishes each once.
func (c *KafkaConsumer) DeadLetter(ctx context.Context, dls []DeadLetter) error {
	if len(dls) == 0 {
		return nil
	}
	p := dls[0].Record.Partition
	high, err := c.deadHighWater(ctx, p)
	if err != nil {
		return err
	}
	var recs []*kgo.Record
	for i := range dls {
		d := &dls[i]
		if !high.before(&d.Record) {
			continue
		}
		pos := strconv.FormatInt(d.Record.Offset, 10) + "." + strconv.FormatInt(int64(d.Record.Index), 10)
		recs = append(recs, &kgo.Record{Partition: p, Key: []byte(d.Record.Pos()), Value: EncodeDeadLetter(c.name, d),
			Headers: []kgo.RecordHeader{{Key: headerSource, Value: []byte(pos)}}})
		high = Record{Offset: d.Record.Offset, Index: d.Record.Index}
	}
	if len(recs) == 0 {
		return nil
	}
	if err := c.dlq.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		c.mu.Lock()
		delete(c.deadHigh, p) // unknown how much landed: read it back next time
		c.mu.Unlock()
		return fmt.Errorf("%w: kafka: produce dead letters: %v", ErrUnavailable, err)
	}
	c.mu.Lock()
	c.deadHigh[p] = high
	c.mu.Unlock()
	return nil
}

// deadHighWater returns the last source position of partition p on the
// dead-letter topic, reading its last record when not known.
func (c *KafkaConsumer) deadHighWater(ctx context.Context, p int32) (Record, error) {
	c.mu.Lock()
	h, ok := c.deadHigh[p]
	c.mu.Unlock()
	if ok {
		return h, nil
	}
	none := Record{Offset: -1}
	ends, err := c.adm.ListEndOffsets(ctx, c.cfg.DeadTopic)
	if err != nil {
		return none, fmt.Errorf("%w: kafka: dead-letter end offsets: %v", ErrUnavailable, err)
	}
	end, ok := ends.Lookup(c.cfg.DeadTopic, p)
	if !ok || end.Err != nil {
		return none, fmt.Errorf("stream: kafka: dead-letter topic %s has no partition %d", c.cfg.DeadTopic, p)
	}
	h = none
	if end.Offset > 0 {
		rd, err := kgo.NewClient(kgo.SeedBrokers(c.cfg.Brokers...),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{c.cfg.DeadTopic: {p: kgo.NewOffset().At(end.Offset - 1)}}))
		if err != nil {
			return none, fmt.Errorf("stream: kafka: %w", err)
		}
		defer rd.Close()
		for read := false; !read; {
			fs := rd.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				return none, err
			}
			var ferr error
			fs.EachError(func(_ string, _ int32, err error) { ferr = err })
			if ferr != nil {
				return none, fmt.Errorf("%w: kafka: read dead letters: %v", ErrUnavailable, ferr)
			}
			fs.EachRecord(func(r *kgo.Record) {
				read = true
				for _, hd := range r.Headers {
					if hd.Key != headerSource {
						continue
					}
					o, i, _ := strings.Cut(string(hd.Value), ".")
					off, err1 := strconv.ParseInt(o, 10, 64)
					idx, err2 := strconv.ParseInt(i, 10, 32)
					if r := (Record{Offset: off, Index: int32(idx)}); err1 == nil && err2 == nil && h.before(&r) {
						h = r
					}
				}
			})
		}
	}
	c.mu.Lock()
	c.deadHigh[p] = h
	c.mu.Unlock()
	return h, nil
}

// Commit commits, for each partition, the offset after its last record
// in groups (of one or more polls), then lets a pending rebalance go
// ahead. Groups holds every record polled since the last Commit: Run
// commits all it polled.
func (c *KafkaConsumer) Commit(ctx context.Context, groups [][]Record) error {
	defer func() {
		c.mu.Lock()
		c.holding = false
		c.mu.Unlock()
		c.cl.AllowRebalance()
	}()
	var recs []*kgo.Record
	for _, g := range groups {
		if len(g) == 0 {
			continue
		}
		last := g[len(g)-1]
		recs = append(recs, &kgo.Record{Topic: c.cfg.Topic, Partition: last.Partition, Offset: last.Offset, LeaderEpoch: -1})
	}
	if err := c.cl.CommitRecords(ctx, recs...); err != nil {
		return fmt.Errorf("%w: kafka: commit: %v", ErrUnavailable, err)
	}
	return nil
}

// Lag returns, by partition, the high watermark minus the next offset, as
// of the last fetch.
func (c *KafkaConsumer) Lag(context.Context) map[int32]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[int32]int64, len(c.lag))
	for p, l := range c.lag {
		out[p] = l
	}
	return out
}

// Close leaves the group without committing more and disconnects. A
// rebalance a polled but uncommitted group still holds back is let go
// first (its records are delivered again and skipped by the markers):
// otherwise leaving the group would wait for it forever.
func (c *KafkaConsumer) Close() error {
	c.cl.CloseAllowingRebalance()
	c.dlq.Close()
	return nil
}
