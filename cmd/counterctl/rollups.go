package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/term"

	"github.com/counterd/counterd/client"
	"github.com/counterd/counterd/internal/rollup"
)

// Time-series commands (docs/time.md): series, uniques and rollup.

// defaultSparkWidth is the sparkline width when stdout is not a terminal.
const defaultSparkWidth = 60

// parseWhen parses a --from or --to time the way the server does: RFC 3339,
// Unix seconds, "now", or an offset back from now ("-24h", "-30d"). Offsets
// and "now" are taken from this machine's clock. "" is the zero time (the
// server's default).
func parseWhen(name, s string, now time.Time) (time.Time, error) {
	switch {
	case s == "":
		return time.Time{}, nil
	case s == "now":
		return now, nil
	case strings.HasPrefix(s, "-") && !isNumber(s):
		d, err := rollup.ParseRetention(s[1:])
		if err != nil {
			return time.Time{}, usagef("%s: %q is not an offset like -24h or -30d", name, s)
		}
		return now.Add(-d), nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < -1<<40 || n > 1<<40 {
			return time.Time{}, usagef("%s: %d Unix seconds out of range", name, n)
		}
		return time.Unix(n, 0), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, usagef("%s: %q is not RFC 3339, Unix seconds, now or -duration (such as -24h or -30d)", name, s)
	}
	return t, nil
}

// sparkWidth returns the width of the sparkline: width when positive, else
// the terminal's width (less one) when stdout is a terminal, else
// defaultSparkWidth.
func sparkWidth(e *env, width int) int {
	if width > 0 {
		return width
	}
	if f, ok := e.stdout.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		if w, _, err := term.GetSize(int(f.Fd())); err == nil && w > 1 {
			return w - 1 // a full line wraps on some terminals
		}
	}
	return defaultSparkWidth
}

// formatBucket formats a bucket start or range bound.
func formatBucket(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func setupSeries(fs *flag.FlagSet) runFunc {
	gran := fs.String("granularity", "", "bucket size `G`: minute, hour, day or month (default: the server's, hour)")
	from := fs.String("from", "", "start of the range, `T`: RFC 3339, Unix seconds, now, or an offset back from this machine's clock such as -24h or -30d (default: 60 buckets before --to)")
	to := fs.String("to", "", "end of the range (exclusive), `T` as --from (default: now)")
	width := fs.Int("width", 0, "width of the sparkline in `columns` (default: the terminal's, or 60)")
	noTable := fs.Bool("no-table", false, "print only the header and the sparkline, not the buckets")
	return func(ctx context.Context, e *env, args []string) error {
		if *gran != "" {
			if _, err := rollup.ParseGranularity(*gran); err != nil {
				return usagef("--granularity must be minute, hour, day or month, not %q", *gran)
			}
		}
		if *width < 0 {
			return usagef("--width must not be negative")
		}
		now := time.Now()
		f, err := parseWhen("--from", *from, now)
		if err != nil {
			return err
		}
		t, err := parseWhen("--to", *to, now)
		if err != nil {
			return err
		}
		if !f.IsZero() && !t.IsZero() && !f.Before(t) {
			return usagef("--from must be before --to")
		}
		c := e.c
		s, err := c.Series(ctx, args[0], *gran, f, t)
		if err != nil {
			return err
		}
		if e.json {
			return printJSON(e.stdout, s)
		}
		return printSeries(e.stdout, s, sparkWidth(e, *width), !*noTable)
	}
}

// printSeries prints a header, the buckets (when table) and their total,
// and a sparkline of at most width marks.
func printSeries(w io.Writer, s *client.Series, width int, table bool) error {
	values := rollup.Downsample(s.Values(), width)
	var notes []string
	if s.Source != "" && s.Source != s.Granularity {
		notes = append(notes, fmt.Sprintf("summed from %s buckets", s.Source))
	}
	if len(values) < len(s.Buckets) {
		notes = append(notes, fmt.Sprintf("sparkline: %d buckets a mark", (len(s.Buckets)+width-1)/width))
	}
	note := ""
	if len(notes) > 0 {
		note = "  (" + strings.Join(notes, ", ") + ")"
	}
	fmt.Fprintf(w, "%s  %d %s buckets  %s .. %s%s\n", s.ID, len(s.Buckets), s.Granularity,
		formatBucket(s.From), formatBucket(s.To), note)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	if table {
		fmt.Fprintf(tw, "START\tCOUNT\t\n")
		for _, b := range s.Buckets {
			fmt.Fprintf(tw, "%s\t%d\t\n", formatBucket(b.Start), b.Count)
		}
	}
	fmt.Fprintf(tw, "total\t%d\t\n", s.Total)
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, rollup.Sparkline(values))
	return err
}

