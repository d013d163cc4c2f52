package server

import (
	"net/http"
	"path"
	"strings"
)

// router is the HTTP front end's top-level routing: a ServeMux on which
// each front end mounts its own routes (node.routes, mode.register), with
// the counters API on "/" for every other path. A path ServeMux would
// redirect to its clean form ("//", "." or ".." segments) goes to the API
// directly, which answers it as a path it has no route for (JSON 404, or
// 400 invalid_id for an empty counter id) rather than with a redirect.
// Safe for concurrent use once built.
type router struct {
	mux *http.ServeMux
	api http.Handler
}

func (rt *router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p := r.URL.EscapedPath(); r.Method != http.MethodConnect && cleanPath(p) != p {
		rt.api.ServeHTTP(w, r)
		return
	}
	rt.mux.ServeHTTP(w, r)
}

// cleanPath is p as ServeMux routes it (net/http's cleanPath): rooted,
// without "." or ".." or empty segments, keeping a trailing slash.
func cleanPath(p string) string {
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if strings.HasSuffix(p, "/") && np != "/" {
		np += "/"
	}
	return np
}

// mountPaths mounts h at the path of each of routes ("METHOD pattern")
// for every method: h answers a method it does not serve (its 404 or 405)
// itself.
func mountPaths(mux *http.ServeMux, h http.Handler, routes []string) {
	seen := map[string]bool{}
	for _, rt := range routes {
		p := rt[strings.IndexByte(rt, ' ')+1:] // the whole of rt without a method
		if !seen[p] {
			seen[p] = true
			mux.Handle(p, h)
		}
	}
}
