package stream

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/counterd/counterd/internal/pipeline/event"
)

// JetStreamConfig names the server, stream, subjects and durable consumer.
// Zero fields take the defaults.
type JetStreamConfig struct {
	URL         string // NATS server URL (required)
	Stream      string // stream name (default "COUNTERD_EVENTS")
	Subject     string // events subject (default "counterd.events")
	DeadSubject string // dead-letter subject, in the same stream (default "counterd.events.dead")
	Consumer    string // durable consumer shared by every node (default "counterd")
	// Duplicates is the stream's deduplication window (Nats-Msg-Id) when
	// this creates the stream (default 2m). It must outlast a consumer's
	// restart for dead letters to be published once.
	Duplicates time.Duration
	// AckWait is how long a message fetched by a consumer that died waits
	// before it is delivered again (default 30s). A live consumer tells the
	// server it is still working on the messages it holds every AckWait/3,
	// so a batch that takes longer to apply (an overloaded node, an owner
	// being handed off) is not delivered to another node meanwhile.
	AckWait time.Duration
}

func (c *JetStreamConfig) defaults() error {
	if c.URL == "" {
		return errors.New("stream: nats: no URL")
	}
	if c.Stream == "" {
		c.Stream = "COUNTERD_EVENTS"
	}
	if c.Subject == "" {
		c.Subject = "counterd.events"
	}
	if c.DeadSubject == "" {
		c.DeadSubject = "counterd.events.dead"
	}
	if c.Consumer == "" {
		c.Consumer = "counterd"
	}
	if c.Duplicates <= 0 {
		c.Duplicates = 2 * time.Minute
	}
	if c.AckWait <= 0 {
		c.AckWait = 30 * time.Second
	}
	if c.Subject == c.DeadSubject {
		return errors.New("stream: nats: the events and dead-letter subjects must differ")
	}
	return nil
}

// JetStream is a connection to a NATS server with JetStream: a Producer,
// and a Consumer once Consume is called. Safe for concurrent use by one
// collector and one consumer loop.
type JetStream struct {
	cfg  JetStreamConfig
	nc   *nats.Conn
	js   jetstream.JetStream
	cons jetstream.Consumer
	name string
	idle time.Duration // current empty-poll backoff

	// held are the messages polled and not yet acknowledged, by stream
	// sequence; keepHeld marks them in progress until Close (stop).
	mu   sync.Mutex
	held map[uint64]jetstream.Msg
	stop chan struct{}
}

// maxAsyncPending bounds unacknowledged asynchronous publishes.
const maxAsyncPending = 16384

// OpenJetStream connects and creates the stream when it does not exist.
// Call Close.
func OpenJetStream(ctx context.Context, cfg JetStreamConfig) (*JetStream, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	nc, err := nats.Connect(cfg.URL, nats.Name("counterd"), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("%w: nats: %v", ErrUnavailable, err)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(maxAsyncPending))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("stream: nats: %w", err)
	}
	s := &JetStream{cfg: cfg, nc: nc, js: js, name: "nats:" + cfg.Stream, held: map[uint64]jetstream.Msg{}, stop: make(chan struct{})}
	if _, err := js.Stream(ctx, cfg.Stream); errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: cfg.Stream,
			Subjects: []string{cfg.Subject, cfg.DeadSubject}, Duplicates: cfg.Duplicates, Storage: jetstream.FileStorage})
		if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			nc.Close()
			return nil, fmt.Errorf("stream: nats: create stream %s: %w", cfg.Stream, err)
		}
	} else if err != nil {
		nc.Close()
		return nil, fmt.Errorf("%w: nats: stream %s: %v", ErrUnavailable, cfg.Stream, err)
	}
	return s, nil
}

// Append publishes the messages, each with a Nats-Msg-Id derived from
// its content, so a batch sent again within the duplicates window is
// dropped by the server; then it waits for every ack.
func (s *JetStream) Append(ctx context.Context, msgs [][]byte) error {
	futs := make([]jetstream.PubAckFuture, 0, len(msgs))
	for _, m := range msgs {
		sum := sha256.Sum256(m)
		f, err := s.js.PublishAsync(s.cfg.Subject, m, jetstream.WithMsgID("batch:"+hex.EncodeToString(sum[:16])))
		if err != nil {
			return fmt.Errorf("%w: nats: publish: %v", ErrUnavailable, err)
		}
		futs = append(futs, f)
	}
	return waitAcks(ctx, futs, "publish")
}