// lastRE is the form of uniques --last; the server checks the range.
var lastRE = regexp.MustCompile(`^[0-9]{1,9}[dh]$`)

func setupUniques(fs *flag.FlagSet) runFunc {
	last := fs.String("last", "1d", "the last `N` UTC days (Nd, today included) or hours (Nh, this hour included)")
	return func(ctx context.Context, e *env, args []string) error {
		if !lastRE.MatchString(*last) {
			return usagef("--last must be a number of days or hours like 7d or 24h, not %q", *last)
		}
		c := e.c
		u, err := c.Uniques(ctx, args[0], *last)
		if err != nil {
			return err
		}
		if e.json {
			return printJSON(e.stdout, u)
		}
		noun := "sketches"
		if u.Sketches == 1 {
			noun = "sketch"
		}
		_, err = fmt.Fprintf(e.stdout, "%d ± %.2f%% (%d..%d), %d %s\n", u.Value, u.StdError*100, u.Low, u.High, u.Sketches, noun)
		return err
	}
}

type rollupFlag struct {
	name, what string // flag name, what it keeps
	def        func(s *rollup.Spec) time.Duration
	out        func(s *client.RollupSpec) *string
}

// rollupFlags are the retention flags of rollup set. They are strings so
// that an absent flag is left to the server's default.
var rollupFlags = []rollupFlag{
	{"minute", "minute buckets", func(s *rollup.Spec) time.Duration { return s.Minute }, func(s *client.RollupSpec) *string { return &s.Minute }},
	{"hour", "hour buckets", func(s *rollup.Spec) time.Duration { return s.Hour }, func(s *client.RollupSpec) *string { return &s.Hour }},
	{"day", "day buckets", func(s *rollup.Spec) time.Duration { return s.Day }, func(s *client.RollupSpec) *string { return &s.Day }},
	{"month", "calendar-month buckets", func(s *rollup.Spec) time.Duration { return s.Month }, func(s *client.RollupSpec) *string { return &s.Month }},
	{"unique-hours", "per-hour hll sketches (at most 168h)", func(s *rollup.Spec) time.Duration { return s.UniqueHours }, func(s *client.RollupSpec) *string { return &s.UniqueHours }},
	{"unique-days", "per-day hll sketches (at most 400d)", func(s *rollup.Spec) time.Duration { return s.UniqueDays }, func(s *client.RollupSpec) *string { return &s.UniqueDays }},
}

// rollupAction is one action of the rollup command. spec is the spec the
// flags describe (set only).
type rollupAction struct {
	name string
	key  bool // takes KEY
	run  func(ctx context.Context, e *env, c *client.Client, key string, spec client.RollupSpec) error
}

var rollupActions = []rollupAction{
	{"get", true, rollupGet},
	{"set", true, rollupSet},
	{"del", true, rollupDel},
	{"list", false, rollupList},
}

func lookupRollupAction(name string) *rollupAction {
	for i := range rollupActions {
		if rollupActions[i].name == name {
			return &rollupActions[i]
		}
	}
	return nil
}

