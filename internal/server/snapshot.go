package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/counterd/counterd/internal/api/httpapi"
	"github.com/counterd/counterd/internal/chunksync"
	"github.com/counterd/counterd/internal/engine"
)

// snapshotRoutes are the chunked snapshot routes of an embedded node
// (docs/operations.md, "Snapshots"); httpNeeds gives each admin
// permission on every namespace, since they read or write every counter.
var snapshotRoutes = []string{
	"GET /admin/snapshot/manifest",
	"GET /admin/snapshot/blobs/{hash}",
	"POST /admin/snapshot/chunks",
}

// maxChunkBody bounds a restored chunk: MaxChunkKeys dense HLLs fit.
const maxChunkBody = 64 << 20

// snapshotHandler serves an engine's state as content-addressed blobs
// (internal/chunksync) and merges restored chunks into it. Safe for
// concurrent use.
type snapshotHandler struct {
	eng  *engine.Engine
	opts chunksync.Options
	mux  *http.ServeMux

	mu   sync.Mutex          // guards last
	last *chunksync.Snapshot // the last manifest's blobs, served until the next
}

func newSnapshotHandler(eng *engine.Engine, opts chunksync.Options) *snapshotHandler {
	h := &snapshotHandler{eng: eng, opts: opts, mux: http.NewServeMux()}
	h.mux.HandleFunc(snapshotRoutes[0], h.manifest)
	h.mux.HandleFunc(snapshotRoutes[1], h.blob)
	h.mux.HandleFunc(snapshotRoutes[2], h.restore)
	return h
}

func (h *snapshotHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, pat := h.mux.Handler(r); pat == "" {
		httpapi.WriteError(w, fmt.Errorf("%w: no snapshot route %s %s", engine.ErrNotFound, r.Method, r.URL.Path))
		return
	}
	h.mux.ServeHTTP(w, r)
}

func (h *snapshotHandler) manifest(w http.ResponseWriter, r *http.Request) {
	// One cut at a time: each holds a copy of the whole state.
	h.mu.Lock()
	defer h.mu.Unlock()
	s, err := chunksync.FromEngine(r.Context(), h.eng, h.opts)
	if err != nil {
		httpapi.WriteError(w, err)
		return
	}
	h.last = s
	w.Header().Set("Counterd-Snapshot-Root", s.Root.String())
	writeBlob(w, s.ManifestBlob())
}

func (h *snapshotHandler) blob(w http.ResponseWriter, r *http.Request) {
	hash, err := chunksync.ParseHash(r.PathValue("hash"))
	if err != nil {
		httpapi.WriteError(w, fmt.Errorf("%w: %w", engine.ErrInvalidArgument, err))
		return
	}
	h.mu.Lock()
	s := h.last
	h.mu.Unlock()
	var b []byte
	ok := false
	if s != nil {
		b, ok = s.Blob(hash)
	}
	if !ok {
		httpapi.WriteError(w, fmt.Errorf("%w: blob %s is not in the last snapshot manifest", engine.ErrNotFound, hash))
		return
	}
	writeBlob(w, b)
}

func writeBlob(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = w.Write(b)
}

func (h *snapshotHandler) restore(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxChunkBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			err = fmt.Errorf("%w: chunk larger than %d bytes", engine.ErrInvalidArgument, maxChunkBody)
		}
		httpapi.WriteError(w, err)
		return
	}
	states, err := chunksync.DecodeChunk(b)
	if err != nil {
		httpapi.WriteError(w, fmt.Errorf("%w: %w", engine.ErrInvalidArgument, err))
		return
	}
	changed, err := h.eng.Merge(r.Context(), states, engine.WriteOptions{Durability: engine.Sync})
	if err != nil {
		httpapi.WriteError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]int{"states": len(states), "changed": changed})
}
