package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/counterd/counterd/internal/api/httpapi"
	"github.com/counterd/counterd/internal/auth"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/ratelimit"
)

var (
	needRead     = auth.Need{Perm: auth.Read}
	needWrite    = auth.Need{Perm: auth.Write}
	needAdmin    = auth.Need{Perm: auth.Admin}
	needAdminAll = auth.Need{Perm: auth.Admin, All: true}
	needReadAll  = auth.Need{Perm: auth.Read, All: true}
	needPublic   = auth.Need{Perm: auth.Public}
)

// httpNeeds maps every HTTP route ("METHOD pattern", as ServeMux reads it)
// to the one permission it requires; TestHTTPNeedsCoverRoutes checks that
// every route of the API is here. The ids a request touches are checked
// against that permission by guardedBackend (deletes need admin on the id
// whatever the route, so a batch cannot delete with write).
var httpNeeds = map[string]auth.Need{
	"POST /counters/{id}/increment":        needWrite,
	"POST /counters/{id}/decrement":        needWrite,
	"GET /counters/{id}":                   needRead,
	"PUT /counters/{id}":                   needWrite,
	"DELETE /counters/{id}":                needAdmin,
	"PUT /counters/{id}/ttl":               needWrite,
	"DELETE /counters/{id}/ttl":            needWrite,
	"GET /counters/{id}/ttl":               needRead,
	"POST /counters/{id}/pfadd":            needWrite,
	"GET /counters/{id}/pfcount":           needRead,
	"POST /pfcount":                        needRead,
	"POST /counters/{id}/pfmerge":          needWrite,
	"POST /counters/{id}/hincr":            needWrite,
	"GET /counters/{id}/fields":            needRead,
	"GET /counters/{id}/fields/{field}":    needRead,
	"DELETE /counters/{id}/fields/{field}": needWrite,
	"GET /counters/{id}/window":            needRead,
	"GET /counters/{id}/series":            needRead,
	"GET /counters/{id}/uniques":           needRead,
	"GET /counters/{id}/aggregate":         needRead,
	"GET /counters":                        needRead,
	"POST /batch":                          needWrite,
	"GET /rollups":                         needRead,
	"GET /rollups/{key}":                   needRead,
	"PUT /rollups/{key}":                   needAdmin,
	"DELETE /rollups/{key}":                needAdmin,
	"GET /healthz":                         needPublic, // load-balancer probes carry no token
	"GET /readyz":                          needPublic,
	"GET /metrics":                         needReadAll, // node-wide figures of every namespace (a tenant's token is refused)
	"GET /openapi.json":                    needPublic,
	"GET /capabilities":                    needRead, // the mode and its limits
	"GET /whoami":                          needRead, // the caller's own user and grants

	"GET /quotas": needReadAll, // quota patterns and the usage of every namespace

	"POST /ratelimit/check":             needWrite, // each key checked by guardedChecker
	"GET /ratelimit/policies":           needRead,
	"PUT /ratelimit/policies":           needAdminAll, // policies apply to every key
	"GET /ratelimit/policies/{name}":    needRead,
	"PUT /ratelimit/policies/{name}":    needAdminAll,
	"DELETE /ratelimit/policies/{name}": needAdminAll,
	"GET /ratelimit/decisions":          needReadAll, // recent keys of every namespace

	"GET /{$}":            needPublic, // redirects to the console
	"GET /ui":             needPublic, // the console's static files: its login form asks for the token
	"GET /ui/":            needPublic,
	"GET /ui/config.json": needPublic, // whether --auth is on, the version

	"POST /events":       {Perm: auth.Write, All: true}, // the rules may write any counter
	"GET /events/dead":   needReadAll,                   // embedded mode: dead events of any namespace
	"GET /events/status": needRead,                      // consuming, watermark, refusal counts

	"GET /cluster":         needRead, // cluster mode: ring and node health
	"GET /cluster/{$}":     needRead,
	"GET /cluster/metrics": needRead,
	"POST /cluster/forget": needAdminAll, // retires a member of the whole cluster

	"GET /regions": needRead, // this region and its configured peers

	// The command box: authenticated here, then each command and its
	// keys are checked against the user's grants by the RESP dispatcher,
	// as on a RESP connection.
	"POST /resp": needRead,

	"GET /node/stats": needRead, // the node's own rates, latency and lags of the last hour (the console's node page)

	// embedded mode: chunked snapshots read and write every counter
	"GET /admin/snapshot/manifest":     needAdminAll,
	"GET /admin/snapshot/blobs/{hash}": needAdminAll,
	"POST /admin/snapshot/chunks":      needAdminAll,
}

