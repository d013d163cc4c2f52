package auth

import (
	"bytes"
	"crypto/subtle"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
)

// Store is the tokens file in force. Authenticate and Resolve read it
// without locks; Reload swaps in a new table atomically. Safe for
// concurrent use; it holds no resources (no Close).
type Store struct {
	path string
	mu   sync.Mutex // serializes Reload
	cur  atomic.Pointer[snapshot]
	// onFailure counts refused requests (SetOnFailure); nil: not counted.
	onFailure func(frontEnd, reason string)
}

type snapshot struct {
	t   *Table
	gen uint64
	// cache holds recently accepted tokens, so that most requests skip
	// the SHA-256: a slot per xxhash of the token, compared in constant
	// time. Only accepted tokens enter it, so wrong tokens cannot evict
	// good ones; it belongs to one table, so a reload empties it.
	cache [cacheSlots]atomic.Pointer[cacheEntry]
}

const cacheSlots = 256

type cacheEntry struct {
	token []byte
	p     *Principal
}

// Open loads the tokens file at path.
func Open(path string) (*Store, error) {
	s := &Store{path: path}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// NewStore returns a store serving t, with no file to reload (tests).
func NewStore(t *Table) *Store {
	s := &Store{}
	s.cur.Store(&snapshot{t: t, gen: 1})
	return s
}

// Reload parses the file again and, if it is valid, puts it in force for
// every later request; an invalid file leaves the current table.
func (s *Store) Reload() error {
	if s.path == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f, err := os.Open(s.path)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidFile, err)
	}
	defer f.Close()
	t, err := Parse(f)
	if err != nil {
		return fmt.Errorf("%s: %w", s.path, err)
	}
	var gen uint64 = 1
	if old := s.cur.Load(); old != nil {
		gen = old.gen + 1
	}
	s.cur.Store(&snapshot{t: t, gen: gen})
	return nil
}

// Table returns the table in force.
func (s *Store) Table() *Table { return s.cur.Load().t }

// Gen is the generation of the table in force; it grows at every
// successful Reload.
func (s *Store) Gen() uint64 { return s.cur.Load().gen }

// Authenticate returns the principal of token. user "" or DefaultUser
// accepts any user's token; another name must be the token's user. A
// missing token is ErrUnauthenticated, a wrong one ErrBadToken.
func (s *Store) Authenticate(user string, token []byte) (*Principal, error) {
	if len(token) == 0 {
		return nil, ErrUnauthenticated
	}
	snap := s.cur.Load()
	slot := &snap.cache[xxhash.Sum64(token)%cacheSlots]
	if e := slot.Load(); e != nil && subtle.ConstantTimeCompare(e.token, token) == 1 {
		if user != "" && user != DefaultUser && user != e.p.User {
			return nil, ErrBadToken
		}
		return e.p, nil
	}
	p, err := snap.t.lookup(user, Hash(token))
	if err != nil {
		return nil, err
	}
	slot.Store(&cacheEntry{token: bytes.Clone(token), p: p})
	return p, nil
}

// Resolve is Authenticate for a token already hashed: connections keep
// the digest, not the token, and resolve it again after a reload.
func (s *Store) Resolve(user string, d Digest) (*Principal, error) {
	return s.cur.Load().t.lookup(user, d)
}
