package client

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

func applyCall(opts []CallOption) callOptions {
	var o callOptions
	for _, opt := range opts {
		opt.applyCall(&o)
	}
	return o
}

func counterPath(id string, rest ...string) string {
	p := "/counters/" + escape(id)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// incrBody is the body of increment and decrement.
type incrBody struct {
	Delta       int64  `json:"delta"`
	Kind        string `json:"kind,omitempty"`
	Shards      int    `json:"shards,omitempty"`
	Granularity string `json:"granularity,omitempty"`
	Window      string `json:"window,omitempty"`
	Fixed       bool   `json:"fixed,omitempty"`
}

// Incr adds delta to the counter id, creating it at 0 if it does not exist,
// and returns its new value. delta may be negative. The counter's kind must
// be additive (counter, sharded, pn or window); WithKind picks the kind of a
// new counter.
func (c *Client) Incr(ctx context.Context, id string, delta int64, opts ...IncrOption) (Result, error) {
	return c.add(ctx, "increment", id, delta, opts)
}

// Decr subtracts delta from the counter id, like Incr with -delta.
func (c *Client) Decr(ctx context.Context, id string, delta int64, opts ...IncrOption) (Result, error) {
	return c.add(ctx, "decrement", id, delta, opts)
}

func (c *Client) add(ctx context.Context, route, id string, delta int64, opts []IncrOption) (Result, error) {
	var o callOptions
	for _, opt := range opts {
		opt.applyIncr(&o)
	}
	body := incrBody{Delta: delta, Kind: o.kind, Shards: o.shards}
	return c.mutate(ctx, http.MethodPost, counterPath(id, route), id, body, o)
}

// IncrFloat adds incr, a decimal number as text ("0.1", "-2.5e3"), to the
// float counter id, creating it at 0, and returns its new value in
// Result.Float: the exact text Redis INCRBYFLOAT would answer. A counter
// of kind counter becomes a float; other kinds fail with ErrWrongKind.
func (c *Client) IncrFloat(ctx context.Context, id, incr string, opts ...CallOption) (Result, error) {
	body := struct {
		Delta string `json:"delta"`
		Kind  string `json:"kind"`
	}{incr, string(KindFloat)}
	return c.mutate(ctx, http.MethodPost, counterPath(id, "increment"), id, body, applyCall(opts))
}

// WindowIncr adds delta to the window counter id, creating it with spec if
// it does not exist. Give both spec.Granularity and spec.Window, or neither
// (the zero WindowSpec) for the server's default window.
func (c *Client) WindowIncr(ctx context.Context, id string, delta int64, spec WindowSpec, opts ...CallOption) (Result, error) {
	body := incrBody{Delta: delta, Kind: string(KindWindow), Fixed: spec.Fixed}
	if spec.Granularity != 0 {
		body.Granularity = spec.Granularity.String()
	}
	if spec.Window != 0 {
		body.Window = spec.Window.String()
	}
	return c.mutate(ctx, http.MethodPost, counterPath(id, "increment"), id, body, applyCall(opts))
}

// mutate sends a mutation whose answer is a Result.
func (c *Client) mutate(ctx context.Context, method, path, id string, body any, o callOptions) (Result, error) {
	if err := checkID(id); err != nil {
		return Result{}, err
	}
	var w wireResult
	replayed, err := c.do(ctx, c.mutation(method, path, body, o), &w)
	if err != nil {
		return Result{}, err
	}
	r := w.result()
	r.Replayed = replayed
	if r.ID == "" {
		r.ID = id
	}
	return r, nil
}

// Get reads the counter id. A missing counter is not an error: it reads as
// value 0, version 0, Exists false.
func (c *Client) Get(ctx context.Context, id string) (Counter, error) {
	if err := checkID(id); err != nil {
		return Counter{}, err
	}
	var w wireCounter
	if _, err := c.do(ctx, &request{method: http.MethodGet, path: counterPath(id)}, &w); err != nil {
		return Counter{}, err
	}
	if w.ID == "" {
		w.ID = id
	}
	return w.counter(), nil
}

// Set writes value to the counter id (of kind counter) and returns its new
// version. With WithExpectedVersion it applies only if the version matches
// and fails with ErrVersionConflict otherwise. Set clears any TTL unless
// WithTTL gives a new one.
func (c *Client) Set(ctx context.Context, id string, value int64, opts ...SetOption) (Result, error) {
	var o callOptions
	for _, opt := range opts {
		opt.applySet(&o)
	}
	body := struct {
		Value           int64   `json:"value"`
		ExpectedVersion *uint64 `json:"expected_version,omitempty"`
		TTLms           int64   `json:"ttl_ms,omitempty"`
	}{Value: value, ExpectedVersion: o.expectedVersion, TTLms: ttlMillis(o.ttl)}
	return c.mutate(ctx, http.MethodPut, counterPath(id), id, body, o)
}

// ttlMillis rounds a positive TTL up to whole milliseconds so that a tiny TTL
// does not turn into "no TTL".
func ttlMillis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// Delete deletes the counter id, of any kind. It reports whether the counter
// existed.
func (c *Client) Delete(ctx context.Context, id string, opts ...CallOption) (bool, error) {
	r, err := c.mutate(ctx, http.MethodDelete, counterPath(id), id, nil, applyCall(opts))
	return r.Changed, err
}

// Expire gives the counter id a time to live (millisecond resolution; ttl
// must be positive). It reports whether the counter exists.
func (c *Client) Expire(ctx context.Context, id string, ttl time.Duration, opts ...CallOption) (bool, error) {
	if ttl <= 0 {
		return false, errors.New("client: Expire: ttl must be positive (use Persist to remove a TTL)")
	}
	body := struct {
		TTLms int64 `json:"ttl_ms"`
	}{ttlMillis(ttl)}
	r, err := c.mutate(ctx, http.MethodPut, counterPath(id, "ttl"), id, body, applyCall(opts))
	return r.Changed, err
}

// Persist removes the time to live of the counter id. It reports whether
// there was one.
func (c *Client) Persist(ctx context.Context, id string, opts ...CallOption) (bool, error) {
	r, err := c.mutate(ctx, http.MethodDelete, counterPath(id, "ttl"), id, nil, applyCall(opts))
	return r.Changed, err
}

// TTL returns the remaining time to live of the counter id, NoTTL if it has
// none, or NoCounter if it does not exist.
func (c *Client) TTL(ctx context.Context, id string) (time.Duration, error) {
	if err := checkID(id); err != nil {
		return 0, err
	}
	var w struct {
		TTLms int64 `json:"ttl_ms"`
	}
	if _, err := c.do(ctx, &request{method: http.MethodGet, path: counterPath(id, "ttl")}, &w); err != nil {
		return 0, err
	}
	switch w.TTLms {
	case -1:
		return NoTTL, nil
	case -2:
		return NoCounter, nil
	}
	return time.Duration(w.TTLms) * time.Millisecond, nil
}

// PFAdd adds items to the HyperLogLog id. Result.Value is the new estimate
// and Result.Changed reports whether the sketch changed. For per-call
// options use PFAddWith.
func (c *Client) PFAdd(ctx context.Context, id string, items ...string) (Result, error) {
	return c.PFAddWith(ctx, id, items)
}

// PFAddWith is PFAdd with options.
func (c *Client) PFAddWith(ctx context.Context, id string, items []string, opts ...CallOption) (Result, error) {
	if items == nil {
		items = []string{}
	}
	body := struct {
		Items []string `json:"items"`
	}{items}
	return c.mutate(ctx, http.MethodPost, counterPath(id, "pfadd"), id, body, applyCall(opts))
}

// PFCount returns the estimated number of distinct items in the
// HyperLogLog ids; with several ids, in their union.
func (c *Client) PFCount(ctx context.Context, ids ...string) (Estimate, error) {
	if len(ids) == 0 {
		return Estimate{}, errors.New("client: PFCount: no ids")
	}
	for _, id := range ids {
		if err := checkID(id); err != nil {
			return Estimate{}, err
		}
	}
	var e Estimate
	r := &request{method: http.MethodGet, path: counterPath(ids[0], "pfcount")}
	if len(ids) > 1 {
		r = &request{method: http.MethodPost, path: "/pfcount", body: struct {
			IDs []string `json:"ids"`
		}{ids}}
	}
	_, err := c.do(ctx, r, &e)
	return e, err
}

// PFMerge merges the HyperLogLogs srcs into dst (which keeps its own items)
// and returns dst's new estimate in Result.Value. For per-call options use
// PFMergeWith.
func (c *Client) PFMerge(ctx context.Context, dst string, srcs ...string) (Result, error) {
	return c.PFMergeWith(ctx, dst, srcs)
}

// PFMergeWith is PFMerge with options.
func (c *Client) PFMergeWith(ctx context.Context, dst string, srcs []string, opts ...CallOption) (Result, error) {
	if srcs == nil {
		srcs = []string{}
	}
	body := struct {
		Sources []string `json:"sources"`
	}{srcs}
	return c.mutate(ctx, http.MethodPost, counterPath(dst, "pfmerge"), dst, body, applyCall(opts))
}

// HIncr adds deltas to fields of the hash id, atomically, and returns the
// new values of those fields.
func (c *Client) HIncr(ctx context.Context, id string, fields map[string]int64, opts ...CallOption) (map[string]int64, error) {
	if len(fields) == 0 {
		return nil, errors.New("client: HIncr: no fields")
	}
	body := struct {
		Fields map[string]int64 `json:"fields"`
	}{fields}
	r, err := c.mutate(ctx, http.MethodPost, counterPath(id, "hincr"), id, body, applyCall(opts))
	if err != nil {
		return nil, err
	}
	if r.Fields == nil {
		r.Fields = map[string]int64{}
	}
	return r.Fields, nil
}

// HIncrFloat adds incr, a decimal number as text ("0.1", "-2.5e3"), to the
// field of the hash id like Redis HINCRBYFLOAT, and returns the field's
// new value as exact decimal text (an integer's text when it is one).
func (c *Client) HIncrFloat(ctx context.Context, id, field, incr string, opts ...CallOption) (string, error) {
	body := struct {
		Fields map[string]string `json:"fields"`
	}{map[string]string{field: incr}}
	r, err := c.mutate(ctx, http.MethodPost, counterPath(id, "hincr"), id, body, applyCall(opts))
	if err != nil {
		return "", err
	}
	if t, ok := r.FloatFields[field]; ok {
		return t, nil
	}
	return strconv.FormatInt(r.Fields[field], 10), nil
}

// HIncrBy adds delta to one field of the hash id and returns its new value.
func (c *Client) HIncrBy(ctx context.Context, id, field string, delta int64, opts ...CallOption) (int64, error) {
	fs, err := c.HIncr(ctx, id, map[string]int64{field: delta}, opts...)
	return fs[field], err
}

// HGetAll returns the fields of the hash id; empty if it does not exist.
// A hash with float fields is an error: Get has them (Counter.FloatFields).
func (c *Client) HGetAll(ctx context.Context, id string) (map[string]int64, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	var w struct {
		Fields wireFields `json:"fields"`
	}
	if _, err := c.do(ctx, &request{method: http.MethodGet, path: counterPath(id, "fields")}, &w); err != nil {
		return nil, err
	}
	ints, floats := w.Fields.split()
	for name := range floats {
		return nil, fmt.Errorf("client: HGetAll %q: field %q holds a float: read the hash with Get", id, name)
	}
	if ints == nil {
		ints = map[string]int64{}
	}
	return ints, nil
}

// HGet returns the value of one field of the hash id and whether it exists.
func (c *Client) HGet(ctx context.Context, id, field string) (value int64, exists bool, err error) {
	if err := checkID(id); err != nil {
		return 0, false, err
	}
	var w struct {
		Value  wireNumber `json:"value"`
		Exists bool       `json:"exists"`
	}
	if _, err := c.do(ctx, &request{method: http.MethodGet, path: counterPath(id, "fields", escape(field))}, &w); err != nil {
		return 0, false, err
	}
	if !w.Value.isInt {
		return 0, w.Exists, fmt.Errorf("client: HGet %q: field %q holds the float %s: read the hash with Get", id, field, w.Value.text)
	}
	return w.Value.int, w.Exists, nil
}

// HDel deletes one field of the hash id and reports whether it existed.
func (c *Client) HDel(ctx context.Context, id, field string, opts ...CallOption) (bool, error) {
	if field == "" {
		return false, errors.New("client: HDel: empty field")
	}
	r, err := c.mutate(ctx, http.MethodDelete, counterPath(id, "fields", escape(field)), id, nil, applyCall(opts))
	return r.Changed, err
}

// Window returns the window counter id: the sum over its window and its
// buckets.
func (c *Client) Window(ctx context.Context, id string) (Window, error) {
	if err := checkID(id); err != nil {
		return Window{}, err
	}
	var w wireWindow
	if _, err := c.do(ctx, &request{method: http.MethodGet, path: counterPath(id, "window")}, &w); err != nil {
		return Window{}, err
	}
	if w.ID == "" {
		w.ID = id
	}
	exists := len(w.Buckets) > 0 || w.Value != 0
	if w.Exists != nil {
		exists = *w.Exists
	}
	return Window{
		ID:     w.ID,
		Exists: exists,
		Value:  w.Value,
		WindowSpec: WindowSpec{
			Granularity: time.Duration(w.Granularity),
			Window:      time.Duration(w.Window),
			Fixed:       w.Fixed,
		},
		Buckets: buckets(w.Buckets),
	}, nil
}

// Aggregate returns the sum of the additive counters whose id starts with
// prefix.
func (c *Client) Aggregate(ctx context.Context, prefix string) (Aggregate, error) {
	var a Aggregate
	_, err := c.do(ctx, &request{method: http.MethodGet, path: "/counters/" + url.PathEscape(prefix) + "*/aggregate"}, &a)
	if err == nil && a.Prefix == "" {
		a.Prefix = prefix
	}
	return a, err
}

// List returns up to limit ids starting with prefix (limit 0: the server's
// default page size) from cursor on (0 starts), and the cursor of the next
// page, 0 when there is none. Ids are not sorted; an id that exists during
// the whole iteration is returned at least once.
func (c *Client) List(ctx context.Context, prefix string, cursor uint64, limit int) (ids []string, next uint64, err error) {
	q := url.Values{}
	if prefix != "" {
		q.Set("prefix", prefix)
	}
	q.Set("cursor", strconv.FormatUint(cursor, 10))
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var w struct {
		IDs    []string `json:"ids"`
		Cursor uint64   `json:"cursor"`
	}
	if _, err := c.do(ctx, &request{method: http.MethodGet, path: "/counters", query: q}, &w); err != nil {
		return nil, 0, err
	}
	if w.IDs == nil {
		w.IDs = []string{}
	}
	return w.IDs, w.Cursor, nil
}

// ListAll iterates over all ids starting with prefix, fetching pages of the
// server's default size as needed. It stops at the first error, which it
// yields with an empty id.
func (c *Client) ListAll(ctx context.Context, prefix string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		var cursor uint64
		for {
			ids, next, err := c.List(ctx, prefix, cursor, 0)
			if err != nil {
				yield("", err)
				return
			}
			for _, id := range ids {
				if !yield(id, nil) {
					return
				}
			}
			if next == 0 {
				return
			}
			cursor = next
		}
	}
}
