package chunksync

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/counterd/counterd/internal/engine"
)

// Dir is a snapshot directory: content-addressed blobs under
// blobs/XX/HASH, one file per snapshot under snapshots/ holding its
// manifest's hash, and LATEST naming the newest. A blob is written to a
// temporary file and renamed into place, chunks before their range and
// ranges before the manifest, so a blob that exists is complete and so is
// everything under it: a second snapshot writes only what changed, and an
// interrupted one leaves nothing a later one would trust wrongly.
//
// Dir is a Target (for snapshots) and a Source of its latest snapshot
// (for restores). Not safe for concurrent writers.
type Dir struct {
	Path string

	Written      int // blobs written by this Dir value
	BytesWritten int
}

func (d *Dir) blobPath(h Hash) string {
	s := h.String()
	return filepath.Join(d.Path, "blobs", s[:2], s)
}

// Has reports whether the blob h is stored.
func (d *Dir) Has(h Hash) bool {
	_, err := os.Stat(d.blobPath(h))
	return err == nil
}

// PutChunk stores a chunk.
func (d *Dir) PutChunk(_ context.Context, h Hash, b []byte, _ []engine.State) error {
	return d.put(h, b)
}

// PutRange stores a range.
func (d *Dir) PutRange(_ context.Context, h Hash, b []byte) error { return d.put(h, b) }

func (d *Dir) put(h Hash, b []byte) error {
	p := d.blobPath(h)
	if err := writeFileAtomic(p, b); err != nil {
		return err
	}
	d.Written++
	d.BytesWritten += len(b)
	return nil
}

// writeFileAtomic writes b to p through a synced temporary file.
func writeFileAtomic(p string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), p)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("chunksync: write %s: %w", p, err)
	}
	return nil
}

// Commit stores the manifest blob (whose ranges must be stored) as a new
// snapshot taken at t and makes it the latest.
func (d *Dir) Commit(manifest []byte, t time.Time) (Hash, error) {
	if _, err := DecodeManifest(manifest); err != nil {
		return Hash{}, err
	}
	h := Sum(manifest)
	if err := d.put(h, manifest); err != nil {
		return h, err
	}
	line := []byte(h.String() + "\n")
	name := t.UTC().Format("20060102T150405.000000000Z")
	if err := writeFileAtomic(filepath.Join(d.Path, "snapshots", name), line); err != nil {
		return h, err
	}
	return h, writeFileAtomic(filepath.Join(d.Path, "LATEST"), line)
}

// Latest returns the hash of the latest snapshot's manifest.
func (d *Dir) Latest() (Hash, error) {
	b, err := os.ReadFile(filepath.Join(d.Path, "LATEST"))
	if errors.Is(err, fs.ErrNotExist) {
		return Hash{}, fmt.Errorf("%w: %s holds no snapshot (no LATEST)", ErrNotFound, d.Path)
	}
	if err != nil {
		return Hash{}, err
	}
	return ParseHash(strings.TrimSpace(string(b)))
}

// Manifest returns the latest snapshot's manifest, checked against its
// hash.
func (d *Dir) Manifest(ctx context.Context) ([]byte, error) {
	h, err := d.Latest()
	if err != nil {
		return nil, err
	}
	b, err := d.Fetch(ctx, h)
	if err == nil && Sum(b) != h {
		err = fmt.Errorf("%w: manifest %s has another hash", ErrCorrupt, h)
	}
	return b, err
}

// Fetch reads the blob h.
func (d *Dir) Fetch(_ context.Context, h Hash) ([]byte, error) {
	b, err := os.ReadFile(d.blobPath(h))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s in %s", ErrNotFound, h, d.Path)
	}
	return b, err
}
