package server

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/counterd/counterd/internal/auth"
)

// routeInDocRE is a route as docs/security.md's HTTP table spells it.
var routeInDocRE = regexp.MustCompile("`((?:GET|POST|PUT|DELETE|PATCH) /[^`]*)`")

// TestSecurityDocListsEveryRoute: docs/security.md's HTTP permissions
// table lists every route the server mounts (httpNeeds, which
// TestHTTPNeedsCoverRoutes keeps complete, and the --admin listener's
// routes), each in exactly one row, with the level httpNeeds gives it:
// "none" for public routes, "<level> on *" for routes that need a grant
// of *, "<level> ..." otherwise.
func TestSecurityDocListsEveryRoute(t *testing.T) {
	raw, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	start := strings.Index(doc, "\n### HTTP\n")
	if start < 0 {
		t.Fatal(`docs/security.md has no "### HTTP" section`)
	}
	section := doc[start+1:]
	if end := strings.Index(section[1:], "\n### "); end >= 0 {
		section = section[:end+1]
	}
	levels := map[string]string{} // route -> its row's level
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) != 2 {
			t.Errorf("row %q: want two cells, route and level", line)
			continue
		}
		for _, m := range routeInDocRE.FindAllStringSubmatch(cells[0], -1) {
			if _, dup := levels[m[1]]; dup {
				t.Errorf("route %s is in two rows", m[1])
			}
			levels[m[1]] = cells[1]
		}
	}
	want := map[string]string{}
	for pat, need := range httpNeeds {
		route := strings.ReplaceAll(pat, "{$}", "")
		switch {
		case need.Perm == auth.Public:
			want[route] = "none"
		case need.All:
			want[route] = need.Perm.String() + " on *"
		default:
			want[route] = need.Perm.String()
		}
	}
	for _, rt := range adminRoutes {
		want["GET "+rt.pattern] = "none"
	}
	for route, w := range want {
		got, ok := levels[route]
		switch {
		case !ok:
			t.Errorf("route %s (%s) is not in docs/security.md's HTTP table", route, w)
		case !strings.HasPrefix(got, w) || !strings.HasSuffix(w, " on *") && strings.HasPrefix(got, w+" on *"):
			t.Errorf("route %s: the table says %q, the server needs %s", route, got, w)
		}
	}
	for route := range levels {
		if _, ok := want[route]; !ok {
			t.Errorf("docs/security.md's HTTP table lists %s, which the server does not mount", route)
		}
	}
}
