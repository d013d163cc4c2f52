package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// Limits of the tokens file.
const (
	MaxFileBytes = 16 << 20 // a larger file is refused
	MinTokenLen  = 16       // shortest token counterctl auth hash accepts
	maxNameLen   = 128      // user names
	maxIDLen     = 255      // patterns, like counter ids
	hashPrefix   = "sha256:"
)

// DefaultUser is the user name Redis clients send when only a password is
// configured (AUTH token, HELLO 3 AUTH default token): it matches whichever
// user the token belongs to.
const DefaultUser = "default"

// Digest is the SHA-256 of a token, the only form a tokens file holds.
type Digest [sha256.Size]byte

// Hash returns the digest of token.
func Hash(token []byte) Digest { return sha256.Sum256(token) }

// String is the digest as written in a tokens file: "sha256:<hex>".
func (d Digest) String() string { return hashPrefix + hex.EncodeToString(d[:]) }

// Table is one parsed tokens file: users by token digest. It is immutable
// once built and safe for concurrent use.
type Table struct {
	byDigest map[Digest]*Principal
	users    []string // sorted, for logs
}

// Users lists the user names, sorted.
func (t *Table) Users() []string { return t.users }

// lookup finds the principal of digest d; user must be its name, or ""
// or DefaultUser for any.
func (t *Table) lookup(user string, d Digest) (*Principal, error) {
	p := t.byDigest[d]
	if p == nil || user != "" && user != DefaultUser && user != p.User {
		return nil, ErrBadToken
	}
	return p, nil
}

// The YAML layout:
//
//	users:
//	  ingest:
//	    tokens: ["sha256:<64 hex digits>"]
//	    grants:
//	      "page_views:*": write
//	      "*": read
//
// Parse walks the YAML node tree itself rather than decoding into structs:
// the YAML decoder's errors quote the values they could not place (the
// first bytes of a plaintext token pasted where a digest belongs, or as a
// key), and those errors end up in log lines. Parse's errors name users,
// grant patterns and line numbers, never any other value of the file.

// nodesPerByte bounds the nodes Parse visits, aliases followed, to a
// multiple of the file's size (plus minNodes): a file of aliases to long
// lists would otherwise cost their product. Without aliases a file has
// fewer nodes than bytes.
const (
	nodesPerByte = 8
	minNodes     = 1 << 16
)

// Parse reads a tokens file. Every error wraps ErrInvalidFile and names
// the offending user and line; a token digest may belong to one user only.
func Parse(r io.Reader) (*Table, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidFile, err)
	}
	if len(b) > MaxFileBytes {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalidFile, MaxFileBytes)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalidFile, scrubQuoted(err.Error()))
	}
	w := &walker{max: nodesPerByte*len(b) + minNodes}
	t := &Table{byDigest: make(map[Digest]*Principal)}
	root := w.deref(&doc)
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = w.deref(root.Content[0])
	}
	if root.Kind == 0 || root.Kind == yaml.DocumentNode || isNull(root) {
		return t, nil // an empty file: no users
	}
	users, err := w.top(root)
	if err != nil {
		return nil, err
	}
	if users == nil {
		return t, nil
	}
	seen := map[string]int{}
	for i := 0; i < len(users.Content); i += 2 {
		k, v := w.deref(users.Content[i]), w.deref(users.Content[i+1])
		if w.err != nil {
			return nil, w.err
		}
		if k.Kind != yaml.ScalarNode {
			return nil, w.errorf(k, "a user name must be a string")
		}
		name := k.Value
		if err := checkName(name); err != nil {
			return nil, fmt.Errorf("line %d: %w", k.Line, err)
		}
		if line, dup := seen[name]; dup {
			return nil, w.errorf(k, "user %q is listed twice (first at line %d)", name, line)
		}
		seen[name] = k.Line
		p, digests, err := w.user(name, v)
		if err != nil {
			return nil, err
		}
		for _, d := range digests {
			if other, dup := t.byDigest[d]; dup {
				return nil, fmt.Errorf("%w: users %q and %q share a token", ErrInvalidFile, other.User, name)
			}
			t.byDigest[d] = p
		}
		t.users = append(t.users, name)
	}
	if w.err != nil {
		return nil, w.err
	}
	sort.Strings(t.users)
	return t, nil
}

// walker visits a tokens file's nodes, counting them against max.
type walker struct {
	nodes, max int
	err        error // max exceeded
}

// deref follows aliases and counts n.
func (w *walker) deref(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 64; i++ {
		n = n.Alias
	}
	if w.nodes++; w.nodes > w.max && w.err == nil {
		w.err = fmt.Errorf("%w: more than %d entries (aliases counted each time they are used)", ErrInvalidFile, w.max)
	}
	return n
}

