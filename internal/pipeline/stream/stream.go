// Package stream carries events between the collector and the consumers:
// Kafka through franz-go (kafka.go) and NATS JetStream through nats.go
// (jetstream.go). A Producer appends a batch and returns once the stream
// has acknowledged all of it; a Consumer reads records as one member of a
// consumer group (a Kafka group, a JetStream durable consumer), publishes
// dead letters exactly once per record, and commits what was applied.
package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// ErrUnavailable: the stream could not be reached or did not acknowledge.
var ErrUnavailable = errors.New("stream: unavailable")

// Record is one event read from a stream. A stream message carries the
// events of one collector batch (event.Frame); Index is the event's place
// in its message.
type Record struct {
	Partition int32 // Kafka partition; 0 on JetStream
	Offset    int64 // Kafka offset; JetStream stream sequence
	Index     int32 // the event's place in its message
	Value     []byte
	ack       func() // JetStream: acknowledges the message (on its first event)
}

// Pos formats the record's position as "partition/offset.index".
func (r *Record) Pos() string {
	return strconv.FormatInt(int64(r.Partition), 10) + "/" + strconv.FormatInt(r.Offset, 10) + "." + strconv.FormatInt(int64(r.Index), 10)
}

// before reports whether r comes before o in its partition.
func (r *Record) before(o *Record) bool {
	return r.Offset < o.Offset || (r.Offset == o.Offset && r.Index < o.Index)
}

// PollMessages is the most stream messages one Consumer.Poll returns
// (Kafka records, JetStream messages; each holds up to a collector batch).
// A poll with fewer found the stream drained.
const PollMessages = 64

// Messages returns how many stream messages the records of groups come
// from (the records of a message are adjacent in its group).
func Messages(groups [][]Record) int {
	n := 0
	for _, g := range groups {
		for i := range g {
			if i == 0 || g[i].Offset != g[i-1].Offset {
				n++
			}
		}
	}
	return n
}

// MaxMessageBytes bounds a stream message the collector writes (Kafka's
// and NATS's default limits are 1 MiB).
const MaxMessageBytes = 512 << 10

// DeadLetter is a record that could not be applied, with the reason.
type DeadLetter struct {
	Record Record
	Reason string
}

// deadJSON is a dead letter's body on the dead-letter stream.
type deadJSON struct {
	Source    string          `json:"source"`
	Partition int32           `json:"partition"`
	Offset    int64           `json:"offset"`
	Index     int32           `json:"index"`
	Reason    string          `json:"reason"`
	Event     json.RawMessage `json:"event,omitempty"`
	Raw       string          `json:"raw,omitempty"` // the record when it is not JSON
}

// EncodeDeadLetter returns the body of d read from source.
func EncodeDeadLetter(source string, d *DeadLetter) []byte {
	j := deadJSON{Source: source, Partition: d.Record.Partition, Offset: d.Record.Offset, Index: d.Record.Index, Reason: d.Reason}
	if json.Valid(d.Record.Value) {
		j.Event = d.Record.Value
	} else {
		j.Raw = string(d.Record.Value)
	}
	b, _ := json.Marshal(j)
	return b
}

// DecodeDeadLetter parses a dead letter's body (tests, tools).
func DecodeDeadLetter(b []byte) (source string, partition int32, offset int64, reason string, err error) {
	var j deadJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return "", 0, 0, "", fmt.Errorf("stream: dead letter: %w", err)
	}
	return j.Source, j.Partition, j.Offset, j.Reason, nil
}

// Producer appends events to a stream.
type Producer interface {
	// Append appends msgs, each the events of a message joined by '\n'
	// (event.Frame), and returns once the stream acknowledged every
	// message; an error wraps ErrUnavailable and some messages may have
	// been appended (the consumers deduplicate by event id, so the
	// caller may retry).
	Append(ctx context.Context, msgs [][]byte) error
	Close() error
}

// DeadLetterProducer is a Producer that can also publish dead letters
// that never were on the stream: the events the collector refused one by
// one (Record.Partition and Offset -1, Record.Index their place in the
// batch). source names where they came from ("collector:http").
type DeadLetterProducer interface {
	AppendDeadLetters(ctx context.Context, source string, dls []DeadLetter) error
}

// Consumer reads a stream as one member of a consumer group. Not safe for
// concurrent use: one goroutine polls, applies, dead-letters and commits.
type Consumer interface {
	// Name identifies the stream in idempotency keys and dead letters
	// ("kafka:events", "nats:COUNTERD_EVENTS").
	Name() string
	// Poll returns the next records, grouped by partition, each group
	// in offset order. It blocks until records arrive or ctx is done.
	Poll(ctx context.Context) ([][]Record, error)
	// DeadLetter publishes dls (records of one partition, in offset
	// order) and returns once the stream acknowledged them. A record
	// dead-lettered again after a crash is not published twice.
	DeadLetter(ctx context.Context, dls []DeadLetter) error
	// Commit marks every record of groups as done: the groups of one or
	// more polls (of any partitions, each partition's in poll order).
	Commit(ctx context.Context, groups [][]Record) error
	// Lag returns the records not yet consumed, by partition.
	Lag(ctx context.Context) map[int32]int64
	Close() error
}

// PollCommitter is a Consumer whose Commit may be given the oldest of
// the polls since the last Commit, the newer ones committed by a later
// Commit: the consumer then commits the polls an engine flush made
// durable while it applies the next ones (consumer.Run). JetStream's is
// (it acknowledges each message); Kafka's is not, since its Commit lets
// a held rebalance go ahead, which must not move a partition under
// records polled and not committed.
type PollCommitter interface {
	Consumer
	CommitsOldestPolls()
}
