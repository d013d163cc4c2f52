package auth

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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

// TestParseErrorsNeverQuoteTokens: wherever a plaintext token is written
// in the file (where its digest belongs, in place of a list or a user, as
// a field name, as a level, after "sha256:", in a YAML syntax error), the error
// (which the server logs on a failed start or reload) holds no part of
// it: no four consecutive bytes of the token. Tokens are drawn from
// upper-case letters, which no error message spells four in a row. (User
// names and grant patterns are identifiers, which errors do name.)
func TestParseErrorsNeverQuoteTokens(t *testing.T) {
	good := digest("x-0123456789abcdef")
	places := []string{
		`users: {a: {tokens: [%s], grants: {"*": read}}}`,
		`users: {a: {tokens: %s, grants: {"*": read}}}`,
		`users: {a: {tokens: [{%s: 1}]}}`,
		`users: {a: %s}`,
		`users: %s`,
		`%s`,
		`%s: {a: {tokens: [` + good + `]}}`,
		`users: {a: {%s: 1, tokens: [` + good + `]}}`,
		`users: {a: {tokens: [` + good + `], grants: {"*": %s}}}`,
		`users: {a: {tokens: [` + good + `], grants: {"*": [%s]}}}`,
		`users: {a: {tokens: ["sha256:%s"]}}`,
		`users: {a: {tokens: [*%s]}}`,
		`users: {a: {tokens: ["%s`,
		"users:\n  a:\n    tokens:\n      - %s\n    grants: {\"*\": read}\n",
		"users:\n  a:\n    tokens: [" + good + "]\n  %s\n",
	}
	rapid.Check(t, func(t *rapid.T) {
		tok := rapid.StringMatching(`[A-Z]{16,64}`).Draw(t, "token")
		for _, place := range places {
			src := fmt.Sprintf(place, tok)
			if strings.Contains(place, "sha256:%s") {
				src = fmt.Sprintf(place, (tok + strings.Repeat("A", 64))[:64])
			}
			_, err := Parse(strings.NewReader(src))
			if err == nil {
				t.Fatalf("accepted %q", src)
			}
			if !errors.Is(err, ErrInvalidFile) {
				t.Fatalf("%q: error %v is not ErrInvalidFile", src, err)
			}
			msg := err.Error()
			for i := 0; i+4 <= len(tok); i++ {
				if strings.Contains(msg, tok[i:i+4]) {
					t.Fatalf("the error for %q quotes part of the token: %s", src, msg)
				}
			}
		}
	})
}

// TestParseErrorsNameTheEntry: an error says which user, which token and
// which line, so that the entry can be found without the value.
func TestParseErrorsNameTheEntry(t *testing.T) {
	good := digest("x-0123456789abcdef")
	src := "users:\n  a:\n    tokens: [" + good + "]\n  ingest:\n    tokens:\n      - " + good[:20] + "0\n      - PLAINTEXTTOKENPLAINTEXT\n"
	_, err := Parse(strings.NewReader(src))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{`user "ingest"`, "token 1", "line 6"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	src = "users:\n  ingest:\n    tokens:\n      - " + good + "\n      - PLAINTEXTTOKENPLAINTEXT\n"
	_, err = Parse(strings.NewReader(src))
	for _, want := range []string{`user "ingest"`, "token 2", "line 5", "counterctl auth hash"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "PLAIN") {
		t.Errorf("error quotes the token: %v", err)
	}
}

// TestParseAliasesBounded: aliases are followed (a shared grants block),
// but a file whose aliases multiply its entries far beyond its size is
// refused rather than walked.
func TestParseAliasesBounded(t *testing.T) {
	tab := mustParse(t, fmt.Sprintf(
		"users:\n  a: {tokens: [%s], grants: &g {\"x:*\": write}}\n  b: {tokens: [%s], grants: *g}\n", digest("a-0123456789abcdef"), digest("b-0123456789abcdef")))
	s := NewStore(tab)
	p, err := s.Authenticate("b", []byte("b-0123456789abcdef"))
	if err != nil || !p.Can(Write, "x:1") {
		t.Fatalf("alias of grants: %v %v", p, err)
	}
	var b strings.Builder
	b.WriteString("users:\n  a0:\n    tokens: [" + digest("a-0123456789abcdef") + "]\n    grants: &g\n")
	for i := range 2000 {
		fmt.Fprintf(&b, "      \"p%d:*\": read\n", i)
	}
	for i := 1; i < 500; i++ {
		fmt.Fprintf(&b, "  a%d: {tokens: [%s], grants: *g}\n", i, digest(fmt.Sprintf("a%d-0123456789abcdef", i)))
	}
	if _, err := Parse(strings.NewReader(b.String())); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("2000 grants aliased 500 times: %v", err)
	}
}

// TestGrantsAndPermOn: a principal lists its grants, and PermOn is the highest permission any of them gives on an id.
func TestGrantsAndPermOn(t *testing.T) {
	s := NewStore(mustParse(t, testFile()))
	writer, err := s.Authenticate("", []byte("writer-token-0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	got := writer.Grants()
	slices.SortFunc(got, func(a, b Grant) int { return strings.Compare(a.Pattern, b.Pattern) })
	want := []Grant{{"likes:?", Read}, {"page_views:*", Write}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("grants %v, want %v", got, want)
	}
	for id, perm := range map[string]Perm{"page_views:a": Write, "likes:x": Read, "likes:xy": Public, "other": Public} {
		if p := writer.PermOn(id); p != perm {
			t.Errorf("PermOn(%q) = %v, want %v", id, p, perm)
		}
	}
	admin, err := s.Authenticate("", []byte("admin-token-0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	if p := admin.PermOn("anything"); p != Admin {
		t.Errorf("admin PermOn = %v", p)
	}
}
