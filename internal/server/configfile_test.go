package server

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// bind is a fresh Config bound to a fresh FlagSet, as counterd's main does.
func bind(t *testing.T, args ...string) (*Config, *flag.FlagSet) {
	t.Helper()
	c := DefaultConfig()
	fs := flag.NewFlagSet("counterd", flag.ContinueOnError)
	c.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return &c, fs
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "counterd.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConfigFilePrecedence: flag > environment > file > default, for
// strings, durations, ints, bools and lists.
func TestConfigFilePrecedence(t *testing.T) {
	t.Setenv("COUNTERD_RESP", "127.0.0.1:7001") // env beats the file's resp
	path := writeFile(t, `
http: 127.0.0.1:7000     # the command line beats this
resp: 127.0.0.1:7002
grpc: ""                 # disables, as --grpc "" does
flush-interval: 250ms
max-batch: 17
pprof: true
admin: 127.0.0.1:7003
peer-regions: [r2=127.0.0.1:9, r3=127.0.0.1:10]
`)
	c, fs := bind(t, "--http", "127.0.0.1:7004")
	if err := ApplyConfigFile(fs, path); err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string]any{
		"http": c.HTTP, "resp": c.RESP, "grpc": c.GRPC, "flush-interval": c.FlushInterval,
		"max-batch": c.MaxBatch, "pprof": c.Pprof, "peer-regions": c.PeerRegions, "data": c.Data,
	} {
		want := map[string]any{
			"http": "127.0.0.1:7004", "resp": "127.0.0.1:7001", "grpc": "", "flush-interval": 250 * time.Millisecond,
			"max-batch": 17, "pprof": true, "peer-regions": "r2=127.0.0.1:9,r3=127.0.0.1:10", "data": DefaultConfig().Data,
		}[name]
		if got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}

// TestConfigFileErrors: every mistake in a file is reported at once with
// its line, and a file with any mistake changes nothing.
func TestConfigFileErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		body string
		want []string
	}{
		"unknown keys": {"htp: x\nmax-batch: 3\nflush-intervall: 1s\n",
			[]string{`line 1: unknown setting "htp" (did you mean --http?)`, `line 3: unknown setting "flush-intervall" (did you mean --flush-interval?)`}},
		"bad values": {"http: 127.0.0.1:1\nmax-batch: many\nflush-interval: soon\n",
			[]string{"line 2: max-batch:", "line 3: flush-interval:"}},
		"duplicate":     {"http: a:1\nhttp: b:2\n", []string{`line 2: "http" is already set on line 1`}},
		"not a map":     {"- http\n", []string{"line 1: the file must be a mapping"}},
		"nested":        {"http: {host: x}\n", []string{"line 1: http: the value must be a plain value or a list"}},
		"config key":    {"config: other.yaml\n", []string{`line 1: "config" cannot be set in a config file`}},
		"version key":   {"version: true\n", []string{`"version" cannot be set`}},
		"comma in list": {"join: [a:1, \"b:2,c:3\"]\n", []string{`list item "b:2,c:3" contains a comma`}},
		"not yaml":      {"http: [\n", []string{"yaml"}},
	} {
		t.Run(name, func(t *testing.T) {
			c, fs := bind(t)
			before := *c
			fs.Bool("version", false, "")
			err := ApplyConfigFile(fs, writeFile(t, tc.body))
			if !errors.Is(err, ErrConfigFile) {
				t.Fatalf("err = %v, want ErrConfigFile", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v\nwant it to contain %q", err, w)
				}
			}
			if c.MaxBatch != before.MaxBatch || c.HTTP != before.HTTP {
				t.Errorf("a file with errors changed settings: max-batch %d, http %q", c.MaxBatch, c.HTTP)
			}
		})
	}
	c, fs := bind(t)
	if err := ApplyConfigFile(fs, filepath.Join(t.TempDir(), "missing.yaml")); !errors.Is(err, ErrConfigFile) {
		t.Fatalf("missing file: %v", err)
	}
	if err := ApplyConfigFile(fs, writeFile(t, "# only a comment\n")); err != nil || c.HTTP != DefaultConfig().HTTP {
		t.Fatalf("empty file: %v, http %q", err, c.HTTP)
	}
}

// TestConfigFileLargeRefused: a file larger than maxConfigFile is refused
// without being parsed.
func TestConfigFileLargeRefused(t *testing.T) {
	_, fs := bind(t)
	err := ApplyConfigFile(fs, writeFile(t, "http: x\n"+strings.Repeat("#", maxConfigFile)))
	if !errors.Is(err, ErrConfigFile) || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("err = %v", err)
	}
}

