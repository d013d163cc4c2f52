package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/counterd/counterd/internal/api/httpapi"
	"github.com/counterd/counterd/internal/auth"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/ratelimit"
)

var (
	read     = auth.Need{Perm: auth.Read}
	write    = auth.Need{Perm: auth.Write}
	admin    = auth.Need{Perm: auth.Admin}
	adminAll = auth.Need{Perm: auth.Admin, All: true}
	public   = auth.Need{Perm: auth.Public}
)

// httpNeeds maps every HTTP route ("METHOD pattern", as ServeMux reads it)
// to the one permission it requires; TestHTTPNeedsCoverRoutes checks that
// every route of the API is here. The ids a request touches are checked
// against that permission by guardedBackend (deletes need admin on the id
// whatever the route, so a batch cannot delete with write).
var httpNeeds = map[string]auth.Need{
	"POST /counters/{id}/increment":        write,
	"POST /counters/{id}/decrement":        write,
	"GET /counters/{id}":                   read,
	"PUT /counters/{id}":                   write,
	"DELETE /counters/{id}":                admin,
	"PUT /counters/{id}/ttl":               write,
	"DELETE /counters/{id}/ttl":            write,
	"GET /counters/{id}/ttl":               read,
	"POST /counters/{id}/pfadd":            write,
	"GET /counters/{id}/pfcount":           read,
	"POST /pfcount":                        read,
	"POST /counters/{id}/pfmerge":          write,
	"POST /counters/{id}/hincr":            write,
	"GET /counters/{id}/fields":            read,
	"GET /counters/{id}/fields/{field}":    read,
	"DELETE /counters/{id}/fields/{field}": write,
	"GET /counters/{id}/window":            read,
	"GET /counters/{id}/series":            read,
	"GET /counters/{id}/uniques":           read,
	"GET /counters/{id}/aggregate":         read,
	"GET /counters":                        read,
	"POST /batch":                          write,
	"GET /rollups":                         read,
	"GET /rollups/{key}":                   read,
	"PUT /rollups/{key}":                   admin,
	"DELETE /rollups/{key}":                admin,
	"GET /healthz":                         public, // load-balancer probes carry no token
	"GET /readyz":                          public,
	"GET /metrics":                         read, // node-wide figures, no counter values
	"GET /openapi.json":                    public,

	"POST /ratelimit/check":             write, // each key checked by guardedChecker
	"GET /ratelimit/policies":           read,
	"PUT /ratelimit/policies":           adminAll, // policies apply to every key
	"GET /ratelimit/policies/{name}":    read,
	"PUT /ratelimit/policies/{name}":    adminAll,
	"DELETE /ratelimit/policies/{name}": adminAll,

	"GET /cluster":         read, // cluster mode: ring and node health
	"GET /cluster/{$}":     read,
	"GET /cluster/metrics": read,
	"GET /debug/pprof/":    adminAll, // --pprof
}

// unmatchedNeed is required of a request no route matches: it gets the
// API's own 404 or 405, but only once authenticated.
var unmatchedNeed = read

// authMiddleware authenticates every request by its bearer token and
// checks its route's permission, then passes the principal on in the
// request context. Safe for concurrent use.
type authMiddleware struct {
	store  *auth.Store
	routes *http.ServeMux // httpNeeds' patterns, used only to match
	next   http.Handler
}

// withAuth returns next behind authentication, or next itself when store
// is nil (no --auth).
func withAuth(store *auth.Store, next http.Handler) http.Handler {
	if store == nil {
		return next
	}
	m := &authMiddleware{store: store, routes: http.NewServeMux(), next: next}
	for pat := range httpNeeds {
		m.routes.Handle(pat, next)
	}
	return m
}

func (m *authMiddleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	need, ok := httpNeeds[m.pattern(r)]
	if !ok {
		need = unmatchedNeed
	}
	if need.Perm == auth.Public {
		m.next.ServeHTTP(w, r)
		return
	}
	tok := auth.BearerToken(r.Header.Get("Authorization"))
	p, err := m.store.Authenticate("", []byte(tok))
	if err != nil {
		httpapi.WriteError(w, err)
		return
	}
	if !p.Allows(need) {
		httpapi.WriteError(w, fmt.Errorf("%w: user %q has no %s permission for %s %s", auth.ErrForbidden, p.User, need, r.Method, r.URL.Path))
		return
	}
	m.next.ServeHTTP(w, r.WithContext(auth.NewContext(r.Context(), p, tok)))
}

// pattern is the httpNeeds key r matches, "" for none.
func (m *authMiddleware) pattern(r *http.Request) string {
	_, pat := m.routes.Handler(r)
	return pat
}

// guard returns be behind per-id permission checks, or be itself without
// --auth.
func guard(store *auth.Store, be engine.Backend) engine.Backend {
	if store == nil {
		return be
	}
	return guardedBackend{be}
}

// hitsAuthorizer is the rate-limit front ends' key check; nil without
// --auth.
func hitsAuthorizer(store *auth.Store) func(context.Context, []ratelimit.Hit) error {
	if store == nil {
		return nil
	}
	return authorizeHits
}

// openAuth loads --auth (nil store without it) and reloads it on SIGHUP
// until stop is called. A reload that fails is logged and leaves the
// previous tokens in force.
func openAuth(cfg Config, log *slog.Logger) (store *auth.Store, stop func(), err error) {
	if cfg.Auth == "" {
		log.Info("authentication off: --auth not set (loopback only unless --insecure)")
		return nil, func() {}, nil
	}
	store, err = auth.Open(cfg.Auth)
	if err != nil {
		return nil, nil, fmt.Errorf("server: --auth: %w", err)
	}
	log.Info("authentication on", "tokens_file", cfg.Auth, "users", len(store.Table().Users()))
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if err := store.Reload(); err != nil {
					log.Error("tokens file reload failed; previous tokens stay in force", "err", err)
					continue
				}
				log.Info("tokens file reloaded", "tokens_file", cfg.Auth, "users", len(store.Table().Users()), "generation", store.Gen())
			}
		}
	}()
	return store, func() { signal.Stop(hup); cancel(); <-done }, nil
}