// unmatchedNeed is required of a request no route matches: it gets the
// API's own 404 or 405, but only once authenticated.
var unmatchedNeed = needRead

// outsidePrefixes are the paths Run serves beside the counters API
// (rate limits, cluster status, the console, events, snapshots, regions):
// the middleware matches their routes itself. Counter routes are checked by
// httpapi's Authorize hook, which reuses the API's own route match (one
// match per request).
var outsidePrefixes = []string{"/ratelimit/", "/cluster", "/ui", "/events", "/admin/", "/regions", "/resp", "/node/"}

// authMiddleware authenticates every request by its bearer token, checks
// the route's permission (or leaves that to the API's Authorize hook),
// and passes the principal on in the request context. Safe for
// concurrent use.
type authMiddleware struct {
	store  *auth.Store
	routes *http.ServeMux // httpNeeds' patterns, used only to match
	public map[string]bool
	next   http.Handler
}

// withAuth returns next behind authentication, or next itself when store
// is nil (no --auth).
func withAuth(store *auth.Store, next http.Handler) http.Handler {
	if store == nil {
		return next
	}
	m := &authMiddleware{store: store, routes: http.NewServeMux(), public: map[string]bool{}, next: next}
	for pat, need := range httpNeeds {
		m.routes.Handle(pat, next)
		if need.Perm == auth.Public {
			_, path, _ := strings.Cut(pat, " ")
			m.public[strings.TrimSuffix(path, "{$}")] = true
		}
	}
	return m
}

func (m *authMiddleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	outside := false
	for _, p := range outsidePrefixes {
		if strings.HasPrefix(r.URL.Path, p) {
			outside = true
			break
		}
	}
	// Inside the API only authentication happens here; the hook checks
	// the route's own permission after the API's route match.
	need := unmatchedNeed
	if outside {
		var ok bool
		if need, ok = httpNeeds[m.pattern(r)]; !ok {
			need = unmatchedNeed
		}
	} else if m.public[r.URL.Path] {
		need = needPublic // the API's hook checks the method's entry
	}
	if need.Perm == auth.Public {
		m.next.ServeHTTP(w, r)
		return
	}
	tok := auth.BearerToken(r.Header.Get("Authorization"))
	p, err := m.store.Authenticate("", []byte(tok))
	if err != nil {
		m.store.Failed("http", auth.ReasonOf(err))
		httpapi.WriteError(w, err)
		return
	}
	if outside && !p.Allows(need) {
		m.store.Failed("http", auth.ReasonForbidden)
		httpapi.WriteError(w, fmt.Errorf("%w: user %q has no %s permission for %s %s", auth.ErrForbidden, p.User, need, r.Method, r.URL.Path))
		return
	}
	ctx := auth.NewContext(r.Context(), p)
	if outside {
		ctx = auth.WithToken(ctx, tok) // rate-limit checks may be forwarded
	}
	m.next.ServeHTTP(&forbiddenCounter{ResponseWriter: w, store: m.store}, r.WithContext(ctx))
}

// pattern is the httpNeeds key r matches, "" for none.
func (m *authMiddleware) pattern(r *http.Request) string {
	_, pat := m.routes.Handler(r)
	return pat
}

// authorizeRoute is httpapi's Authorize hook: the route's permission, for
// the principal authMiddleware authenticated.
func authorizeRoute(r *http.Request, route string) error {
	need, ok := httpNeeds[route]
	if !ok {
		return fmt.Errorf("%w: no permission is defined for %s", auth.ErrForbidden, route)
	}
	if need.Perm == auth.Public {
		return nil
	}
	p, err := principalOf(r.Context())
	if err != nil {
		return err
	}
	if !p.Allows(need) {
		return fmt.Errorf("%w: user %q has no %s permission for %s", auth.ErrForbidden, p.User, need, route)
	}
	return nil
}

// routeAuthorizer is the API's Authorize hook; nil without --auth.
func routeAuthorizer(store *auth.Store) func(*http.Request, string) error {
	if store == nil {
		return nil
	}
	return authorizeRoute
}

// guardBackend returns be behind per-id permission checks, or be itself without
// --auth.
func guardBackend(store *auth.Store, be contract.Backend) contract.Backend {
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
		if cfg.Insecure {
			log.Warn("authentication off and --insecure: any client that can reach the listeners may read, change and delete every counter")
		} else {
			log.Info("authentication off: --auth not set (loopback only unless --insecure)")
		}
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
