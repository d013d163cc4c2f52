package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/counterd/counterd/client"
)

// commands is the command table, in the order "counterctl help" lists it.
var commands []command

func init() {
	commands = []command{
		{"incr", "ID [DELTA]", "Add DELTA (default 1) to a counter and print the new value.", 1, 2, setupAdd(false)},
		{"decr", "ID [DELTA]", "Subtract DELTA (default 1) from a counter and print the new value.", 1, 2, setupAdd(true)},
		{"get", "ID", "Print a counter: id, value, version and last update.", 1, 1, setupGet},
		{"set", "ID VALUE", "Set a counter to VALUE.", 2, 2, setupSet},
		{"del", "ID", "Delete a counter of any kind.", 1, 1, setupDel},
		{"expire", "ID DURATION", "Give a counter a time to live, such as 10s or 5m.", 2, 2, setupExpire},
		{"persist", "ID", "Remove a counter's time to live.", 1, 1, setupPersist},
		{"ttl", "ID", "Print a counter's remaining time to live.", 1, 1, setupTTL},
		{"pfadd", "ID ITEM...", "Add items to a HyperLogLog and print its estimate.", 2, -1, setupPFAdd},
		{"pfcount", "ID...", "Print the estimated distinct count of HyperLogLogs (their union).", 1, -1, setupPFCount},
		{"pfmerge", "DST SRC...", "Merge HyperLogLogs into DST and print its estimate.", 2, -1, setupPFMerge},
		{"hincr", "ID FIELD [DELTA] | ID FIELD=DELTA...", "Add to hash fields atomically and print their new values.", 2, -1, setupHIncr},
		{"hget", "ID FIELD", "Print one field of a hash.", 2, 2, setupHGet},
		{"hgetall", "ID", "Print all fields of a hash.", 1, 1, setupHGetAll},
		{"hdel", "ID FIELD", "Delete one field of a hash.", 2, 2, setupHDel},
		{"window", "ID", "Print a window counter: its sum and its buckets.", 1, 1, setupWindow},
		{"series", "ID [--granularity G] [--from T] [--to T]", "Print the rollup of a counter over a time range: buckets, total and a sparkline.", 1, 1, setupSeries},
		{"uniques", "ID [--last 7d]", "Print the distinct items an hll counter saw in its last N days or hours.", 1, 1, setupUniques},
		{"rollup", "get KEY | set KEY [flags] | del KEY | list", "Show, set, delete or list the rollup specs of namespaces or ids.", 1, 2, setupRollup},
		{"limit", "KEY --limit N [--period D] [--algorithm A] [--cost C]", "Check and consume a rate limit on KEY (see docs/ratelimit.md).", 1, 1, setupLimit},
		{"aggregate", "PREFIX", "Print the sum of the counters whose id starts with PREFIX.", 1, 1, setupAggregate},
		{"list", "[PREFIX]", "List the ids starting with PREFIX (all ids without one).", 0, 1, setupList},
		{"auth", "token | hash", "Make a new API token and its digest, or print the digest of a token read from stdin (docs/security.md).", 1, 1, setupAuth},
		{"cluster", "status | forget NODE [--force]", "Show the cluster as a node sees it, or forget a member that is gone for good (docs/cluster.md).", 1, 2, setupCluster},
		{"events", "FILE [--batch N] [--concurrency C] | --dead N", "Send a file of events (NDJSON or a JSON array; - for stdin) to POST /events with a progress bar; --dead N prints the newest dead letters a node without a stream kept (docs/pipeline.md).", 0, 1, setupEvents},
		{"snapshot", "DIR [--no-progress]", "Write the node's state to DIR as content-addressed chunks; a later snapshot writes only changed chunks (docs/operations.md).", 1, 1, setupSnapshot},
		{"restore", "DIR [--no-progress]", "Merge the latest snapshot in DIR into the node, such as an empty one (docs/operations.md).", 1, 1, setupRestore},
		{"bench", "[flags]", "Run a concurrent load against the server and print throughput and latency.", 0, 0, setupBench},
	}
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

func parseInt(name, s string) (int64, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, usagef("%s: %q is not an integer", name, s)
	}
	return v, nil
}

