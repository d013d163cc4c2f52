package quota

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"pgregory.net/rapid"

	"github.com/counterd/counterd/internal/glob"
)

func TestParse(t *testing.T) {
	c, err := Parse(strings.NewReader(`
namespaces:
  "q:*":          # a comment
    max_keys: 10
    max_hash_fields: 1000
  "big:*": {max_keys: 50}
default: {max_keys: 10000000, max_hash_fields: 100000}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Rule{
		{Pattern: "q:*", Limits: Limits{MaxKeys: 10, MaxHashFields: 1000}, Line: 3},
		{Pattern: "big:*", Limits: Limits{MaxKeys: 50}, Line: 6},
	}
	if fmt.Sprint(c.Rules) != fmt.Sprint(want) || c.Default == nil || *c.Default != (Limits{MaxKeys: 10000000, MaxHashFields: 100000}) {
		t.Fatalf("got %+v default %+v", c.Rules, c.Default)
	}
	for _, empty := range []string{"", "# nothing\n", "namespaces:\n"} {
		c, err := Parse(strings.NewReader(empty))
		if err != nil || len(c.Rules) != 0 || c.Default != nil {
			t.Errorf("%q: %+v %v", empty, c, err)
		}
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name, file string
		want       []string // each in the message
	}{
		{"unknown top key", "namespace:\n  a: {max_keys: 1}\n", []string{"line 1", `unknown key "namespace"`}},
		{"unknown limit", "namespaces:\n  \"a:*\": {max_key: 1}\n", []string{"line 2", `unknown key "max_key"`}},
		{"zero", "default: {max_keys: 0}\n", []string{"line 1", "positive integer"}},
		{"negative", "default: {max_hash_fields: -3}\n", []string{"positive integer"}},
		{"string", "default: {max_keys: \"10\"}\n", []string{"positive integer"}},
		{"float", "default: {max_keys: 1.5}\n", []string{"positive integer"}},
		{"too big", "default: {max_keys: 99999999999999999999}\n", []string{"positive integer"}},
		{"duplicate pattern", "namespaces:\n  \"a:*\": {max_keys: 1}\n  \"a:*\": {max_keys: 2}\n", []string{"line 3", "given twice", "line 2"}},
		{"not a mapping", "- a\n", []string{"line 1", "mapping"}},
		{"limits not a mapping", "namespaces:\n  \"a:*\": 5\n", []string{"line 2", "want a mapping"}},
		{"empty pattern", "namespaces:\n  \"\": {max_keys: 1}\n", []string{"empty pattern"}},
		{"long pattern", "namespaces:\n  \"" + strings.Repeat("a", 256) + "\": {max_keys: 1}\n", []string{"at most 255"}},
		{"two documents", "default: {max_keys: 1}\n---\ndefault: {max_keys: 2}\n", []string{"more than one"}},
		{"every error reported", "namespaces:\n  \"a:*\": {max_keys: 0}\n  \"b:*\": {foo: 1}\nbar: 1\n", []string{"line 2", "line 3", "line 4"}},
		{"syntax", "namespaces: [\n", []string{"yaml"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(c.file))
			if !errors.Is(err, ErrInvalidFile) {
				t.Fatalf("error %v, want ErrInvalidFile", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// FuzzParse: Parse never panics, and a file it accepts holds only
// positive limits and distinct, non-empty patterns.
func FuzzParse(f *testing.F) {
	f.Add("namespaces:\n  \"q:*\": {max_keys: 10, max_hash_fields: 3}\ndefault: {max_keys: 5}\n")
	f.Add("default: {max_keys: 0}\n")
	f.Add("namespaces: {a: {max_keys: 1}, a: {max_keys: 2}}")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := Parse(strings.NewReader(s))
		if err != nil {
			if !errors.Is(err, ErrInvalidFile) {
				t.Fatalf("error %v does not wrap ErrInvalidFile", err)
			}
			return
		}
		seen := map[string]bool{}
		for _, r := range c.Rules {
			if r.Pattern == "" || seen[r.Pattern] || r.MaxKeys < 0 || r.MaxHashFields < 0 {
				t.Fatalf("accepted %+v", r)
			}
			seen[r.Pattern] = true
		}
		if d := c.Default; d != nil && (d.MaxKeys < 0 || d.MaxHashFields < 0) {
			t.Fatalf("accepted default %+v", d)
		}
	})
}

// TestOfProperty: an id counts under the first rule matching it, else
// under the default of its namespace, else none.
func TestOfProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		pats := rapid.SliceOfNDistinct(rapid.SampledFrom([]string{"a:*", "a:1*", "b:*", "*x", "?:?", "c"}), 0, 4, rapid.ID[string]).Draw(t, "patterns")
		c := &Config{}
		for i, p := range pats {
			c.Rules = append(c.Rules, Rule{Pattern: p, Limits: Limits{MaxKeys: int64(i + 1)}})
		}
		if rapid.Bool().Draw(t, "default") {
			c.Default = &Limits{MaxKeys: 100}
		}
		s := NewSet(c)
		id := rapid.StringMatching(`[abcx1:]{1,6}`).Draw(t, "id")
		got := s.Of(id)
		for _, p := range pats {
			if glob.Match(p, id) {
				if got == nil || got.name != p {
					t.Fatalf("%q: counted under %+v, want %q", id, got, p)
				}
				return
			}
		}
		switch {
		case c.Default == nil && got != nil:
			t.Fatalf("%q: counted under %+v without a default", id, got)
		case c.Default != nil && (got == nil || got.name != DefaultName || got.ns != Namespace(id)):
			t.Fatalf("%q: counted under %+v, want the default of %q", id, got, Namespace(id))
		}
	})
}

// TestReserveExact: concurrent reservations never pass max_keys and
// count exactly.
func TestReserveExact(t *testing.T) {
	c := &Counter{name: "q:*", limits: Limits{MaxKeys: 100}}
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				err := c.Reserve(fmt.Sprint(i))
				if err == nil {
					mu.Lock()
					ok++
					mu.Unlock()
				} else if !errors.Is(err, ErrExceeded) {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if ok != 100 || c.Keys() != 100 {
		t.Fatalf("%d reserved, count %d: want 100", ok, c.Keys())
	}
	c.Add(-1)
	if err := c.Reserve("again"); err != nil {
		t.Fatalf("room given back: %v", err)
	}
}

func TestExceededMessage(t *testing.T) {
	e := &ExceededError{Quota: "q:*", Limit: "max_keys", Max: 10}
	if e.Error() != "quota exceeded for q:* (max_keys 10)" {
		t.Fatal(e.Error())
	}
	d := &ExceededError{Quota: DefaultName, Namespace: "ns", Limit: "max_hash_fields", Max: 3}
	if d.Error() != `quota exceeded for default namespace "ns" (max_hash_fields 3)` {
		t.Fatal(d.Error())
	}
	wrapped := fmt.Errorf("batch op 2: %w", e)
	if !errors.Is(wrapped, ErrExceeded) || Message(wrapped) != e.Error() {
		t.Fatalf("%v: %q", wrapped, Message(wrapped))
	}
	remote := errors.New("quota exceeded for q:* (max_keys 10) (on node n2)")
	if Message(remote) != "quota exceeded for q:* (max_keys 10) (on node n2)" {
		t.Fatal(Message(remote))
	}
	if Namespace("a:b:c") != "a" || Namespace("abc") != "" || Namespace(":x") != "" {
		t.Fatal("Namespace")
	}
}
