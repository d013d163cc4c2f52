package httpapi

import (
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/counterd/counterd/internal/glob"
)

// TestListPatternProperty: GET /counters lists exactly the ids that start
// with prefix and match match, whichever of the two listPattern scans by:
// an id is kept when it matches the scan pattern and passes the filter
// iff it meets both conditions.
func TestListPatternProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		prefix := rapid.StringMatching(`[ab:*?\\]{0,4}`).Draw(t, "prefix")
		match := rapid.StringMatching(`[ab:*?]{0,5}`).Draw(t, "match")
		pattern, keep := listPattern(prefix, match)
		for range 20 {
			id := rapid.StringMatching(`[ab:*?\\]{0,7}`).Draw(t, "id")
			want := strings.HasPrefix(id, prefix) && (match == "" || glob.Match(match, id))
			got := (pattern == "" || glob.Match(pattern, id)) && keep(id)
			if got != want {
				t.Fatalf("prefix %q match %q: scan %q keeps %q: %v, want %v", prefix, match, pattern, id, got, want)
			}
		}
	})
}

// TestListPatternNamespace: a listing of one namespace (prefix "nsA:"),
// whatever its match, scans within the namespace, so a grant of the
// namespace covers the scan pattern (the guarded backend checks the
// pattern with auth.Principal.CanPattern); a match narrower than the prefix is scanned
// as it is.
func TestListPatternNamespace(t *testing.T) {
	for _, tc := range []struct{ prefix, match, want string }{
		{"nsA:", "*", "nsA:*"},
		{"nsA:", "*1", "nsA:*"},
		{"nsA:", "?x*", "nsA:*"},
		{"nsA:", "", "nsA:*"},
		{"nsA:", "nsA:x*", "nsA:x*"},
		{"", "nsA:*", "nsA:*"},
		{"n", "nsA:*", "nsA:*"},
		{"nsA:", "nsB:*", "nsB:*"},
		{"a*b:", "*", `a\*b:*`},
	} {
		if got, _ := listPattern(tc.prefix, tc.match); got != tc.want {
			t.Errorf("prefix %q match %q: scans %q, want %q", tc.prefix, tc.match, got, tc.want)
		}
	}
}