func parseDuration(name, s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, usagef("%s: %q is not a duration (such as 10s or 5m)", name, s)
	}
	return d, nil
}

func printResult(e *env, r client.Result, human string) error {
	if e.json {
		return printJSON(e.stdout, r)
	}
	_, err := fmt.Fprintln(e.stdout, human)
	return err
}

func setupAdd(decr bool) func(fs *flag.FlagSet) runFunc {
	return func(fs *flag.FlagSet) runFunc {
		kind := fs.String("kind", "", "kind of a new counter: counter, sharded, pn or window")
		shards := fs.Int("shards", 0, "number of shards of a new sharded counter")
		gran := fs.Duration("granularity", 0, "bucket size of a new window counter (with --window)")
		window := fs.Duration("window", 0, "span of a new window counter (with --granularity)")
		fixed := fs.Bool("fixed", false, "make a new window counter a fixed window instead of a sliding one")
		key := fs.String("idempotency-key", "", "idempotency key (default: generated)")
		return func(ctx context.Context, e *env, args []string) error {
			delta := int64(1)
			if len(args) > 1 {
				var err error
				if delta, err = parseInt("DELTA", args[1]); err != nil {
					return err
				}
			}
			if *gran != 0 || *window != 0 || *fixed {
				if *gran <= 0 || *window <= 0 {
					return usagef("--granularity and --window must be given together, and be positive")
				}
				if *kind != "" && *kind != string(client.KindWindow) || *shards != 0 {
					return usagef("--granularity, --window and --fixed make a window counter")
				}
				if decr {
					delta = -delta
				}
				var opts []client.CallOption
				if *key != "" {
					opts = append(opts, client.WithIdempotencyKey(*key))
				}
				c := e.c
				spec := client.WindowSpec{Granularity: *gran, Window: *window, Fixed: *fixed}
				r, err := c.WindowIncr(ctx, args[0], delta, spec, opts...)
				if err != nil {
					return err
				}
				return printResult(e, r, strconv.FormatInt(r.Value, 10))
			}
			var opts []client.IncrOption
			if *kind != "" {
				opts = append(opts, client.WithKind(client.Kind(*kind)))
			}
			if *shards > 0 {
				opts = append(opts, client.WithShards(*shards))
			}
			if *key != "" {
				opts = append(opts, client.WithIdempotencyKey(*key))
			}
			c := e.c
			f := c.Incr
			if decr {
				f = c.Decr
			}
			r, err := f(ctx, args[0], delta, opts...)
			if err != nil {
				return err
			}
			return printResult(e, r, strconv.FormatInt(r.Value, 10))
		}
	}
}