func setupRollup(fs *flag.FlagSet) runFunc {
	def := rollup.DefaultSpec()
	retentions := make([]*string, len(rollupFlags))
	for i, f := range rollupFlags {
		retentions[i] = fs.String(f.name, "", fmt.Sprintf("set: how long to keep %s, a `duration` (48h) or whole days (30d); 0: not kept (server default %s)",
			f.what, rollup.FormatRetention(f.def(&def))))
	}
	precision := fs.Int("precision", 0, fmt.Sprintf("set: precision `p` of the hll sketches, %d..%d (server default %d: %.2f%% std error)",
		rollup.MinPrecision, rollup.MaxPrecision, def.Precision, def.StdError()*100))
	return func(ctx context.Context, e *env, args []string) error {
		act := lookupRollupAction(args[0])
		if act == nil {
			return usagef("rollup: unknown action %q (get, set, del or list)", args[0])
		}
		if act.key != (len(args) == 2) {
			if act.key {
				return usagef("rollup %s: give a KEY (a namespace or an id)", act.name)
			}
			return usagef("rollup %s takes no KEY", act.name)
		}
		var spec client.RollupSpec
		var given []string
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "precision" || slices.ContainsFunc(rollupFlags, func(r rollupFlag) bool { return r.name == f.Name }) {
				given = append(given, "--"+f.Name)
			}
		})
		if act.name != "set" && len(given) > 0 {
			return usagef("rollup %s: %s only go with rollup set", act.name, strings.Join(given, ", "))
		}
		for i, f := range rollupFlags {
			v := *retentions[i]
			if v == "" {
				continue
			}
			if _, err := rollup.ParseRetention(v); err != nil {
				return usagef("--%s: %q is not a retention like 48h, 30d or 0", f.name, v)
			}
			*f.out(&spec) = v
		}
		if p := *precision; p != 0 && (p < int(rollup.MinPrecision) || p > int(rollup.MaxPrecision)) {
			return usagef("--precision must be in %d..%d, not %d", rollup.MinPrecision, rollup.MaxPrecision, p)
		}
		spec.Precision = uint8(*precision)
		c := e.c
		key := ""
		if act.key {
			key = args[1]
		}
		return act.run(ctx, e, c, key, spec)
	}
}

func rollupGet(ctx context.Context, e *env, c *client.Client, key string, _ client.RollupSpec) error {
	s, err := c.GetRollup(ctx, key)
	if err != nil {
		return err
	}
	return printRollup(e, key, s)
}

func rollupSet(ctx context.Context, e *env, c *client.Client, key string, spec client.RollupSpec) error {
	s, err := c.SetRollup(ctx, key, spec)
	if err != nil {
		return err
	}
	return printRollup(e, key, s)
}

func rollupDel(ctx context.Context, e *env, c *client.Client, key string, _ client.RollupSpec) error {
	ok, err := c.DeleteRollup(ctx, key)
	if err != nil {
		return err
	}
	if e.json {
		return printJSON(e.stdout, map[string]any{"key": key, "deleted": ok})
	}
	return printBool(e.stdout, ok, "deleted", "not found")
}

func rollupList(ctx context.Context, e *env, c *client.Client, _ string, _ client.RollupSpec) error {
	all, err := c.ListRollups(ctx)
	if err != nil {
		return err
	}
	if e.json {
		return printJSON(e.stdout, map[string]any{"rollups": all})
	}
	if len(all) == 0 {
		return nil
	}
	keys := make([]string, 0, len(all))
	for k := range all {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "KEY\tMINUTE\tHOUR\tDAY\tMONTH\tUNIQUE_HOURS\tUNIQUE_DAYS\tPRECISION\n")
	for _, k := range keys {
		s := all[k]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", k, s.Minute, s.Hour, s.Day, s.Month, s.UniqueHours, s.UniqueDays, s.Precision)
	}
	return tw.Flush()
}

// printRollup prints the spec of key: as the server's answer with --json,
// else one retention a line.
func printRollup(e *env, key string, s *client.RollupSpec) error {
	if e.json {
		return printJSON(e.stdout, map[string]any{"key": key, "rollup": s})
	}
	fmt.Fprintln(e.stdout, key)
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	for _, f := range []struct{ name, v string }{
		{"minute", s.Minute}, {"hour", s.Hour}, {"day", s.Day}, {"month", s.Month},
		{"unique_hours", s.UniqueHours}, {"unique_days", s.UniqueDays},
	} {
		v := f.v
		if v == "0" {
			v = "0 (not kept)"
		}
		fmt.Fprintf(tw, "  %s\t%s\n", f.name, v)
	}
	fmt.Fprintf(tw, "  precision\t%d (std error %.2f%%)\n", s.Precision, s.StdError*100)
	return tw.Flush()
}
