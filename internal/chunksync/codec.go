package chunksync

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
)

// Sentinel errors; every error of the package wraps one of these or the
// engine's.
var (
	// ErrCorrupt: a blob does not decode, or its bytes do not hash to the
	// address it was fetched by.
	ErrCorrupt = errors.New("chunksync: corrupt blob")
	// ErrNotFound: no blob has the requested hash.
	ErrNotFound = errors.New("chunksync: no such blob")
	// ErrBadHash: a hash is not 64 hex digits.
	ErrBadHash = errors.New("chunksync: invalid hash")
)

// Hash is a blob's address: the SHA-256 of its bytes.
type Hash [sha256.Size]byte

// Sum returns the address of b.
func Sum(b []byte) Hash { return sha256.Sum256(b) }

func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// ParseHash parses the 64 hex digits String prints.
func ParseHash(s string) (Hash, error) {
	var h Hash
	if len(s) != 2*len(h) || strings.ToLower(s) != s {
		return h, fmt.Errorf("%w: %q", ErrBadHash, s)
	}
	if _, err := hex.Decode(h[:], []byte(s)); err != nil {
		return h, fmt.Errorf("%w: %q", ErrBadHash, s)
	}
	return h, nil
}

// Ref names a blob and says what it covers.
type Ref struct {
	Hash  Hash
	Keys  int // counters under it
	Bytes int // chunk bytes under it (for a chunk: its own size)
}

// Blob encodings. Each starts with a 4-byte magic naming its type and
// version.
const (
	magicChunk    = "CSC1" // sorted states
	magicRange    = "CSR1" // refs of a range's chunks
	magicManifest = "CSM1" // refs of the ranges
)

const flagDeleted = 1

// minStateLen is the shortest encoded state: prefix, suffix length, one id
// byte, kind, flags, version, updated, expires, data length.
const minStateLen = 9

// EncodeChunk appends the encoding of states, which must be sorted by id
// without duplicates, to dst. Ids are prefix-compressed against the
// previous one.
func EncodeChunk(dst []byte, states []engine.State) []byte {
	dst = append(dst, magicChunk...)
	dst = binary.AppendUvarint(dst, uint64(len(states)))
	prev := ""
	for i := range states {
		s := &states[i]
		p := commonPrefix(prev, s.ID)
		dst = binary.AppendUvarint(dst, uint64(p))
		dst = binary.AppendUvarint(dst, uint64(len(s.ID)-p))
		dst = append(dst, s.ID[p:]...)
		var flags byte
		if s.Deleted {
			flags |= flagDeleted
		}
		dst = append(dst, byte(s.Kind), flags)
		dst = binary.AppendUvarint(dst, s.Version)
		dst = binary.AppendVarint(dst, s.UpdatedAt)
		dst = binary.AppendVarint(dst, s.ExpiresAt)
		dst = binary.AppendUvarint(dst, uint64(len(s.Data)))
		dst = append(dst, s.Data...)
		prev = s.ID
	}
	return dst
}

func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// decoder reads varints off a blob, remembering the first error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
	}
}

func (d *decoder) uvarint(what string) uint64 { return next(d, what, binary.Uvarint) }
func (d *decoder) varint(what string) int64   { return next(d, what, binary.Varint) }

// next reads one varint with read (binary.Uvarint or binary.Varint).
func next[T uint64 | int64](d *decoder, what string, read func([]byte) (T, int)) T {
	if d.err != nil {
		return 0
	}
	v, n := read(d.b)
	if n <= 0 {
		d.fail("bad %s", what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes(n uint64, what string) []byte {
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail("%s: %d bytes, %d left", what, n, len(d.b))
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) magic(want string) {
	if len(d.b) < len(want) || string(d.b[:len(want)]) != want {
		d.fail("not a %s blob", want)
		return
	}
	d.b = d.b[len(want):]
}

// count reads an element count that must fit in what is left, each
// element taking at least minLen bytes.
func (d *decoder) count(minLen int) int {
	n := d.uvarint("count")
	if d.err == nil && n > uint64(len(d.b)/minLen) {
		d.fail("count %d exceeds the blob", n)
		return 0
	}
	return int(n)
}

func (d *decoder) end() {
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
}

// DecodeChunk decodes a chunk. Ids must be valid and strictly ascending;
// kinds and data are checked by engine.Merge. Data aliases b.
func DecodeChunk(b []byte) ([]engine.State, error) {
	d := decoder{b: b}
	d.magic(magicChunk)
	n := d.count(minStateLen)
	if d.err != nil {
		return nil, d.err
	}
	states := make([]engine.State, 0, n)
	prev := ""
	for i := 0; i < n && d.err == nil; i++ {
		p := d.uvarint("id prefix")
		suffix := d.bytes(d.uvarint("id length"), "id")
		if d.err != nil {
			break
		}
		if p > uint64(len(prev)) {
			d.fail("state %d: prefix %d longer than the previous id", i, p)
			break
		}
		id := prev[:p] + string(suffix)
		if err := contract.ValidateID(id); err != nil {
			d.fail("state %d: %v", i, err)
			break
		}
		if i > 0 && id <= prev {
			d.fail("state %d: id %q not after %q", i, id, prev)
			break
		}
		kf := d.bytes(2, "kind and flags")
		s := engine.State{ID: id}
		if d.err == nil {
			if kf[1]&^flagDeleted != 0 {
				d.fail("state %d: unknown flags %#x", i, kf[1])
			}
			s.Kind, s.Deleted = contract.Kind(kf[0]), kf[1]&flagDeleted != 0
		}
		s.Version = d.uvarint("version")
		s.UpdatedAt = d.varint("updated_at")
		s.ExpiresAt = d.varint("expires_at")
		s.Data = d.bytes(d.uvarint("data length"), "data")
		states = append(states, s)
		prev = id
	}
	d.end()
	if d.err != nil {
		return nil, d.err
	}
	return states, nil
}

// encodeRefs appends a list of refs under magic to dst.
func encodeRefs(dst []byte, magic string, refs []Ref) []byte {
	dst = append(dst, magic...)
	dst = binary.AppendUvarint(dst, uint64(len(refs)))
	for _, r := range refs {
		dst = append(dst, r.Hash[:]...)
		dst = binary.AppendUvarint(dst, uint64(r.Keys))
		dst = binary.AppendUvarint(dst, uint64(r.Bytes))
	}
	return dst
}

const maxCount = 1 << 40 // keys or bytes under one ref: far above any real state

func decodeRefs(b []byte, magic string) ([]Ref, error) {
	d := decoder{b: b}
	d.magic(magic)
	n := d.count(len(Hash{}) + 2)
	if d.err != nil {
		return nil, d.err
	}
	refs := make([]Ref, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		var r Ref
		copy(r.Hash[:], d.bytes(uint64(len(r.Hash)), "hash"))
		keys, size := d.uvarint("keys"), d.uvarint("bytes")
		if keys > maxCount || size > maxCount {
			d.fail("ref %d: implausible size", i)
		}
		r.Keys, r.Bytes = int(keys), int(size)
		refs = append(refs, r)
	}
	d.end()
	if d.err != nil {
		return nil, d.err
	}
	return refs, nil
}

// DecodeManifest decodes a manifest: the refs of its ranges.
func DecodeManifest(b []byte) ([]Ref, error) { return decodeRefs(b, magicManifest) }

// DecodeRange decodes a range: the refs of its chunks.
func DecodeRange(b []byte) ([]Ref, error) { return decodeRefs(b, magicRange) }