// counterJSON is the --json form of get: the API's field names, with
// durations as strings.
type counterJSON struct {
	ID          string           `json:"id"`
	Kind        client.Kind      `json:"kind"`
	Exists      bool             `json:"exists"`
	Value       int64            `json:"value"`
	Version     uint64           `json:"version"`
	UpdatedAt   *time.Time       `json:"updated_at"`
	ExpiresAt   *time.Time       `json:"expires_at,omitempty"`
	Shards      []int64          `json:"shards,omitempty"`
	Replicas    []client.Replica `json:"replicas,omitempty"`
	StdError    float64          `json:"std_error,omitempty"`
	Precision   int              `json:"precision,omitempty"`
	Fields      map[string]int64 `json:"fields,omitempty"`
	Granularity string           `json:"granularity,omitempty"`
	Window      string           `json:"window,omitempty"`
	Fixed       *bool            `json:"fixed,omitempty"`
	Buckets     []client.Bucket  `json:"buckets,omitempty"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func setupGet(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, e *env, args []string) error {
		c := e.c
		v, err := c.Get(ctx, args[0])
		if err != nil {
			return err
		}
		if e.json {
			j := counterJSON{
				ID: v.ID, Kind: v.Kind, Exists: v.Exists, Value: v.Value, Version: v.Version,
				UpdatedAt: timePtr(v.UpdatedAt), ExpiresAt: timePtr(v.ExpiresAt),
				Shards: v.Shards, Replicas: v.Replicas, StdError: v.StdError, Precision: v.Precision,
				Fields: v.Fields, Buckets: v.Buckets,
			}
			if v.Window != nil {
				j.Granularity, j.Window = v.Window.Granularity.String(), v.Window.Window.String()
				j.Fixed = &v.Window.Fixed
			}
			return printJSON(e.stdout, j)
		}
		if !v.Exists {
			_, err := fmt.Fprintf(e.stdout, "%s  0  (not found)\n", v.ID)
			return err
		}
		var notes []string
		if v.Kind != client.KindCounter && v.Kind != "" {
			notes = append(notes, string(v.Kind))
		}
		notes = append(notes, fmt.Sprintf("version %d", v.Version))
		if !v.UpdatedAt.IsZero() {
			notes = append(notes, "updated "+v.UpdatedAt.UTC().Format("2006-01-02T15:04:05.000Z07:00"))
		}
		if !v.ExpiresAt.IsZero() {
			notes = append(notes, "expires "+v.ExpiresAt.UTC().Format("2006-01-02T15:04:05.000Z07:00"))
		}
		if v.Kind == client.KindHLL && v.StdError > 0 {
			notes = append(notes, fmt.Sprintf("std error %.2f%%", v.StdError*100))
		}
		value := strconv.FormatInt(v.Value, 10)
		if v.Kind == client.KindFloat {
			value = v.Float
		}
		if _, err := fmt.Fprintf(e.stdout, "%s  %s  (%s)\n", v.ID, value, strings.Join(notes, ", ")); err != nil {
			return err
		}
		if v.Kind == client.KindHash {
			return printFields(e.stdout, v.Fields, "  ")
		}
		return nil
	}
}

func setupSet(fs *flag.FlagSet) runFunc {
	expected := fs.String("expected-version", "", "apply only if the counter's version is `N` (0: must not exist)")
	ttl := fs.Duration("ttl", 0, "time to live of the counter")
	key := fs.String("idempotency-key", "", "idempotency key (default: generated)")
	return func(ctx context.Context, e *env, args []string) error {
		value, err := parseInt("VALUE", args[1])
		if err != nil {
			return err
		}
		var opts []client.SetOption
		if *expected != "" {
			v, err := strconv.ParseUint(*expected, 10, 64)
			if err != nil {
				return usagef("--expected-version: %q is not an unsigned integer", *expected)
			}
			opts = append(opts, client.WithExpectedVersion(v))
		}
		if *ttl < 0 {
			return usagef("--ttl must not be negative")
		}
		if *ttl > 0 {
			opts = append(opts, client.WithTTL(*ttl))
		}
		if *key != "" {
			opts = append(opts, client.WithIdempotencyKey(*key))
		}
		c := e.c
		r, err := c.Set(ctx, args[0], value, opts...)
		if err != nil {
			return err
		}
		return printResult(e, r, fmt.Sprintf("%d  (version %d)", r.Value, r.Version))
	}
}

func setupDel(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, e *env, args []string) error {
		c := e.c
		ok, err := c.Delete(ctx, args[0])
		if err != nil {
			return err
		}
		if e.json {
			return printJSON(e.stdout, map[string]any{"id": args[0], "deleted": ok})
		}
		return printBool(e.stdout, ok, "deleted", "not found")
	}
}

func printBool(w io.Writer, ok bool, yes, no string) error {
	s := no
	if ok {
		s = yes
	}
	_, err := fmt.Fprintln(w, s)
	return err
}

func setupExpire(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, e *env, args []string) error {
		d, err := parseDuration("DURATION", args[1])
		if err != nil {
			return err
		}
		if d <= 0 {
			return usagef("DURATION must be positive (use persist to remove a TTL)")
		}
		c := e.c
		ok, err := c.Expire(ctx, args[0], d)
		if err != nil {
			return err
		}
		if e.json {
			return printJSON(e.stdout, map[string]any{"id": args[0], "changed": ok})
		}
		return printBool(e.stdout, ok, "OK", "not found")
	}
}

func setupPersist(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, e *env, args []string) error {
		c := e.c
		ok, err := c.Persist(ctx, args[0])
		if err != nil {
			return err
		}
		if e.json {
			return printJSON(e.stdout, map[string]any{"id": args[0], "changed": ok})
		}
		return printBool(e.stdout, ok, "OK", "no TTL or not found")
	}
}

func setupTTL(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, e *env, args []string) error {
		c := e.c
		d, err := c.TTL(ctx, args[0])
		if err != nil {
			return err
		}
		if e.json {
			ms := d.Milliseconds()
			if d < 0 {
				ms = int64(d) // NoTTL, NoCounter: -1, -2
			}
			return printJSON(e.stdout, map[string]any{"id": args[0], "ttl_ms": ms})
		}
		var s string
		switch d {
		case client.NoTTL:
			s = "no TTL"
		case client.NoCounter:
			s = "not found"
		default:
			s = d.String()
		}
		_, err = fmt.Fprintln(e.stdout, s)
		return err
	}
}

func setupPFAdd(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, e *env, args []string) error {
		c := e.c
		r, err := c.PFAdd(ctx, args[0], args[1:]...)
		if err != nil {
			return err
		}
		note := "unchanged"
		if r.Changed {
			note = "changed"
		}
		return printResult(e, r, fmt.Sprintf("%d  (%s)", r.Value, note))
	}
}

func setupPFCount(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, e *env, args []string) error {
		c := e.c
		est, err := c.PFCount(ctx, args...)
		if err != nil {
			return err
		}
		if e.json {
			return printJSON(e.stdout, map[string]any{"ids": args, "value": est.Value, "std_error": est.StdError})
		}
		_, err = fmt.Fprintf(e.stdout, "%d  (std error %.2f%%)\n", est.Value, est.StdError*100)
		return err
	}
}

func setupPFMerge(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, e *env, args []string) error {
		c := e.c
		r, err := c.PFMerge(ctx, args[0], args[1:]...)
		if err != nil {
			return err
		}
		return printResult(e, r, strconv.FormatInt(r.Value, 10))
	}
}

// parseFieldDeltas parses "FIELD [DELTA]" or "FIELD=DELTA...".
func parseFieldDeltas(args []string) (map[string]int64, error) {
	fields := map[string]int64{}
	if !strings.Contains(args[0], "=") {
		if len(args) > 2 {
			return nil, usagef("hincr: give FIELD [DELTA] or FIELD=DELTA...")
		}
		delta := int64(1)
		if len(args) == 2 {
			var err error
			if delta, err = parseInt("DELTA", args[1]); err != nil {
				return nil, err
			}
		}
		fields[args[0]] = delta
		return fields, nil
	}
	for _, a := range args {
		i := strings.LastIndexByte(a, '=')
		if i <= 0 {
			return nil, usagef("hincr: %q is not FIELD=DELTA", a)
		}
		d, err := parseInt("DELTA of "+a[:i], a[i+1:])
		if err != nil {
			return nil, err
		}
		if _, dup := fields[a[:i]]; dup {
			return nil, usagef("hincr: field %q given twice", a[:i])
		}
		fields[a[:i]] = d
	}
	return fields, nil
}

func printFields(w io.Writer, fields map[string]int64, indent string) error {
	names := make([]string, 0, len(fields))
	for n := range fields {
		names = append(names, n)
	}
	sort.Strings(names)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, n := range names {
		fmt.Fprintf(tw, "%s%s\t%d\n", indent, n, fields[n])
	}
	return tw.Flush()
}

func setupHIncr(fs *flag.FlagSet) runFunc {
	key := fs.String("idempotency-key", "", "idempotency key (default: generated)")
	return func(ctx context.Context, e *env, args []string) error {
		fields, err := parseFieldDeltas(args[1:])
		if err != nil {
			return err
		}
		var opts []client.CallOption
		if *key != "" {
			opts = append(opts, client.WithIdempotencyKey(*key))
		}
		c := e.c
		got, err := c.HIncr(ctx, args[0], fields, opts...)
		if err != nil {
			return err
		}
		if e.json {
			return printJSON(e.stdout, map[string]any{"id": args[0], "fields": got})
		}
		return printFields(e.stdout, got, "")
	}
}

func setupHGet(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, e *env, args []string) error {
		c := e.c
		v, ok, err := c.HGet(ctx, args[0], args[1])
		if err != nil {
			return err
		}
		if e.json {
			return printJSON(e.stdout, map[string]any{"id": args[0], "field": args[1], "value": v, "exists": ok})
		}
		_, err = fmt.Fprintln(e.stdout, v)
		return err
	}
}

func setupHGetAll(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, e *env, args []string) error {
		c := e.c
		fields, err := c.HGetAll(ctx, args[0])
		if err != nil {
			return err
		}
		if e.json {
			return printJSON(e.stdout, map[string]any{"id": args[0], "fields": fields})
		}
		return printFields(e.stdout, fields, "")
	}
}

func setupHDel(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, e *env, args []string) error {
		c := e.c
		ok, err := c.HDel(ctx, args[0], args[1])
		if err != nil {
			return err
		}
		if e.json {
			return printJSON(e.stdout, map[string]any{"id": args[0], "field": args[1], "deleted": ok})
		}
		return printBool(e.stdout, ok, "deleted", "not found")
	}
}

func setupWindow(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, e *env, args []string) error {
		c := e.c
		w, err := c.Window(ctx, args[0])
		if err != nil {
			return err
		}
		if e.json {
			bs := w.Buckets
			if bs == nil {
				bs = []client.Bucket{}
			}
			return printJSON(e.stdout, map[string]any{
				"id": w.ID, "value": w.Value,
				"granularity": w.Granularity.String(), "window": w.Window.String(),
				"fixed": w.Fixed, "buckets": bs,
			})
		}
		mode := "sliding"
		if w.Fixed {
			mode = "fixed"
		}
		fmt.Fprintf(e.stdout, "%s  sum %d  (granularity %s, window %s, %s)\n", w.ID, w.Value, w.Granularity, w.Window, mode)
		if len(w.Buckets) == 0 {
			return nil
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "START\tCOUNT\t\n")
		for _, b := range w.Buckets {
			fmt.Fprintf(tw, "%s\t%d\t\n", b.Start.UTC().Format(time.RFC3339), b.Count)
		}
		return tw.Flush()
	}
}

func setupAggregate(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, e *env, args []string) error {
		c := e.c
		a, err := c.Aggregate(ctx, strings.TrimSuffix(args[0], "*"))
		if err != nil {
			return err
		}
		if e.json {
			return printJSON(e.stdout, a)
		}
		_, err = fmt.Fprintf(e.stdout, "%d  (%d counters)\n", a.Value, a.Count)
		return err
	}
}

func setupList(fs *flag.FlagSet) runFunc {
	limit := fs.Int("limit", 0, "print at most `N` ids (0: all)")
	return func(ctx context.Context, e *env, args []string) error {
		if *limit < 0 {
			return usagef("--limit must not be negative")
		}
		prefix := ""
		if len(args) > 0 {
			prefix = args[0]
		}
		c := e.c
		ids := []string{}
		for id, err := range c.ListAll(ctx, prefix) {
			if err != nil {
				return err
			}
			ids = append(ids, id)
			if *limit > 0 && len(ids) >= *limit {
				break
			}
		}
		if e.json {
			return printJSON(e.stdout, map[string]any{"ids": ids})
		}
		for _, id := range ids {
			if _, err := fmt.Fprintln(e.stdout, id); err != nil {
				return err
			}
		}
		return nil
	}
}
