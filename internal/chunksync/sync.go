package chunksync

import (
	"context"
	"fmt"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
)

// Source serves a snapshot's blobs (a Snapshot in memory, a node over
// HTTP, a snapshot directory).
type Source interface {
	// Manifest returns the manifest blob.
	Manifest(ctx context.Context) ([]byte, error)
	// Fetch returns the blob addressed by h; an error wrapping ErrNotFound
	// when there is none.
	Fetch(ctx context.Context, h Hash) ([]byte, error)
}

// Target receives what Pull fetched.
type Target interface {
	// Has reports whether the target already holds the blob h (and, for a
	// range, every chunk under it).
	Has(h Hash) bool
	// PutChunk takes a fetched, verified chunk and its decoded states.
	PutChunk(ctx context.Context, h Hash, blob []byte, states []engine.State) error
	// PutRange takes a fetched range after all its chunks were put.
	PutRange(ctx context.Context, h Hash, blob []byte) error
}

// Stats count what a Pull compared and moved.
type Stats struct {
	Ranges, RangesFetched int // ranges in the manifest, ranges fetched
	Chunks, ChunksFetched int // chunks under the fetched ranges, chunks fetched
	Keys                  int // counters in the source
	FullBytes             int // chunk bytes of the whole source: a full copy
	BytesFetched          int // manifest, ranges and chunks fetched
	ChunkBytesFetched     int // of which chunks
}

// Progress, when not nil, is told of every range Pull settles: keys is the
// number of counters under it.
type Progress func(keys int)

// Pull fetches the manifest of src, then the ranges and chunks t lacks,
// verifying every blob against its address, and hands them to t. It
// stops at the first error; what was put stays put (every put is a valid,
// idempotent merge).
func Pull(ctx context.Context, src Source, t Target, progress Progress) (Stats, error) {
	var st Stats
	mb, err := src.Manifest(ctx)
	if err != nil {
		return st, fmt.Errorf("chunksync: manifest: %w", err)
	}
	st.BytesFetched += len(mb)
	ranges, err := DecodeManifest(mb)
	if err != nil {
		return st, err
	}
	st.Ranges = len(ranges)
	for _, r := range ranges {
		st.Keys += r.Keys
		st.FullBytes += r.Bytes
	}
	for _, r := range ranges {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		if !t.Has(r.Hash) {
			if err := pullRange(ctx, src, t, r.Hash, &st); err != nil {
				return st, err
			}
		}
		if progress != nil {
			progress(r.Keys)
		}
	}
	return st, nil
}

func pullRange(ctx context.Context, src Source, t Target, h Hash, st *Stats) error {
	rb, err := fetch(ctx, src, h, st)
	if err != nil {
		return err
	}
	st.RangesFetched++
	chunks, err := DecodeRange(rb)
	if err != nil {
		return fmt.Errorf("range %s: %w", h, err)
	}
	st.Chunks += len(chunks)
	for _, c := range chunks {
		if t.Has(c.Hash) {
			continue
		}
		cb, err := fetch(ctx, src, c.Hash, st)
		if err != nil {
			return err
		}
		st.ChunksFetched++
		st.ChunkBytesFetched += len(cb)
		states, err := DecodeChunk(cb)
		if err != nil {
			return fmt.Errorf("chunk %s: %w", c.Hash, err)
		}
		if err := t.PutChunk(ctx, c.Hash, cb, states); err != nil {
			return fmt.Errorf("chunk %s: %w", c.Hash, err)
		}
	}
	return t.PutRange(ctx, h, rb)
}

// fetch gets h from src and checks its address.
func fetch(ctx context.Context, src Source, h Hash, st *Stats) ([]byte, error) {
	b, err := src.Fetch(ctx, h)
	if err != nil {
		return nil, fmt.Errorf("chunksync: fetch %s: %w", h, err)
	}
	st.BytesFetched += len(b)
	if Sum(b) != h {
		return nil, fmt.Errorf("%w: blob fetched as %s has another hash", ErrCorrupt, h)
	}
	return b, nil
}

// Manifest and Fetch make a Snapshot a Source.
func (s *Snapshot) Manifest(context.Context) ([]byte, error) { return s.ManifestBlob(), nil }

// Fetch returns the blob h.
func (s *Snapshot) Fetch(_ context.Context, h Hash) ([]byte, error) {
	if b, ok := s.blobs[h]; ok {
		return b, nil
	}
	return nil, fmt.Errorf("%w: %s", ErrNotFound, h)
}

// EngineTarget merges pulled chunks into an engine. Have, when not nil,
// holds the blobs the engine's state already has (a snapshot of it cut with
// the source's Options): matching ranges and chunks are skipped.
type EngineTarget struct {
	Engine *engine.Engine
	Have   *Snapshot
	WO     contract.WriteOptions
	Merged int // states that changed local state
}

// Has reports whether Have holds h.
func (t *EngineTarget) Has(h Hash) bool { return t.Have != nil && t.Have.Has(h) }

// PutChunk merges the chunk's states (engine.Merge: CRDT join or higher
// version wins, see the package comment).
func (t *EngineTarget) PutChunk(ctx context.Context, _ Hash, _ []byte, states []engine.State) error {
	n, err := t.Engine.Merge(ctx, states, t.WO)
	t.Merged += n
	return err
}

// PutRange does nothing: the engine keeps no blobs.
func (t *EngineTarget) PutRange(context.Context, Hash, []byte) error { return nil }