// waitAcks waits for every asynchronous publish to be acknowledged.
func waitAcks(ctx context.Context, futs []jetstream.PubAckFuture, what string) error {
	for _, f := range futs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("%w: nats: %s: %v", ErrUnavailable, what, err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Consume creates (or joins) the durable consumer.
func (s *JetStream) Consume(ctx context.Context) error {
	c, err := s.js.CreateOrUpdateConsumer(ctx, s.cfg.Stream, jetstream.ConsumerConfig{
		Durable: s.cfg.Consumer, FilterSubject: s.cfg.Subject,
		AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait: s.cfg.AckWait, MaxAckPending: MaxAckPending,
	})
	if err != nil {
		return fmt.Errorf("%w: nats: consumer %s: %v", ErrUnavailable, s.cfg.Consumer, err)
	}
	if s.cons == nil {
		go s.keepHeld(max(s.cfg.AckWait/3, time.Millisecond))
	}
	s.cons = c
	return nil
}

// keepHeld tells the server every period that the messages this
// consumer holds are in progress, which restarts their ack wait.
func (s *JetStream) keepHeld(period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.mu.Lock()
		msgs := make([]jetstream.Msg, 0, len(s.held))
		for _, m := range s.held {
			msgs = append(msgs, m)
		}
		s.mu.Unlock()
		for _, m := range msgs {
			_ = m.InProgress() // a lost one only means a redelivery, which the consumer skips
		}
	}
}

// Name is "nats:" + the stream name.
func (s *JetStream) Name() string { return s.name }

// jsPoll is the most messages one Poll asks for.
const jsPoll = PollMessages

// MaxAckPending is the durable consumer's limit of messages fetched and
// not yet acknowledged, shared by every node consuming it: room for
// several nodes each holding the polls of a commit interval
// (consumer.MaxUncommittedMessages) before the server holds back
// deliveries.
const MaxAckPending = 16 * jsPoll

// Poll pulls the next messages (one group, partition 0, in stream
// sequence order), waiting with a growing pause while there are none.
func (s *JetStream) Poll(ctx context.Context) ([][]Record, error) {
	for {
		b, err := s.cons.FetchNoWait(jsPoll)
		if err != nil {
			return nil, fmt.Errorf("%w: nats: fetch: %v", ErrUnavailable, err)
		}
		var msgs []jetstream.Msg
		n := 0
		for m := range b.Messages() {
			msgs = append(msgs, m)
			n += event.Framed(m.Data())
		}
		g := make([]Record, 0, n)
		for _, m := range msgs {
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			seq := md.Sequence.Stream
			// Acknowledged with its first record (a message holds at
			// least one: Framed counts an empty one as one).
			s.mu.Lock()
			s.held[seq] = m
			s.mu.Unlock()
			event.EachFramed(m.Data(), func(i int, ev []byte) {
				r := Record{Offset: int64(seq), Index: int32(i), Value: ev}
				if i == 0 {
					r.ack = func() {
						_ = m.Ack()
						s.mu.Lock()
						delete(s.held, seq)
						s.mu.Unlock()
					}
				}
				g = append(g, r)
			})
		}
		if err := b.Error(); err != nil && len(g) == 0 && !errors.Is(err, nats.ErrTimeout) {
			return nil, fmt.Errorf("%w: nats: fetch: %v", ErrUnavailable, err)
		}
		if len(g) > 0 {
			s.idle = 0
			return [][]Record{g}, nil
		}
		s.idle = min(max(2*s.idle, 5*time.Millisecond), 100*time.Millisecond)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(s.idle):
		}
	}
}

// DeadLetter publishes each dead letter with Nats-Msg-Id
// "dead:<stream>:<seq>.<index>", so a redelivery within the duplicates
// window is dropped by the server.
func (s *JetStream) DeadLetter(ctx context.Context, dls []DeadLetter) error {
	futs := make([]jetstream.PubAckFuture, 0, len(dls))
	for i := range dls {
		d := &dls[i]
		f, err := s.js.PublishAsync(s.cfg.DeadSubject, EncodeDeadLetter(s.name, d),
			jetstream.WithMsgID("dead:"+s.cfg.Stream+":"+strconv.FormatInt(d.Record.Offset, 10)+"."+strconv.FormatInt(int64(d.Record.Index), 10)))
		if err != nil {
			return fmt.Errorf("%w: nats: publish dead letter: %v", ErrUnavailable, err)
		}
		futs = append(futs, f)
	}
	return waitAcks(ctx, futs, "publish dead letter")
}

// AppendDeadLetters publishes dead letters that were never on the stream
// (refused by the collector); a retried batch publishes them again.
func (s *JetStream) AppendDeadLetters(ctx context.Context, source string, dls []DeadLetter) error {
	futs := make([]jetstream.PubAckFuture, 0, len(dls))
	for i := range dls {
		f, err := s.js.PublishAsync(s.cfg.DeadSubject, EncodeDeadLetter(source, &dls[i]))
		if err != nil {
			return fmt.Errorf("%w: nats: publish dead letter: %v", ErrUnavailable, err)
		}
		futs = append(futs, f)
	}
	return waitAcks(ctx, futs, "publish dead letter")
}

// Commit acknowledges every message. A lost ack only means a redelivery,
// which the consumer skips.
func (s *JetStream) Commit(_ context.Context, groups [][]Record) error {
	for _, g := range groups {
		for i := range g {
			if g[i].ack != nil {
				g[i].ack()
			}
		}
	}
	return nil
}

// CommitsOldestPolls: Commit acknowledges each message (PollCommitter).
func (s *JetStream) CommitsOldestPolls() {}

// Lag returns the durable consumer's pending messages as partition 0.
func (s *JetStream) Lag(ctx context.Context) map[int32]int64 {
	if s.cons == nil {
		return nil
	}
	info, err := s.cons.Info(ctx)
	if err != nil {
		return nil
	}
	return map[int32]int64{0: int64(info.NumPending)}
}

// Ping reports whether the connection is up and JetStream answers (the
// account's JetStream info). While the server is away the connection
// reconnects on its own; Ping tells when it is back.
func (s *JetStream) Ping(ctx context.Context) error {
	if !s.nc.IsConnected() {
		reason := "connection " + strings.ToLower(s.nc.Status().String())
		if err := s.nc.LastError(); err != nil {
			reason += ": " + err.Error()
		}
		return fmt.Errorf("%w: nats: %s", ErrUnavailable, reason)
	}
	if _, err := s.js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("%w: nats: jetstream: %v", ErrUnavailable, err)
	}
	return nil
}

// Close drains nothing and disconnects.
func (s *JetStream) Close() error {
	s.mu.Lock()
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.mu.Unlock()
	s.nc.Close()
	return nil
}
