package glob

import (
	"strings"
	"testing"
)

// FuzzMatch checks Match against a slow recursive reference matcher.
func FuzzMatch(f *testing.F) {
	for _, s := range [][2]string{{"*", "x"}, {"a?c", "abc"}, {"a[b-d]*", "acz"}, {`\*`, "*"}, {"[^a]", "b"}, {"**a*", "bba"}, {"[", "["}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, s string) {
		if len(pattern) > 64 || len(s) > 64 {
			return
		}
		if got, want := Match(pattern, []byte(s)), globRef(pattern, s); got != want {
			t.Fatalf("Match(%q, %q) = %v, reference says %v", pattern, s, got, want)
		}
	})
}

// globRef is the definition of Glob written as plain recursion.
func globRef(p, s string) bool {
	if p == "" {
		return s == ""
	}
	switch p[0] {
	case '*':
		for i := 0; i <= len(s); i++ {
			if globRef(p[1:], s[i:]) {
				return true
			}
		}
		return false
	case '?':
		return s != "" && globRef(p[1:], s[1:])
	case '[':
		if s == "" {
			return false
		}
		ok, next := matchClass(p, 0, s[0])
		return next > 0 && ok && globRef(p[next:], s[1:])
	case '\\':
		if len(p) > 1 {
			return s != "" && s[0] == p[1] && globRef(p[2:], s[1:])
		}
	}
	return s != "" && s[0] == p[0] && globRef(p[1:], s[1:])
}

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", true},
		{"*", "abc", true},
		{"a*", "abc", true},
		{"a*c", "abc", true},
		{"a*c", "abd", false},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"[ab]x", "bx", true},
		{"[^ab]x", "bx", false},
		{"[a-c]x", "cx", true},
		{"[c-a]x", "bx", true},
		{`a\*`, "a*", true},
		{`a\*`, "ab", false},
		{"[abc", "a", false},
		{"edge:remote_address=*", "edge:remote_address=10.0.0.1/path=/x", true},
		{"*a*a*a*a*a*a*b", strings.Repeat("a", 60), false}, // no exponential blow-up
	} {
		if got := Match(c.pattern, c.s); got != c.want {
			t.Errorf("Match(%q, %q) = %v", c.pattern, c.s, got)
		}
	}
}
