package auth

import (
	"errors"
	"fmt"
	"strings"

	"github.com/counterd/counterd/internal/glob"
)

// Errors of authentication and authorization. Front ends map them to their
// wire forms: HTTP 401 unauthenticated / 403 forbidden, RESP -NOAUTH,
// -WRONGPASS and -NOPERM, gRPC UNAUTHENTICATED / PERMISSION_DENIED.
var (
	// ErrUnauthenticated: the request carries no credentials.
	ErrUnauthenticated = errors.New("auth: authentication required")
	// ErrBadToken: the credentials match no user.
	ErrBadToken = errors.New("auth: invalid token")
	// ErrForbidden: the user lacks the permission for the operation or
	// for one of its keys.
	ErrForbidden = errors.New("auth: forbidden")
	// ErrInvalidFile: the tokens file does not parse or is inconsistent.
	ErrInvalidFile = errors.New("auth: invalid tokens file")
)

// Perm is a permission level; each level includes the ones below it.
type Perm uint8

const (
	// Public needs no token at all: health probes, and the RESP commands
	// that authenticate (AUTH, HELLO) or end a connection (QUIT).
	Public Perm = iota
	// Read reads counters, lists and aggregates.
	Read
	// Write changes counters (increments, sets, TTLs, field deletes) and
	// consumes rate limits.
	Write
	// Admin deletes counters, manages rollup specs and rate-limit
	// policies, and flushes.
	Admin
)

var permNames = [...]string{"public", "read", "write", "admin"}

func (p Perm) String() string {
	if int(p) < len(permNames) {
		return permNames[p]
	}
	return fmt.Sprintf("perm(%d)", p)
}

// ParsePerm parses "read", "write" or "admin".
func ParsePerm(s string) (Perm, error) {
	switch s {
	case "read":
		return Read, nil
	case "write":
		return Write, nil
	case "admin":
		return Admin, nil
	}
	return 0, fmt.Errorf("%w: permission %q is not read, write or admin", ErrInvalidFile, s)
}

// Need is what one operation (an HTTP route, a RESP command, a gRPC
// method) requires: a permission, held on the namespaces of the keys the
// operation touches, or on every namespace when All is set (operations on
// the whole node: flush, rate-limit policies).
type Need struct {
	Perm Perm
	All  bool
}

func (n Need) String() string {
	if n.All {
		return n.Perm.String() + " on *"
	}
	return n.Perm.String()
}

// Principal is an authenticated user and its grants. It is immutable and
// safe for concurrent use.
type Principal struct {
	User   string
	grants []grant
	max    Perm // the highest permission held on any namespace
	all    Perm // the permission held on every id (grants of "*")
}

// grant is one pattern of the tokens file. prefix is set for the common
// "literal*" form, matched with a prefix compare instead of a glob.
type grant struct {
	pattern  string
	prefix   string
	isPrefix bool
	perm     Perm
}

func newGrant(pattern string, p Perm) grant {
	g := grant{pattern: pattern, perm: p}
	if lit := literalPrefix(pattern); len(lit) == len(pattern)-1 && pattern[len(pattern)-1] == '*' {
		g.prefix, g.isPrefix = lit, true
	}
	return g
}

func (g *grant) match(id string) bool {
	if g.isPrefix {
		return strings.HasPrefix(id, g.prefix)
	}
	return glob.Match(g.pattern, id)
}

// covers reports whether every id starting with prefix matches g.
func (g *grant) covers(prefix string) bool {
	return g.isPrefix && strings.HasPrefix(prefix, g.prefix)
}

// CanAny reports whether p holds perm on at least one namespace: the
// check of a route or command before its keys are known (Redis's
// "no permissions to run the command").
func (p *Principal) CanAny(perm Perm) bool { return p.max >= perm }

// Can reports whether p holds perm on the counter id.
func (p *Principal) Can(perm Perm, id string) bool {
	if p.all >= perm {
		return true
	}
	for i := range p.grants {
		if g := &p.grants[i]; g.perm >= perm && g.match(id) {
			return true
		}
	}
	return false
}

// CanPrefix reports whether p holds perm on every id that starts with
// prefix: aggregates, and scans by pattern. Only grants of the form
// "literal*" (and "*") can cover a prefix.
func (p *Principal) CanPrefix(perm Perm, prefix string) bool {
	if p.all >= perm {
		return true
	}
	for i := range p.grants {
		if g := &p.grants[i]; g.perm >= perm && g.covers(prefix) {
			return true
		}
	}
	return false
}

// CanPattern reports whether p holds perm on every id a Redis glob can
// match (SCAN MATCH, KEYS): a pattern without wildcards is one id;
// otherwise its literal start must be covered as a prefix.
func (p *Principal) CanPattern(perm Perm, pattern string) bool {
	lit := literalPrefix(pattern)
	if len(lit) == len(pattern) {
		return p.Can(perm, pattern)
	}
	return p.CanPrefix(perm, lit)
}

// Allows reports whether p meets n for the given keys (none: only the
// permission itself, or the All scope, is checked).
func (p *Principal) Allows(n Need, keys ...string) bool {
	if n.Perm == Public {
		return true
	}
	if n.All {
		return p.all >= n.Perm
	}
	if p.max < n.Perm {
		return false
	}
	for _, k := range keys {
		if !p.Can(n.Perm, k) {
			return false
		}
	}
	return true
}

// literalPrefix is the start of a Redis glob before its first wildcard or
// escape.
func literalPrefix(pattern string) string {
	if i := strings.IndexAny(pattern, `*?[\`); i >= 0 {
		return pattern[:i]
	}
	return pattern
}
