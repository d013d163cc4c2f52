package stream

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/counterd/counterd/internal/pipeline/event"
	"github.com/counterd/counterd/internal/testutil/natstest"
)

// deadLetters returns dead letters of partition part at positions
// "offset.index".
func deadLetters(part int32, pos ...string) []DeadLetter {
	var out []DeadLetter
	for _, p := range pos {
		var o int64
		var i int32
		fmt.Sscanf(p, "%d.%d", &o, &i)
		out = append(out, DeadLetter{Record: Record{Partition: part, Offset: o, Index: i, Value: []byte(fmt.Sprintf(`{"id":"e%s"}`, p))}, Reason: "bad"})
	}
	return out
}

// TestKafkaDeadLettersOnce: a consumer that takes a partition over after
// another one died (a new KafkaConsumer) publishes again the dead letters
// of records redelivered to it, and only the new ones land. Kafka here is
// kfake, franz-go's in-process Kafka-protocol cluster.
func TestKafkaDeadLettersOnce(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	cfg := KafkaConfig{Brokers: kc.ListenAddrs(), Topic: "ev", DeadTopic: "ev-dead", Partitions: 2}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := EnsureKafkaTopics(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	first, err := NewKafkaConsumer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.DeadLetter(ctx, deadLetters(1, "3.0", "7.0", "7.1")); err != nil {
		t.Fatal(err)
	}
	first.Close() // died before committing
	second, err := NewKafkaConsumer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if err := second.DeadLetter(ctx, deadLetters(1, "3.0", "7.0", "7.1", "7.2", "9.0")); err != nil {
		t.Fatal(err)
	}
	if err := second.DeadLetter(ctx, deadLetters(0, "7.0")); err != nil { // another partition keeps its own
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...), kgo.ConsumeTopics("ev-dead"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := map[string]int{}
	n := 0
	for n < 6 && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			src, p, _, reason, err := DecodeDeadLetter(r.Value)
			if err != nil || src != "kafka:ev" || p != r.Partition || reason != "bad" {
				t.Errorf("dead letter %s in partition %d: %v", r.Value, r.Partition, err)
			}
			got[string(r.Key)]++
			n++
		})
	}
	short, c2 := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer c2()
	cl.PollFetches(short).EachRecord(func(r *kgo.Record) { n++ })
	want := map[string]int{"1/3.0": 1, "1/7.0": 1, "1/7.1": 1, "1/7.2": 1, "1/9.0": 1, "0/7.0": 1}
	if n != 6 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%d dead letters %v, want %v", n, got, want)
	}
}

// TestJetStreamRoundTrip: a batch appended is one message whose events
// are polled in order; the same batch appended again within the duplicate
// window is dropped by the server, and a dead letter published twice lands
// once. A real NATS server.
func TestJetStreamRoundTrip(t *testing.T) {
	url := natstest.New(t)
	name := natstest.Name("S")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := JetStreamConfig{URL: url, Stream: name, Subject: name + ".ev", DeadSubject: name + ".dead", Consumer: name}
	js, err := OpenJetStream(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer js.Close()
	defer js.js.DeleteStream(context.Background(), name)
	var evs []event.Event
	var enc [][]byte
	for _, id := range []string{"a", "b", "a", "c"} {
		e := event.Event{ID: id, Type: "t", TS: 1}
		evs = append(evs, e)
		enc = append(enc, event.Encode(&e))
	}
	for range 2 {
		if err := js.Append(ctx, event.Frame(enc, MaxMessageBytes)); err != nil {
			t.Fatal(err)
		}
	}
	if err := js.Consume(ctx); err != nil {
		t.Fatal(err)
	}
	groups, err := js.Poll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 1 || len(groups[0]) != 4 {
		t.Fatalf("polled %v, want the 4 events of one message", groups)
	}
	for i, r := range groups[0] {
		if r.Offset != 1 || r.Index != int32(i) || string(r.Value) != string(enc[i]) {
			t.Fatalf("record %d at %s: %s", i, r.Pos(), r.Value)
		}
	}
	if err := js.Commit(ctx, groups); err != nil {
		t.Fatal(err)
	}
	dl := []DeadLetter{{Record: groups[0][1], Reason: "bad"}}
	for range 2 {
		if err := js.DeadLetter(ctx, dl); err != nil {
			t.Fatal(err)
		}
	}
	nc, _ := nats.Connect(url)
	defer nc.Close()
	raw, _ := jetstream.New(nc)
	s, err := raw.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(name+".dead"))
	if err != nil {
		t.Fatal(err)
	}
	if got := info.State.Subjects[name+".dead"]; got != 1 {
		t.Fatalf("%d dead letters on the stream, want 1", got)
	}
	// Acked: nothing is delivered again; the lag is 0.
	if g, err := js.Poll(shortCtx(t)); err == nil && len(g) > 0 {
		t.Fatalf("acked records delivered again: %v", g)
	}
	if lag := js.Lag(ctx); lag[0] != 0 {
		t.Fatalf("lag %v", lag)
	}
}

func shortCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	t.Cleanup(cancel)
	return ctx
}

// TestJetStreamHeldPastAckWait: messages a live consumer holds past the
// ack wait (a slow apply) are not delivered again meanwhile: the consumer
// marks them in progress. Once acknowledged, they are gone. A real NATS
// server.
func TestJetStreamHeldPastAckWait(t *testing.T) {
	url := natstest.New(t)
	name := natstest.Name("H")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := JetStreamConfig{URL: url, Stream: name, Subject: name + ".ev", DeadSubject: name + ".dead", Consumer: name, AckWait: 1500 * time.Millisecond}
	js, err := OpenJetStream(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer js.Close()
	e := event.Event{ID: "a", Type: "t", TS: 1}
	if err := js.Append(ctx, event.Frame([][]byte{event.Encode(&e)}, MaxMessageBytes)); err != nil {
		t.Fatal(err)
	}
	if err := js.Consume(ctx); err != nil {
		t.Fatal(err)
	}
	groups, err := js.Poll(ctx)
	if err != nil || len(groups) != 1 || len(groups[0]) != 1 {
		t.Fatalf("polled %v, %v; want one event", groups, err)
	}
	time.Sleep(3 * cfg.AckWait) // the apply takes longer than the ack wait
	if g, err := js.Poll(shortCtx(t)); err == nil && len(g) > 0 {
		t.Fatalf("a message held past the ack wait was delivered again: %v", g)
	}
	if err := js.Commit(ctx, groups); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * cfg.AckWait)
	if g, err := js.Poll(shortCtx(t)); err == nil && len(g) > 0 {
		t.Fatalf("an acknowledged message was delivered again: %v", g)
	}
	if lag := js.Lag(ctx); lag[0] != 0 {
		t.Fatalf("lag %v", lag)
	}
}

// TestKafkaRebalanceWaitsForCommitAcrossPolls: records a member polled
// and has not committed keep a rebalance waiting even through a later
// poll that finds nothing (consumer.Run polls on before it commits), so
// a member that joins meanwhile is not handed a partition under them;
// the groups of those several polls, committed in one Commit, commit
// each partition's last offset, so after it the new member reads nothing
// again. A poll returns at most PollMessages records.
func TestKafkaRebalanceWaitsForCommitAcrossPolls(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	cfg := KafkaConfig{Brokers: kc.ListenAddrs(), Topic: "ev", DeadTopic: "ev-dead", Partitions: 2, Group: "g"}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := EnsureKafkaTopics(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	pr, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...), kgo.DefaultProduceTopic("ev"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	for p := range int32(2) {
		for i := range 100 {
			recs = append(recs, &kgo.Record{Partition: p, Value: []byte(fmt.Sprintf(`{"id":"%d-%d"}`, p, i))})
		}
	}
	if err := pr.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	pr.Close()
	first, err := NewKafkaConsumer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	var held [][]Record
	polls := 0
	for n := 0; n < len(recs); polls++ {
		groups, err := first.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m := Messages(groups); m > PollMessages {
			t.Fatalf("a poll returned %d messages, more than %d", m, PollMessages)
		}
		for _, g := range groups {
			n += len(g)
		}
		held = append(held, groups...)
	}
	if polls < 3 {
		t.Fatalf("%d records in %d polls, want several", len(recs), polls)
	}
	// A member joins while first holds them; first polls on, finding
	// nothing, for longer than a rebalance takes.
	second, err := NewKafkaConsumer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	got := make(chan int, 1)
	go func() {
		n := 0
		for {
			pctx, c := context.WithTimeout(ctx, 8*time.Second)
			groups, err := second.Poll(pctx)
			c()
			if err != nil {
				got <- n
				return
			}
			for _, g := range groups {
				n += len(g)
			}
		}
	}()
	for range 8 {
		pctx, c := context.WithTimeout(ctx, time.Second)
		if groups, err := first.Poll(pctx); err == nil {
			t.Fatalf("first polled %d more groups, want none", len(groups))
		}
		c()
	}
	if err := first.Commit(ctx, held); err != nil {
		t.Fatal(err)
	}
	if n := <-got; n != 0 {
		t.Fatalf("the member that joined read %d records the first one held uncommitted", n)
	}
}
