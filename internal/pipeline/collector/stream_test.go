package collector

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/counterd/counterd/internal/pipeline/event"
	"github.com/counterd/counterd/internal/pipeline/stream"
	"github.com/counterd/counterd/internal/testutil/natstest"
)

// partialBatch has two good events around one without a type.
const partialBatch = "{\"id\":\"a\",\"type\":\"t\",\"ts\":1}\n{\"id\":\"b\",\"ts\":2}\n{\"id\":\"c\",\"type\":\"t\",\"ts\":3}\n"

// checkPartialOnStream posts partialBatch through a collector over sink and
// checks the answer; read returns what then is on the events and dead
// subjects/topics.
func checkPartialOnStream(t *testing.T, sink Sink, read func(ctx context.Context) (events, dead [][]byte)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := New(sink, Options{}).Add(ctx, "http", []byte(partialBatch))
	if err != nil || res.Accepted != 2 || len(res.Rejected) != 1 || res.Rejected[0].Index != 1 {
		t.Fatalf("Add: %+v, %v", res, err)
	}
	events, dead := read(ctx)
	var got []string
	for _, m := range events {
		event.EachFramed(m, func(_ int, ev []byte) { got = append(got, string(ev)) })
	}
	if len(got) != 2 || got[0] != `{"id":"a","type":"t","ts":1}` || got[1] != `{"id":"c","type":"t","ts":3}` {
		t.Fatalf("events on the stream: %q", got)
	}
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}
	source, part, off, reason, err := stream.DecodeDeadLetter(dead[0])
	if err != nil || source != "collector:http" || part != -1 || off != -1 || reason != `event: invalid event: no "type"` {
		t.Fatalf("dead letter %s: %s %d %d %q %v", dead[0], source, part, off, reason, err)
	}
}

// TestPartialBatchOnKafka: the good events of a partial batch go to the
// events topic, the refused one to the dead-letter topic. Kafka here is
// kfake, franz-go's in-process Kafka-protocol cluster.
func TestPartialBatchOnKafka(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	cfg := stream.KafkaConfig{Brokers: kc.ListenAddrs(), Topic: "ev", DeadTopic: "ev-dead", Partitions: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := stream.EnsureKafkaTopics(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	prod, err := stream.NewKafkaProducer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	checkPartialOnStream(t, ProducerSink{P: prod}, func(ctx context.Context) (events, dead [][]byte) {
		return readTopic(ctx, t, kc.ListenAddrs(), "ev", 1), readTopic(ctx, t, kc.ListenAddrs(), "ev-dead", 1)
	})
}

// readTopic reads the first n records of topic.
func readTopic(ctx context.Context, t *testing.T, brokers []string, topic string, n int) [][]byte {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out [][]byte
	for len(out) < n && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { out = append(out, r.Value) })
	}
	return out
}

// TestPartialBatchOnJetStream: the same on NATS JetStream (a real
// nats-server, natstest).
func TestPartialBatchOnJetStream(t *testing.T) {
	url := natstest.New(t)
	name := natstest.Name("P")
	cfg := stream.JetStreamConfig{URL: url, Stream: name, Subject: name + ".ev", DeadSubject: name + ".dead", Consumer: name}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := stream.OpenJetStream(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer js.Close()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	raw, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.DeleteStream(context.Background(), name)
	checkPartialOnStream(t, ProducerSink{P: js}, func(ctx context.Context) (events, dead [][]byte) {
		s, err := raw.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		for seq := uint64(1); ; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if err != nil {
				break
			}
			if m.Subject == cfg.DeadSubject {
				dead = append(dead, m.Data)
			} else {
				events = append(events, m.Data)
			}
		}
		return events, dead
	})
}
