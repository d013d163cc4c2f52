package chunksync

import (
	"context"
	"fmt"
	"math/bits"
	"slices"
	"strings"

	"github.com/cespare/xxhash/v2"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
)

// Options says how states are cut. The zero value means the defaults.
type Options struct {
	// ChunkKeys is the average number of ids per chunk, a power of two
	// (default 128). Smaller chunks move less when changes are scattered
	// and make the manifest longer.
	ChunkKeys int
	// MaxChunkKeys caps a chunk (default 8 * ChunkKeys).
	MaxChunkKeys int
	// RangeChunks is the average number of chunks per range, a power of
	// two (default 64).
	RangeChunks int
}

func (o Options) withDefaults() Options {
	if o.ChunkKeys <= 0 {
		o.ChunkKeys = 128
	}
	if o.MaxChunkKeys <= 0 {
		o.MaxChunkKeys = 8 * o.ChunkKeys
	}
	if o.RangeChunks <= 0 {
		o.RangeChunks = 64
	}
	return o
}

// Validate reports an option that is not a power of two.
func (o Options) Validate() error {
	o = o.withDefaults()
	if bits.OnesCount(uint(o.ChunkKeys)) != 1 || bits.OnesCount(uint(o.RangeChunks)) != 1 {
		return fmt.Errorf("%w: ChunkKeys %d and RangeChunks %d must be powers of two", contract.ErrInvalidArgument, o.ChunkKeys, o.RangeChunks)
	}
	return nil
}

// Snapshot is a state cut into blobs. It is immutable once built and safe
// for concurrent use.
type Snapshot struct {
	Root   Hash  // the manifest's address
	Ranges []Ref // the manifest's entries
	Keys   int   // counters
	Chunks int   // chunk blobs
	// ChunkBytes is the size of all chunks: what a full copy moves.
	ChunkBytes int
	blobs      map[Hash][]byte
}

// Has reports whether h is one of the snapshot's blobs.
func (s *Snapshot) Has(h Hash) bool { _, ok := s.blobs[h]; return ok }

// Blob returns the blob addressed by h.
func (s *Snapshot) Blob(h Hash) ([]byte, bool) { b, ok := s.blobs[h]; return b, ok }

// ManifestBlob returns the manifest blob.
func (s *Snapshot) ManifestBlob() []byte { return s.blobs[s.Root] }

// SortStates sorts states by id, the order Build needs.
func SortStates(states []engine.State) {
	slices.SortFunc(states, func(a, b engine.State) int { return strings.Compare(a.ID, b.ID) })
}

// Build cuts states, sorted by id without duplicates, into a snapshot.
func Build(states []engine.State, o Options) (*Snapshot, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	chunkMask, rangeMask := uint64(o.ChunkKeys-1), uint64(o.RangeChunks-1)
	s := &Snapshot{blobs: make(map[Hash][]byte), Keys: len(states)}
	var chunks []Ref // of the open range
	var rangeKeys, rangeBytes int
	closeRange := func() {
		b := encodeRefs(nil, magicRange, chunks)
		h := Sum(b)
		s.blobs[h] = b
		s.Ranges = append(s.Ranges, Ref{Hash: h, Keys: rangeKeys, Bytes: rangeBytes})
		chunks, rangeKeys, rangeBytes = chunks[:0], 0, 0
	}
	start := 0
	for i := range states {
		if i > 0 && states[i].ID <= states[i-1].ID {
			return nil, fmt.Errorf("%w: states not sorted at %q", contract.ErrInvalidArgument, states[i].ID)
		}
		h := xxhash.Sum64String(states[i].ID)
		last := i == len(states)-1
		if h&chunkMask != 0 && i+1-start < o.MaxChunkKeys && !last {
			continue
		}
		b := EncodeChunk(nil, states[start:i+1])
		ch := Sum(b)
		s.blobs[ch] = b
		chunks = append(chunks, Ref{Hash: ch, Keys: i + 1 - start, Bytes: len(b)})
		rangeKeys += i + 1 - start
		rangeBytes += len(b)
		s.Chunks++
		s.ChunkBytes += len(b)
		start = i + 1
		if (h>>32)&rangeMask == 0 || last {
			closeRange()
		}
	}
	m := encodeRefs(nil, magicManifest, s.Ranges)
	s.Root = Sum(m)
	s.blobs[s.Root] = m
	return s, nil
}

// ExportSorted returns every live counter of e, sorted by id.
func ExportSorted(ctx context.Context, e *engine.Engine) ([]engine.State, error) {
	states := make([]engine.State, 0, e.Len())
	err := e.ExportAll(ctx, func(s engine.State) error {
		states = append(states, s)
		return nil
	})
	if err != nil {
		return nil, err
	}
	SortStates(states)
	return states, nil
}

// FromEngine exports e and cuts its state.
func FromEngine(ctx context.Context, e *engine.Engine, o Options) (*Snapshot, error) {
	states, err := ExportSorted(ctx, e)
	if err != nil {
		return nil, err
	}
	return Build(states, o)
}