// TestConfigFileProperty: any map of known flag names to values written
// as YAML scalars sets exactly those flags to those values, and parsing
// arbitrary bytes never panics.
func TestConfigFileProperty(t *testing.T) {
	names := []string{"http", "resp", "data", "node-id", "region", "join", "log-level"}
	rapid.Check(t, func(rt *rapid.T) {
		want := rapid.MapOf(rapid.SampledFrom(names), rapid.StringMatching(`[a-zA-Z0-9:._/-]{0,20}`)).Draw(rt, "settings")
		var b strings.Builder
		for k, v := range want {
			b.WriteString(k + ": '" + v + "'\n")
		}
		c := DefaultConfig()
		fs := flag.NewFlagSet("counterd", flag.ContinueOnError)
		c.BindFlags(fs)
		settings, err := parseConfigFile([]byte(b.String()), fs)
		if err != nil {
			rt.Fatalf("%q: %v", b.String(), err)
		}
		for _, s := range settings {
			if err := fs.Set(s.name, s.value); err != nil {
				rt.Fatal(err)
			}
		}
		for k, v := range want {
			if got := fs.Lookup(k).Value.String(); got != v {
				rt.Fatalf("%s = %q, want %q", k, got, v)
			}
		}
		_, _ = parseConfigFile(rapid.SliceOf(rapid.Byte()).Draw(rt, "junk"), fs)
	})
}

func FuzzParseConfigFile(f *testing.F) {
	f.Add([]byte("http: 127.0.0.1:1\njoin: [a:1, b:2]\n"))
	f.Add([]byte("- x\n"))
	f.Add([]byte("a: &x 1\nb: *x\n"))
	c := DefaultConfig()
	fs := flag.NewFlagSet("counterd", flag.ContinueOnError)
	c.BindFlags(fs)
	f.Fuzz(func(t *testing.T, data []byte) {
		settings, err := parseConfigFile(data, fs)
		if err != nil {
			return
		}
		for _, s := range settings {
			if fs.Lookup(s.name) == nil || notInConfigFile[s.name] {
				t.Fatalf("accepted setting %q", s.name)
			}
		}
	})
}

// TestEveryFlagHasAGroup: --help lists every flag under its topic; a new
// flag must be placed in flagGroups.
func TestEveryFlagHasAGroup(t *testing.T) {
	_, fs := bind(t)
	fs.Bool("version", false, "")
	grouped := map[string]string{}
	for _, g := range flagGroups {
		for _, name := range g.flags {
			if prev, dup := grouped[name]; dup {
				t.Errorf("--%s is in %q and %q", name, prev, g.title)
			}
			grouped[name] = g.title
			if fs.Lookup(name) == nil {
				t.Errorf("flagGroups lists --%s, which is not a flag", name)
			}
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if grouped[f.Name] == "" {
			t.Errorf("--%s is in no group of flagGroups", f.Name)
		}
	})
	var b strings.Builder
	PrintUsage(&b, fs)
	if strings.Contains(b.String(), "\nOther:") {
		t.Errorf("help has an Other group:\n%s", b.String())
	}
}

// TestFlagErrorOneLine: an unknown or malformed flag is one line naming
// the nearest flag and --help.
func TestFlagErrorOneLine(t *testing.T) {
	for args, want := range map[string]string{
		"--htp x":           "unknown flag --htp (did you mean --http?); run counterd --help for the flags",
		"--bogus":           "unknown flag --bogus; run counterd --help for the flags",
		"--max-body abc":    `invalid value "abc" for flag --max-body: parse error; run counterd --help for the flags`,
		"--data":            "flag needs an argument: --data; run counterd --help for the flags",
		"--peer-region r=a": "unknown flag --peer-region (did you mean --peer-regions?); run counterd --help for the flags",
	} {
		c := DefaultConfig()
		fs := flag.NewFlagSet("counterd", flag.ContinueOnError)
		fs.SetOutput(discard{})
		c.BindFlags(fs)
		err := fs.Parse(strings.Fields(args))
		if err == nil {
			t.Fatalf("%s: parsed", args)
		}
		if got := FlagError(fs, err); got != want || strings.Contains(got, "\n") {
			t.Errorf("%s: %q, want %q", args, got, want)
		}
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
