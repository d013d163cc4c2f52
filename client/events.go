package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Event is one event for the pipeline (docs/pipeline.md): an ID that
// deduplicates it, a Type, a time and free attributes, which the server's
// rules read as event.<name>.
type Event struct {
	ID    string
	Type  string
	Time  time.Time
	Attrs map[string]any // must not use the names id, type and ts
}

// MarshalJSON encodes e as POST /events expects: the attributes with
// "id", "type" and "ts" (Unix milliseconds).
func (e Event) MarshalJSON() ([]byte, error) {
	m := make(map[string]any, len(e.Attrs)+3)
	for k, v := range e.Attrs {
		m[k] = v
	}
	m["id"], m["type"], m["ts"] = e.ID, e.Type, e.Time.UnixMilli()
	return json.Marshal(m)
}

// EventsResult is the answer to SendEvents.
type EventsResult struct {
	Accepted int `json:"accepted"`
	// Rejected are the events of the batch the server refused one by one
	// (bad JSON, a missing id, type or ts, too large): they were
	// dead-lettered and not appended; the others were.
	Rejected []RejectedEvent `json:"rejected"`
	// DeadLetters, from a node without a stream (the rules ran at once),
	// are the events that changed nothing, with the reason.
	DeadLetters []EventDeadLetter `json:"dead_letters"`
}

// RejectedEvent is an event of a batch that the server refused.
type RejectedEvent struct {
	Index int    `json:"index"`
	Error string `json:"error"`
}

// EventDeadLetter is an event of the batch the rules could not apply.
type EventDeadLetter struct {
	Index  int    `json:"index"`
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

// SendEvents appends a batch of events with POST /events and returns once
// the server's stream acknowledged all of them (202). Events the server
// refuses one by one are in EventsResult.Rejected, the others appended; a
// batch with no good event, or that is not a list of events, is refused
// whole (ErrInvalidEvent, ErrTooLarge). Retries are safe whatever
// happened: the pipeline counts an event id once.
func (c *Client) SendEvents(ctx context.Context, events []Event) (EventsResult, error) {
	if len(events) == 0 {
		return EventsResult{}, nil
	}
	for k := range events[0].Attrs {
		if k == "id" || k == "type" || k == "ts" {
			return EventsResult{}, fmt.Errorf("%w: attribute %q is reserved", ErrInvalidEvent, k)
		}
	}
	var out EventsResult
	_, err := c.do(ctx, &request{method: http.MethodPost, path: "/events", body: events}, &out)
	return out, err
}

// SendEventsRaw is SendEvents for a batch already encoded as a JSON array
// of events (counterctl events sends files this way).
func (c *Client) SendEventsRaw(ctx context.Context, batch []byte) (EventsResult, error) {
	var out EventsResult
	_, err := c.do(ctx, &request{method: http.MethodPost, path: "/events", body: json.RawMessage(batch)}, &out)
	return out, err
}

// EventDeadLetters returns the newest limit dead letters a node without a
// stream kept (GET /events/dead), oldest first, each in the dead-letter
// stream's JSON form: source, partition, offset, index, reason and the
// event. A node on Kafka or NATS answers ErrNotFound: its dead letters are
// on the stream.
func (c *Client) EventDeadLetters(ctx context.Context, limit int) ([]json.RawMessage, error) {
	var out struct {
		DeadLetters []json.RawMessage `json:"dead_letters"`
	}
	_, err := c.do(ctx, &request{method: http.MethodGet, path: "/events/dead", query: url.Values{"limit": {strconv.Itoa(limit)}}}, &out)
	return out.DeadLetters, err
}