func (w *walker) errorf(n *yaml.Node, format string, args ...any) error {
	return fmt.Errorf("%w: line %d: %s", ErrInvalidFile, n.Line, fmt.Sprintf(format, args...))
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// top returns the users mapping of the file's root (nil: none).
func (w *walker) top(root *yaml.Node) (*yaml.Node, error) {
	if root.Kind != yaml.MappingNode {
		return nil, w.errorf(root, "the file must be a mapping holding users:")
	}
	var users *yaml.Node
	for i := 0; i < len(root.Content); i += 2 {
		k, v := w.deref(root.Content[i]), w.deref(root.Content[i+1])
		if k.Kind != yaml.ScalarNode || k.Value != "users" {
			return nil, w.errorf(k, "field not found: the file holds users: only")
		}
		if users != nil {
			return nil, w.errorf(k, "users: is listed twice")
		}
		if isNull(v) {
			continue
		}
		if v.Kind != yaml.MappingNode {
			return nil, w.errorf(v, "users: must map user names to their tokens and grants")
		}
		users = v
	}
	return users, nil
}

// user reads one user's entry (v): its principal and the
// digests of its tokens.
func (w *walker) user(name string, v *yaml.Node) (*Principal, []Digest, error) {
	p := &Principal{User: name}
	if isNull(v) {
		return nil, nil, fmt.Errorf("%w: user %q has no tokens", ErrInvalidFile, name)
	}
	if v.Kind != yaml.MappingNode {
		return nil, nil, w.errorf(v, "user %q must be a mapping of tokens and grants", name)
	}
	var tokens, grants *yaml.Node
	for i := 0; i < len(v.Content); i += 2 {
		fk, fv := w.deref(v.Content[i]), w.deref(v.Content[i+1])
		var slot **yaml.Node
		switch {
		case fk.Kind == yaml.ScalarNode && fk.Value == "tokens":
			slot = &tokens
		case fk.Kind == yaml.ScalarNode && fk.Value == "grants":
			slot = &grants
		default:
			return nil, nil, w.errorf(fk, "user %q: field not found: a user holds tokens: and grants: only", name)
		}
		if *slot != nil {
			return nil, nil, w.errorf(fk, "user %q: %s: is listed twice", name, fk.Value)
		}
		*slot = fv
	}
	if grants != nil && !isNull(grants) {
		if grants.Kind != yaml.MappingNode {
			return nil, nil, w.errorf(grants, "user %q: grants: must map id patterns to read, write or admin", name)
		}
		seen := map[string]bool{}
		for i := 0; i < len(grants.Content); i += 2 {
			gk, gv := w.deref(grants.Content[i]), w.deref(grants.Content[i+1])
			if w.err != nil {
				return nil, nil, w.err
			}
			if gk.Kind != yaml.ScalarNode {
				return nil, nil, w.errorf(gk, "user %q: a grant pattern must be a string", name)
			}
			pat := gk.Value
			if err := checkPattern(pat); err != nil {
				return nil, nil, fmt.Errorf("user %q, line %d: %w", name, gk.Line, err)
			}
			if seen[pat] {
				return nil, nil, w.errorf(gk, "user %q: grant %q is listed twice", name, pat)
			}
			seen[pat] = true
			perm, err := ParsePerm(gv.Value)
			if gv.Kind != yaml.ScalarNode || err != nil {
				// The value is not quoted: it may be anything, a token too.
				return nil, nil, w.errorf(gv, "user %q grant %q: the level is not read, write or admin", name, pat)
			}
			p.max = max(p.max, perm)
			if pat == "*" {
				p.all = max(p.all, perm)
			}
			p.grants = append(p.grants, newGrant(pat, perm))
		}
		// A deterministic order for equal inputs.
		sort.Slice(p.grants, func(i, j int) bool { return p.grants[i].pattern < p.grants[j].pattern })
	}
	if tokens == nil || isNull(tokens) || tokens.Kind == yaml.SequenceNode && len(tokens.Content) == 0 {
		return nil, nil, fmt.Errorf("%w: user %q has no tokens", ErrInvalidFile, name)
	}
	if tokens.Kind != yaml.SequenceNode {
		return nil, nil, w.errorf(tokens, "user %q: tokens: must be a list of sha256:<hex> digests", name)
	}
	digests := make([]Digest, 0, len(tokens.Content))
	for i, tn := range tokens.Content {
		if tn = w.deref(tn); w.err != nil {
			return nil, nil, w.err
		}
		if tn.Kind != yaml.ScalarNode {
			return nil, nil, w.errorf(tn, "user %q, token %d: not a string", name, i+1)
		}
		d, err := ParseDigest(tn.Value)
		if err != nil {
			return nil, nil, fmt.Errorf("user %q, token %d, line %d: %w", name, i+1, tn.Line, err)
		}
		digests = append(digests, d)
	}
	return p, digests, nil
}

// scrubQuoted removes what a YAML syntax error quotes (an anchor's name,
// a character): it could be part of a token.
func scrubQuoted(msg string) string {
	return quotedRE.ReplaceAllString(msg, "...")
}

var quotedRE = regexp.MustCompile("'[^']*'|\"[^\"]*\"|`[^`]*`")

// ParseDigest parses "sha256:<64 hex digits>". Its errors never quote s,
// which may be a plaintext token written where its digest belongs.
func ParseDigest(s string) (Digest, error) {
	var d Digest
	h, ok := strings.CutPrefix(s, hashPrefix)
	if !ok {
		return d, fmt.Errorf("%w: a plaintext token, or not of the form sha256:<hex> (store digests, never tokens: counterctl auth hash)", ErrInvalidFile)
	}
	if len(h) != hex.EncodedLen(len(d)) {
		return d, fmt.Errorf("%w: a token digest must be %d hex digits", ErrInvalidFile, hex.EncodedLen(len(d)))
	}
	if _, err := hex.Decode(d[:], []byte(h)); err != nil {
		return d, fmt.Errorf("%w: a token digest must be hex digits", ErrInvalidFile)
	}
	return d, nil
}

func checkName(name string) error {
	if name == "" || len(name) > maxNameLen {
		return fmt.Errorf("%w: user name must be 1-%d bytes", ErrInvalidFile, maxNameLen)
	}
	for _, r := range name {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return fmt.Errorf("%w: user name %q: only printable characters, no spaces", ErrInvalidFile, name)
		}
	}
	return nil
}

func checkPattern(pat string) error {
	if pat == "" || len(pat) > maxIDLen {
		return fmt.Errorf("%w: grant pattern must be 1-%d bytes", ErrInvalidFile, maxIDLen)
	}
	for _, r := range pat {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("%w: grant pattern %q: only printable characters", ErrInvalidFile, pat)
		}
	}
	return nil
}
