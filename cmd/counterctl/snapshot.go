package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/counterd/counterd/client"
	"github.com/counterd/counterd/internal/chunksync"
	"github.com/counterd/counterd/internal/engine"
)

// counterctl snapshot DIR: pull the node's chunks that DIR lacks.
func setupSnapshot(fs *flag.FlagSet) runFunc {
	noProgress := fs.Bool("no-progress", false, "no progress bar on stderr")
	return func(ctx context.Context, e *env, args []string) error {
		src := &nodeSource{c: e.c}
		mb, err := src.Manifest(ctx)
		if err != nil {
			return err
		}
		ranges, err := chunksync.DecodeManifest(mb)
		if err != nil {
			return err
		}
		dir := &chunksync.Dir{Path: args[0]}
		bar := progress(e, *noProgress, "snapshot", ranges)
		st, err := chunksync.Pull(ctx, src, dir, bar.add)
		bar.finish()
		if err != nil {
			return err
		}
		root, err := dir.Commit(mb, time.Now())
		if err != nil {
			return err
		}
		out := snapshotReport{
			Root: root.String(), Counters: st.Keys,
			ChunksNew: st.ChunksFetched, ChunksCompared: st.Chunks,
			RangesNew: st.RangesFetched, RangesReused: st.Ranges - st.RangesFetched,
			BytesWritten: dir.BytesWritten, FullBytes: st.FullBytes,
		}
		if e.json {
			return printJSON(e.stdout, out)
		}
		fmt.Fprintf(e.stdout, "snapshot %s: %d counters\n", out.Root, out.Counters)
		fmt.Fprintf(e.stdout, "chunks: %d new, %d reused in changed ranges; ranges: %d new, %d reused\n",
			out.ChunksNew, out.ChunksCompared-out.ChunksNew, out.RangesNew, out.RangesReused)
		fmt.Fprintf(e.stdout, "wrote %d bytes; the full state is %d bytes of chunks\n", out.BytesWritten, out.FullBytes)
		return nil
	}
}

type snapshotReport struct {
	Root           string `json:"root"` // the manifest's hash, also in DIR/LATEST
	Counters       int    `json:"counters"`
	ChunksNew      int    `json:"chunks_new"`
	ChunksCompared int    `json:"chunks_compared"` // chunks under the new ranges
	RangesNew      int    `json:"ranges_new"`
	RangesReused   int    `json:"ranges_reused"`
	BytesWritten   int    `json:"bytes_written"` // blobs written, manifest included
	FullBytes      int    `json:"full_bytes"`    // all chunks: what a full copy writes
}

// counterctl restore DIR: merge DIR's latest snapshot into the node.
func setupRestore(fs *flag.FlagSet) runFunc {
	noProgress := fs.Bool("no-progress", false, "no progress bar on stderr")
	return func(ctx context.Context, e *env, args []string) error {
		dir := &chunksync.Dir{Path: args[0]}
		mb, err := dir.Manifest(ctx)
		if err != nil {
			return err
		}
		ranges, err := chunksync.DecodeManifest(mb)
		if err != nil {
			return err
		}
		target := &nodeTarget{c: e.c}
		bar := progress(e, *noProgress, "restore", ranges)
		st, err := chunksync.Pull(ctx, dir, target, bar.add)
		bar.finish()
		if err != nil {
			return err
		}
		out := restoreReport{Counters: st.Keys, Chunks: st.ChunksFetched, Changed: target.changed}
		if e.json {
			return printJSON(e.stdout, out)
		}
		fmt.Fprintf(e.stdout, "restored %d counters from %d chunks; %d changed the node\n", out.Counters, out.Chunks, out.Changed)
		return nil
	}
}

type restoreReport struct {
	Counters int `json:"counters"`
	Chunks   int `json:"chunks"`
	Changed  int `json:"changed"` // counters whose state on the node changed
}

// nodeSource is a node's snapshot routes as a chunksync.Source.
type nodeSource struct {
	c        *client.Client
	manifest []byte // fetched once: each fetch cuts the state anew
}

func (s *nodeSource) Manifest(ctx context.Context) ([]byte, error) {
	if s.manifest == nil {
		b, err := s.c.SnapshotManifest(ctx)
		if err != nil {
			return nil, err
		}
		s.manifest = b
	}
	return s.manifest, nil
}

func (s *nodeSource) Fetch(ctx context.Context, h chunksync.Hash) ([]byte, error) {
	return s.c.SnapshotBlob(ctx, h.String())
}

// nodeTarget merges chunks into a node; it holds nothing beforehand.
type nodeTarget struct {
	c       *client.Client
	changed int
}

func (t *nodeTarget) Has(chunksync.Hash) bool { return false }

func (t *nodeTarget) PutChunk(ctx context.Context, _ chunksync.Hash, b []byte, _ []engine.State) error {
	res, err := t.c.RestoreChunk(ctx, b)
	t.changed += res.Changed
	return err
}

func (t *nodeTarget) PutRange(context.Context, chunksync.Hash, []byte) error { return nil }

// bar is a progress bar over the counters of a manifest's ranges; its
// zero value (no terminal, --no-progress) does nothing.
type bar struct{ pb *progressbar.ProgressBar }

func progress(e *env, off bool, what string, ranges []chunksync.Ref) bar {
	if off || e.stderrFile == nil || !term.IsTerminal(int(e.stderrFile.Fd())) {
		return bar{}
	}
	total := 0
	for _, r := range ranges {
		total += r.Keys
	}
	return bar{progressbar.NewOptions64(int64(total),
		progressbar.OptionSetWriter(e.stderr),
		progressbar.OptionSetDescription(what+" (counters)"),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionShowCount(),
		progressbar.OptionSetWidth(30),
	)}
}

func (b bar) add(keys int) {
	if b.pb != nil {
		_ = b.pb.Add(keys)
	}
}

func (b bar) finish() {
	if b.pb != nil {
		_ = b.pb.Finish()
	}
}
