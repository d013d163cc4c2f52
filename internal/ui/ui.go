// Package ui is counterd's web console (docs/console.md): static files
// embedded in the binary and served at /ui/. The console is plain ES
// modules and a hand-written SVG chart, with no build step and nothing
// loaded from anywhere but the server itself; it reads the same HTTP API
// as every other client, with the token the user types into its login
// form when the server runs with --auth.
package ui

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/counterd/counterd/internal/httpjson"
)

// The console's files (static/, the source) are embedded gzip-compressed,
// one gz/<path>.gz per file, written by go generate: 68 KB of JS, CSS,
// HTML and SVG is 25 KB in the release binary. Handler decompresses them
// once; they are served as before, uncompressed. TestEmbeddedFilesCurrent
// fails when gz/ and static/ differ.
//
//go:generate sh gzip-static.sh
//go:embed gz
var static embed.FS

// files returns the console's files, decompressed, by path under static/.
func files() (map[string][]byte, error) {
	out := map[string][]byte{}
	err := fs.WalkDir(static, "gz", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		name, ok := strings.CutSuffix(strings.TrimPrefix(p, "gz/"), ".gz")
		if !ok {
			return fmt.Errorf("%s: not a .gz file", p)
		}
		b, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		r, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if out[name], err = io.ReadAll(r); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		return nil
	})
	return out, err
}

// Prefix is where the console is served.
const Prefix = "/ui/"

// Routes are the routes the console serves, as "METHOD pattern" (the
// access-control table must name each; all are public: the files hold no
// data, and the login form must load before there is a token).
func Routes() []string {
	return []string{"GET /{$}", "GET /ui", "GET /ui/", "GET /ui/config.json"}
}

// Serves reports whether r is the console's: GET or HEAD of / (a
// redirect to /ui/), and anything under /ui.
func Serves(r *http.Request) bool {
	p := r.URL.Path
	if p == "/" {
		return r.Method == http.MethodGet || r.Method == http.MethodHead
	}
	return p == "/ui" || strings.HasPrefix(p, Prefix)
}

// csp allows the console's own files and API only: no inline script or
// style, no other origin, no framing.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'none'; frame-ancestors 'none'; base-uri 'none'"

type file struct {
	body  []byte
	ctype string
	etag  string
}

type handler struct{ files map[string]file }

// Options configure Handler.
type Options struct {
	// Auth tells the console that the server runs with --auth, so it
	// asks for a token before its first API request.
	Auth bool
	// Version is shown in the console's footer.
	Version string
}

// configJSON is /ui/config.json, what the console learns before any API
// request (it holds nothing secret: the route is public).
type configJSON struct {
	Auth    bool   `json:"auth"`
	Version string `json:"version"`
}

// Handler serves the console; mount it for the requests Serves accepts.
// Files are served with an ETag (browsers revalidate them, so an upgraded
// server serves its own console) and a strict Content-Security-Policy.
func Handler(opts Options) http.Handler {
	h := &handler{files: map[string]file{}}
	cfg, _ := json.Marshal(configJSON{Auth: opts.Auth, Version: opts.Version}) // cannot fail
	h.files["config.json"] = file{body: cfg, ctype: "application/json", etag: etag(cfg)}
	embedded, err := files()
	if err != nil {
		panic("ui: embedded files: " + err.Error()) // the embed is part of the binary
	}
	for p, b := range embedded {
		ct := mime.TypeByExtension(path.Ext(p))
		switch path.Ext(p) { // not left to the system's mime table
		case ".js":
			ct = "text/javascript; charset=utf-8"
		case ".css":
			ct = "text/css; charset=utf-8"
		case ".html":
			ct = "text/html; charset=utf-8"
		case ".svg":
			ct = "image/svg+xml"
		}
		h.files[p] = file{body: b, ctype: ct, etag: etag(b)}
	}
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		httpjson.WriteError(w, fmt.Errorf("%w: the console is read with GET", httpjson.ErrMethodNotAllowed))
		return
	}
	name, ok := strings.CutPrefix(r.URL.Path, Prefix)
	if !ok { // "/" and "/ui"
		http.Redirect(w, r, Prefix, http.StatusFound)
		return
	}
	if name == "" {
		name = "index.html"
	}
	f, ok := h.files[name]
	if !ok {
		httpjson.WriteError(w, fmt.Errorf("%w: no console file %s", httpjson.ErrRouteNotFound, path.Clean("/"+name)))
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", f.ctype)
	hd.Set("ETag", f.etag)
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Content-Security-Policy", csp)
	hd.Set("X-Frame-Options", "DENY")
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(f.body))
}

func etag(b []byte) string {
	sum := sha256.Sum256(b)
	return `"` + hex.EncodeToString(sum[:8]) + `"`
}
