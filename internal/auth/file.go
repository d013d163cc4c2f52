package auth

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
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

// fileSchema is the YAML layout:
//
//	users:
//	  ingest:
//	    tokens: ["sha256:<64 hex digits>"]
//	    grants:
//	      "page_views:*": write
//	      "*": read
type fileSchema struct {
	Users map[string]userSchema `yaml:"users"`
}

type userSchema struct {
	Tokens []string          `yaml:"tokens"`
	Grants map[string]string `yaml:"grants"`
}

// Parse reads a tokens file. Every error wraps ErrInvalidFile and names
// the offending user or entry; a token digest may belong to one user only.
func Parse(r io.Reader) (*Table, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidFile, err)
	}
	if len(b) > MaxFileBytes {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalidFile, MaxFileBytes)
	}
	var f fileSchema
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && err != io.EOF {
		return nil, fmt.Errorf("%w: %v", ErrInvalidFile, err)
	}
	t := &Table{byDigest: make(map[Digest]*Principal)}
	for name, u := range f.Users {
		if err := checkName(name); err != nil {
			return nil, err
		}
		p := &Principal{User: name}
		pats := make([]string, 0, len(u.Grants))
		for pat := range u.Grants {
			pats = append(pats, pat)
		}
		sort.Strings(pats) // a deterministic order for equal inputs
		for _, pat := range pats {
			perm, err := ParsePerm(u.Grants[pat])
			if err != nil {
				return nil, fmt.Errorf("user %q grant %q: %w", name, pat, err)
			}
			if err := checkPattern(pat); err != nil {
				return nil, fmt.Errorf("user %q: %w", name, err)
			}
			p.max = max(p.max, perm)
			if pat == "*" {
				p.all = max(p.all, perm)
			}
			p.grants = append(p.grants, newGrant(pat, perm))
		}
		if len(u.Tokens) == 0 {
			return nil, fmt.Errorf("%w: user %q has no tokens", ErrInvalidFile, name)
		}
		for _, tok := range u.Tokens {
			d, err := ParseDigest(tok)
			if err != nil {
				return nil, fmt.Errorf("user %q: %w", name, err)
			}
			if other, dup := t.byDigest[d]; dup {
				return nil, fmt.Errorf("%w: users %q and %q share a token", ErrInvalidFile, other.User, name)
			}
			t.byDigest[d] = p
		}
		t.users = append(t.users, name)
	}
	sort.Strings(t.users)
	return t, nil
}

// ParseDigest parses "sha256:<64 hex digits>".
func ParseDigest(s string) (Digest, error) {
	var d Digest
	h, ok := strings.CutPrefix(s, hashPrefix)
	if !ok {
		return d, fmt.Errorf("%w: token %.16q... is not of the form sha256:<hex> (store digests, never tokens: counterctl auth hash)", ErrInvalidFile, s)
	}
	if len(h) != hex.EncodedLen(len(d)) {
		return d, fmt.Errorf("%w: token digest must be %d hex digits", ErrInvalidFile, hex.EncodedLen(len(d)))
	}
	if _, err := hex.Decode(d[:], []byte(h)); err != nil {
		return d, fmt.Errorf("%w: token digest: %v", ErrInvalidFile, err)
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
