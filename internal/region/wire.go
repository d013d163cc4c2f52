package region

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/counterd/counterd/internal/chunksync"
	"github.com/counterd/counterd/internal/engine"
)

// ErrCorrupt: a region message does not decode.
var ErrCorrupt = errors.New("region: corrupt message")

// Batch is one push of deltas from a region to a peer region: the current
// state of every counter the sender changed since the position the peer
// acknowledged last, up to Hi.
type Batch struct {
	From string // the sending region
	// Node is the sending node (--node-id): each node of a cluster region
	// ships the counters it owns, and the receiver keeps the as-of and
	// incarnation of every sending node apart.
	Node string
	// Incarnation names the sender's process run: a new one means the
	// sender lost its record of unshipped changes (a restart), so the
	// receiver runs a full hash-addressed sync of the sender's state.
	Incarnation uint64
	// AsOf (unix ns, the sender's clock): when Complete, every change the
	// sender made before AsOf is in this batch or an earlier one.
	AsOf     int64
	Complete bool
	// Tombs are deletions (Deleted states), applied before States: a
	// counter deleted and created again ships its tombstone and its new
	// state. Each list is sorted by id without duplicates.
	Tombs  []engine.State
	States []engine.State
}

const batchMagic = "RGB2"

// MaxNodeLen bounds Batch.Node.
const MaxNodeLen = 255

// EncodeBatch appends b's encoding to dst: magic, from, node, incarnation, as-of,
// flags, the tombstones' chunk (length-prefixed) and the states' chunk
// (chunksync.EncodeChunk, ids prefix-compressed).
func EncodeBatch(dst []byte, b *Batch) []byte {
	dst = append(dst, batchMagic...)
	dst = binary.AppendUvarint(dst, uint64(len(b.From)))
	dst = append(dst, b.From...)
	dst = binary.AppendUvarint(dst, uint64(len(b.Node)))
	dst = append(dst, b.Node...)
	dst = binary.AppendUvarint(dst, b.Incarnation)
	dst = binary.AppendVarint(dst, b.AsOf)
	var flags byte
	if b.Complete {
		flags = 1
	}
	dst = append(dst, flags)
	tombs := chunksync.EncodeChunk(nil, b.Tombs)
	dst = binary.AppendUvarint(dst, uint64(len(tombs)))
	dst = append(dst, tombs...)
	return chunksync.EncodeChunk(dst, b.States)
}

// DecodeBatch decodes what EncodeBatch wrote. The region name must be
// valid, both lists sorted by valid ids, and the tombstones Deleted; the
// states' kinds and data are checked by engine.Replace. Data aliases p.
func DecodeBatch(p []byte) (*Batch, error) {
	fail := func(format string, args ...any) (*Batch, error) {
		return nil, fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
	}
	if len(p) < len(batchMagic) || string(p[:len(batchMagic)]) != batchMagic {
		return fail("bad magic")
	}
	p = p[len(batchMagic):]
	n, k := binary.Uvarint(p)
	if k <= 0 || n > MaxNameLen || uint64(len(p)-k) < n {
		return fail("region name")
	}
	b := &Batch{From: string(p[k : k+int(n)])}
	p = p[k+int(n):]
	if err := ValidateName(b.From); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if n, k = binary.Uvarint(p); k <= 0 || n > MaxNodeLen || uint64(len(p)-k) < n {
		return fail("node name")
	}
	b.Node, p = string(p[k:k+int(n)]), p[k+int(n):]
	if b.Incarnation, k = binary.Uvarint(p); k <= 0 {
		return fail("incarnation")
	}
	p = p[k:]
	if b.AsOf, k = binary.Varint(p); k <= 0 {
		return fail("as-of")
	}
	p = p[k:]
	if len(p) < 1 || p[0] > 1 {
		return fail("flags")
	}
	b.Complete = p[0] == 1
	p = p[1:]
	if n, k = binary.Uvarint(p); k <= 0 || uint64(len(p)-k) < n {
		return fail("tombstones length")
	}
	var err error
	if b.Tombs, err = chunksync.DecodeChunk(p[k : k+int(n)]); err != nil {
		return nil, fmt.Errorf("%w: tombstones: %w", ErrCorrupt, err)
	}
	for _, s := range b.Tombs {
		if !s.Deleted {
			return fail("tombstone %q is not deleted", s.ID)
		}
	}
	if b.States, err = chunksync.DecodeChunk(p[k+int(n):]); err != nil {
		return nil, fmt.Errorf("%w: states: %w", ErrCorrupt, err)
	}
	return b, nil
}

// fetchRequest names a blob of a region's state: uvarint name length,
// name, then the 32-byte hash (none: the manifest).
func encodeFetch(name string, h *chunksync.Hash) []byte {
	b := binary.AppendUvarint(nil, uint64(len(name)))
	b = append(b, name...)
	if h != nil {
		b = append(b, h[:]...)
	}
	return b
}

func decodeFetch(p []byte) (name string, h *chunksync.Hash, err error) {
	n, k := binary.Uvarint(p)
	if k <= 0 || n > MaxNameLen || uint64(len(p)-k) < n {
		return "", nil, fmt.Errorf("%w: fetch: region name", ErrCorrupt)
	}
	name = string(p[k : k+int(n)])
	if err := ValidateName(name); err != nil {
		return "", nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	rest := p[k+int(n):]
	switch len(rest) {
	case 0:
		return name, nil, nil
	case len(chunksync.Hash{}):
		var hh chunksync.Hash
		copy(hh[:], rest)
		return name, &hh, nil
	}
	return "", nil, fmt.Errorf("%w: fetch: %d hash bytes", ErrCorrupt, len(rest))
}
