package chunksync

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/httpjson"
)

// Routes are the routes Handler serves ("METHOD pattern"). They read or
// write every counter: the server requires admin permission on every
// namespace for them (docs/operations.md, "Snapshots").
var Routes = []string{
	"GET /admin/snapshot/manifest",
	"GET /admin/snapshot/blobs/{hash}",
	"POST /admin/snapshot/chunks",
}

// MaxChunkBody bounds a restored chunk (POST /admin/snapshot/chunks):
// MaxChunkKeys dense HLLs fit.
const MaxChunkBody = 64 << 20

// Handler serves an engine's state as content-addressed blobs and merges
// restored chunks into it:
//
//	GET  /admin/snapshot/manifest      cut the state; answer the manifest blob
//	GET  /admin/snapshot/blobs/{hash}  a range or chunk of the last two manifests
//	POST /admin/snapshot/chunks        merge a chunk blob (durable before the answer)
//
// Errors are the HTTP API's typed JSON errors. Safe for concurrent use.
type Handler struct {
	eng  *engine.Engine
	opts Options
	mux  *http.ServeMux

	cut sync.Mutex // one cut at a time: each copies the whole state

	mu sync.Mutex // guards cuts
	// cuts are the last two manifests' blobs: a snapshot in progress
	// keeps working when another client asks for a newer manifest.
	cuts [2]*Snapshot
}

// NewHandler returns the snapshot routes of eng, cut with opts.
func NewHandler(eng *engine.Engine, opts Options) *Handler {
	h := &Handler{eng: eng, opts: opts, mux: http.NewServeMux()}
	h.mux.HandleFunc(Routes[0], h.manifest)
	h.mux.HandleFunc(Routes[1], h.blob)
	h.mux.HandleFunc(Routes[2], h.restore)
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, pat := h.mux.Handler(r); pat == "" {
		httpjson.WriteError(w, fmt.Errorf("%w: no snapshot route %s %s", contract.ErrNotFound, r.Method, r.URL.Path))
		return
	}
	h.mux.ServeHTTP(w, r)
}

func (h *Handler) manifest(w http.ResponseWriter, r *http.Request) {
	h.cut.Lock()
	defer h.cut.Unlock()
	s, err := FromEngine(r.Context(), h.eng, h.opts)
	if err != nil {
		httpjson.WriteError(w, err)
		return
	}
	h.mu.Lock()
	h.cuts = [2]*Snapshot{s, h.cuts[0]}
	h.mu.Unlock()
	w.Header().Set("Counterd-Snapshot-Root", s.Root.String())
	writeBlob(w, s.ManifestBlob())
}

func (h *Handler) blob(w http.ResponseWriter, r *http.Request) {
	hash, err := ParseHash(r.PathValue("hash"))
	if err != nil {
		httpjson.WriteError(w, fmt.Errorf("%w: %w", contract.ErrInvalidArgument, err))
		return
	}
	h.mu.Lock()
	cuts := h.cuts
	h.mu.Unlock()
	for _, s := range cuts {
		if s == nil {
			continue
		}
		if b, ok := s.Blob(hash); ok {
			writeBlob(w, b)
			return
		}
	}
	httpjson.WriteError(w, fmt.Errorf("%w: blob %s is not in the last two snapshot manifests", contract.ErrNotFound, hash))
}

func writeBlob(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = w.Write(b)
}

func (h *Handler) restore(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxChunkBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			err = fmt.Errorf("%w: chunk larger than %d bytes", contract.ErrInvalidArgument, MaxChunkBody)
		}
		httpjson.WriteError(w, err)
		return
	}
	states, err := DecodeChunk(b)
	if err != nil {
		httpjson.WriteError(w, fmt.Errorf("%w: %w", contract.ErrInvalidArgument, err))
		return
	}
	changed, err := h.eng.Merge(r.Context(), states, contract.WriteOptions{Durability: contract.Sync})
	if err != nil {
		httpjson.WriteError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]int{"states": len(states), "changed": changed})
}
