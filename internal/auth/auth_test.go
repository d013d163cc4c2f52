package auth

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/counterd/counterd/internal/glob"
)

func digest(tok string) string { return Hash([]byte(tok)).String() }

func mustParse(t *testing.T, src string) *Table {
	t.Helper()
	tab, err := Parse(strings.NewReader(src))
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

func testFile() string {
	return fmt.Sprintf(`
users:
  reader:
    tokens: [%q]
    grants: {"page_views:*": read}
  writer:
    tokens: [%q, %q]
    grants:
      "page_views:*": write
      "likes:?": read
  admin:
    tokens: [%q]
    grants: {"*": admin}
`, digest("reader-token-0123456789"), digest("writer-token-0123456789"), digest("writer-rotated-0123456789"), digest("admin-token-0123456789"))
}

func TestAuthenticate(t *testing.T) {
	s := NewStore(mustParse(t, testFile()))
	for _, tc := range []struct {
		name, user, token, want string
		err                     error
	}{
		{"token alone", "", "reader-token-0123456789", "reader", nil},
		{"default user", DefaultUser, "writer-token-0123456789", "writer", nil},
		{"named user", "writer", "writer-rotated-0123456789", "writer", nil},
		{"wrong user", "admin", "writer-token-0123456789", "", ErrBadToken},
		{"wrong token", "", "nope-0123456789abcdef", "", ErrBadToken},
		{"no token", "", "", "", ErrUnauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Twice: the second answer comes from the token cache.
			for range 2 {
				p, err := s.Authenticate(tc.user, []byte(tc.token))
				if !errors.Is(err, tc.err) {
					t.Fatalf("err %v, want %v", err, tc.err)
				}
				if err == nil && p.User != tc.want {
					t.Fatalf("user %q, want %q", p.User, tc.want)
				}
			}
		})
	}
}

func TestPermissions(t *testing.T) {
	s := NewStore(mustParse(t, testFile()))
	who := func(tok string) *Principal {
		p, err := s.Authenticate("", []byte(tok))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	reader, writer, admin := who("reader-token-0123456789"), who("writer-token-0123456789"), who("admin-token-0123456789")
	for _, tc := range []struct {
		name string
		p    *Principal
		need Need
		keys []string
		want bool
	}{
		{"reader reads its namespace", reader, Need{Perm: Read}, []string{"page_views:a"}, true},
		{"reader cannot write", reader, Need{Perm: Write}, []string{"page_views:a"}, false},
		{"reader other namespace", reader, Need{Perm: Read}, []string{"likes:a"}, false},
		{"reader one bad key of many", reader, Need{Perm: Read}, []string{"page_views:a", "likes:a"}, false},
		{"writer reads (levels)", writer, Need{Perm: Read}, []string{"page_views:a"}, true},
		{"writer writes", writer, Need{Perm: Write}, []string{"page_views:a", "page_views:b"}, true},
		{"writer cannot delete", writer, Need{Perm: Admin}, []string{"page_views:a"}, false},
		{"writer glob grant", writer, Need{Perm: Read}, []string{"likes:x"}, true},
		{"writer glob grant no match", writer, Need{Perm: Read}, []string{"likes:xy"}, false},
		{"writer glob grant read only", writer, Need{Perm: Write}, []string{"likes:x"}, false},
		{"writer not global", writer, Need{Perm: Read, All: true}, nil, false},
		{"admin global", admin, Need{Perm: Admin, All: true}, nil, true},
		{"admin any key", admin, Need{Perm: Admin}, []string{"x", "y:z"}, true},
		{"public needs nothing", reader, Need{Perm: Public}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.Allows(tc.need, tc.keys...); got != tc.want {
				t.Fatalf("Allows(%v, %q) = %v", tc.need, tc.keys, got)
			}
		})
	}
	if !reader.CanPrefix(Read, "page_views:") || !reader.CanPrefix(Read, "page_views:art") {
		t.Fatal("reader should cover its namespace prefix")
	}
	if reader.CanPrefix(Read, "page_") || reader.CanPrefix(Read, "") {
		t.Fatal("a prefix wider than the grant must not be covered")
	}
	if writer.CanPrefix(Read, "likes:") {
		t.Fatal(`"likes:?" cannot cover a prefix`)
	}
	if !reader.CanPattern(Read, "page_views:*") || reader.CanPattern(Read, "*") || !reader.CanPattern(Read, "page_views:a") {
		t.Fatal("CanPattern")
	}
	if reader.CanAny(Write) || !writer.CanAny(Write) || writer.CanAny(Admin) {
		t.Fatal("CanAny")
	}
}

func TestParseErrors(t *testing.T) {
	good := digest("x-0123456789abcdef")
	for _, tc := range []struct{ name, src, want string }{
		{"plain token", `users: {a: {tokens: ["secret"], grants: {"*": read}}}`, "sha256:<hex>"},
		{"short digest", `users: {a: {tokens: ["sha256:abcd"], grants: {"*": read}}}`, "64 hex digits"},
		{"bad perm", fmt.Sprintf(`users: {a: {tokens: [%q], grants: {"*": root}}}`, good), "not read, write or admin"},
		{"no tokens", `users: {a: {grants: {"*": read}}}`, "no tokens"},
		{"shared token", fmt.Sprintf(`users: {a: {tokens: [%q]}, b: {tokens: [%q]}}`, good, good), "share a token"},
		{"unknown field", fmt.Sprintf(`users: {a: {tokens: [%q], grant: {"*": read}}}`, good), "not found"},
		{"empty pattern", fmt.Sprintf(`users: {a: {tokens: [%q], grants: {"": read}}}`, good), "pattern"},
		{"space in name", fmt.Sprintf(`users: {"a b": {tokens: [%q]}}`, good), "no spaces"},
		{"not yaml", `users: [`, "invalid tokens file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tc.src))
			if !errors.Is(err, ErrInvalidFile) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want ErrInvalidFile mentioning %q", err, tc.want)
			}
		})
	}
}

func TestReloadSwapsAndKeepsOnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	write := func(src string) {
		if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(fmt.Sprintf(`users: {a: {tokens: [%q], grants: {"*": read}}}`, digest("aaaa-0123456789abcdef")))
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate("", []byte("bbbb-0123456789abcdef")); !errors.Is(err, ErrBadToken) {
		t.Fatalf("b before reload: %v", err)
	}
	if _, err := s.Authenticate("", []byte("aaaa-0123456789abcdef")); err != nil { // now cached
		t.Fatal(err)
	}
	gen := s.Gen()
	write(fmt.Sprintf(`users: {b: {tokens: [%q], grants: {"*": read}}}`, digest("bbbb-0123456789abcdef")))
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if s.Gen() != gen+1 {
		t.Fatalf("gen %d after reload, want %d", s.Gen(), gen+1)
	}
	if p, err := s.Authenticate("", []byte("bbbb-0123456789abcdef")); err != nil || p.User != "b" {
		t.Fatalf("b after reload: %v %v", p, err)
	}
	if _, err := s.Authenticate("", []byte("aaaa-0123456789abcdef")); !errors.Is(err, ErrBadToken) {
		t.Fatalf("a removed, still accepted: %v", err)
	}
	write("users: [broken")
	if err := s.Reload(); !errors.Is(err, ErrInvalidFile) {
		t.Fatalf("broken file: %v", err)
	}
	if _, err := s.Authenticate("", []byte("bbbb-0123456789abcdef")); err != nil || s.Gen() != gen+1 {
		t.Fatalf("a broken file must leave the table in force: %v", err)
	}
}

// TestParseProperty: any well-formed file parses to exactly its users,
// tokens and grants.
func TestParseProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		names := rapid.SliceOfNDistinct(rapid.StringMatching(`[a-z][a-z0-9_]{0,8}`), 1, 5, rapid.ID[string]).Draw(t, "users")
		perms := []string{"read", "write", "admin"}
		var b strings.Builder
		b.WriteString("users:\n")
		type want struct {
			tokens []string
			grants map[string]Perm
		}
		wants := map[string]want{}
		for i, n := range names {
			w := want{grants: map[string]Perm{}}
			fmt.Fprintf(&b, "  %s:\n    tokens:\n", n)
			for j := range rapid.IntRange(1, 3).Draw(t, "ntokens") {
				tok := fmt.Sprintf("tok-%d-%d-0123456789abcdef", i, j)
				w.tokens = append(w.tokens, tok)
				fmt.Fprintf(&b, "      - %s\n", digest(tok))
			}
			pats := rapid.SliceOfNDistinct(rapid.StringMatching(`[a-z*?:]{1,10}`), 0, 4, rapid.ID[string]).Draw(t, "patterns")
			b.WriteString("    grants:\n")
			if len(pats) == 0 {
				b.WriteString("      {}\n")
			}
			for _, p := range pats {
				perm := rapid.SampledFrom(perms).Draw(t, "perm")
				w.grants[p], _ = ParsePerm(perm)
				fmt.Fprintf(&b, "      %q: %s\n", p, perm)
			}
			wants[n] = w
		}
		tab, err := Parse(strings.NewReader(b.String()))
		if err != nil {
			t.Fatalf("%v\n%s", err, b.String())
		}
		s := NewStore(tab)
		for n, w := range wants {
			for _, tok := range w.tokens {
				p, err := s.Authenticate(n, []byte(tok))
				if err != nil || p.User != n {
					t.Fatalf("user %s token %s: %v", n, tok, err)
				}
				if len(p.grants) != len(w.grants) {
					t.Fatalf("user %s: %d grants, want %d", n, len(p.grants), len(w.grants))
				}
				for _, g := range p.grants {
					if w.grants[g.pattern] != g.perm {
						t.Fatalf("user %s grant %q: %v, want %v", n, g.pattern, g.perm, w.grants[g.pattern])
					}
					// The prefix fast path agrees with the glob.
					id := rapid.StringMatching(`[a-z:]{0,12}`).Draw(t, "id")
					if g.match(id) != glob.Match(g.pattern, id) {
						t.Fatalf("grant %q on %q: fast path disagrees with glob", g.pattern, id)
					}
				}
			}
		}
	})
}

// FuzzParse: no input panics, and an accepted file yields principals whose
// grants are valid.
func FuzzParse(f *testing.F) {
	f.Add(testFile())
	f.Add(`users: {a: {tokens: ["sha256:` + strings.Repeat("ab", 32) + `"], grants: {"x:*": write}}}`)
	f.Add("users:\n  a:\n    tokens: []\n")
	f.Add("")
	f.Fuzz(func(t *testing.T, src string) {
		tab, err := Parse(strings.NewReader(src))
		if err != nil {
			if !errors.Is(err, ErrInvalidFile) {
				t.Fatalf("error not ErrInvalidFile: %v", err)
			}
			return
		}
		for d, p := range tab.byDigest {
			if _, err := ParseDigest(d.String()); err != nil {
				t.Fatal(err)
			}
			if checkName(p.User) != nil {
				t.Fatalf("accepted user name %q", p.User)
			}
			for _, g := range p.grants {
				if g.perm < Read || g.perm > Admin || checkPattern(g.pattern) != nil || g.perm > p.max {
					t.Fatalf("accepted grant %+v", g)
				}
			}
		}
	})
}
