package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/counterd/counterd/internal/chunksync"
	"github.com/counterd/counterd/internal/shed"
)

// The guard is the outermost HTTP middleware (docs/security.md, "Browser
// safety" and "Overload"). In order, it:
//
//   - refuses a Host that is not loopback, the listener's own address or
//     in --allowed-hosts (421): a DNS-rebinding page reaches 127.0.0.1
//     under the attacker's own host name, which it cannot make loopback;
//   - refuses any request with an Origin header that --cors-origin does
//     not list (403), whatever its method and content type: browsers send
//     cross-site form and text/plain POSTs without a preflight, but always
//     with an Origin, while curl and server-side clients send none;
//     preflights (OPTIONS) of listed origins are answered here. The
//     server's own origin (the request's scheme and its Host, which the
//     rule above accepted) is always allowed: the web console at /ui is
//     served from it;
//   - refuses a request whose declared Content-Length is over the
//     route's body limit (--max-body, --events-max-body for /events) at
//     once (413) and closes its connection, without reading the body: a
//     handler's limited reader would wait for a body that never comes up
//     to the body deadline, and the HTTP server would drain what comes;
//   - refuses a request body whose Content-Type is neither JSON (or NDJSON) nor curl's
//     default application/x-www-form-urlencoded (415). The form type stays
//     accepted because `curl -d '{"delta":1}'` sends it; a browser that
//     sends it also sends an Origin, which the rule above refuses;
//     application/octet-stream is accepted on the snapshot chunk route;
//   - sets the body's read deadline (--http-read-body-timeout), so a
//     client that trickles a body holds its connection that long at most;
//   - admits the request through the overload limiter, or answers 503
//     with Retry-After (metrics and health checks are never shed).

// Guard error codes, in the API's error body shape (docs/http-api.md).
const (
	codeHostNotAllowed   = "host_not_allowed"
	codeOriginNotAllowed = "origin_not_allowed"
	codeUnsupportedMedia = "unsupported_media_type"
	codeOverloaded       = "overloaded"
	codeTooManyRequests  = "too_many_requests"
	codeBodyTooLarge     = "body_too_large" // as the API's own (httpapi)
)

// guardConfig is what the guard checks against. It is read-only once
// built, so the guard is safe for concurrent use.
type guardConfig struct {
	hosts       map[string]bool // lower-case "host" or "host:port" accepted besides loopback
	anyHost     bool            // --allowed-hosts '*'
	origins     map[string]bool // lower-case origins accepted
	anyOrigin   bool            // --cors-origin '*'
	bodyTimeout time.Duration   // 0: none
	maxBody     int64           // --max-body
	eventsBody  int64           // --events-max-body: POST /events
	shed        *shed.Limiter   // nil: no limit
	retryAfter  string          // Retry-After of a shed answer, seconds
}

// newGuardConfig builds the guard's configuration from the flags and the
// bound HTTP address (accepted as a Host when it is not a wildcard).
func newGuardConfig(cfg Config, bound string, lim *shed.Limiter) guardConfig {
	g := guardConfig{
		hosts:       map[string]bool{},
		origins:     map[string]bool{},
		bodyTimeout: cfg.HTTPReadBodyTimeout,
		maxBody:     cfg.MaxBodyBytes,
		eventsBody:  cfg.Events.MaxBody,
		shed:        lim,
		retryAfter:  "1",
	}
	for _, h := range splitList(cfg.AllowedHosts) {
		if h == "*" {
			g.anyHost = true
		}
		g.hosts[strings.ToLower(h)] = true
	}
	if bound != "" && !isWildcard(bound) {
		g.hosts[strings.ToLower(bound)] = true
	}
	for _, o := range splitList(cfg.CORSOrigin) {
		if o == "*" {
			g.anyOrigin = true
		}
		g.origins[strings.ToLower(strings.TrimSuffix(o, "/"))] = true
	}
	return g
}

// hostAllowed reports whether a request's Host may be served.
func (g *guardConfig) hostAllowed(hostport string) bool {
	if hostport == "" || g.anyHost { // HTTP/1.0 without Host: no name to rebind
		return true
	}
	hp := strings.ToLower(hostport)
	if g.hosts[hp] {
		return true
	}
	host := hp
	if h, _, err := net.SplitHostPort(hp); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host == "localhost" || g.hosts[host] {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// sameOrigin reports whether origin is the origin r was sent to: a page
// the server itself served (the console). The Host was checked first, so
// a rebinding name never gets here.
func sameOrigin(r *http.Request, origin string) bool {
	scheme := "http://"
	if r.TLS != nil {
		scheme = "https://"
	}
	return r.Host != "" && strings.EqualFold(origin, scheme+r.Host)
}

func (g *guardConfig) originAllowed(origin string) bool {
	return g.anyOrigin || g.origins[strings.ToLower(origin)]
}

// binaryBodyPaths take application/octet-stream bodies (snapshot chunks):
// a type browsers never send cross-site without a preflight.
var binaryBodyPaths = map[string]bool{"/admin/snapshot/chunks": true}

// bodyContentTypeOK reports whether a request body's Content-Type may be
// decoded as JSON (see the guard's comment for the form type), or is
// binary on a path that takes binary bodies.
func bodyContentTypeOK(ct, path string) bool {
	if ct == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	if mt == "application/octet-stream" {
		return binaryBodyPaths[path]
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json") || mt == "application/x-www-form-urlencoded" ||
		mt == "application/x-ndjson" // POST /events batches; not a type browsers send without a preflight
}

// bodyLimit is the largest body the route of path reads: what its
// handler reads through its own limit.
func (g *guardConfig) bodyLimit(path string) (limit int64, flag string) {
	switch path {
	case "/events":
		return g.eventsBody, "--events-max-body"
	case "/admin/snapshot/chunks":
		return chunksync.MaxChunkBody, "a snapshot chunk's bound"
	}
	return g.maxBody, "--max-body"
}

// refuseLargeBody answers 413 to a request whose declared body is over
// its limit, and makes its connection close at once (HTTP/1): the body is
// neither read nor drained. Over HTTP/2 only the stream ends.
func refuseLargeBody(w http.ResponseWriter, r *http.Request, limit int64, flag string) {
	if r.ProtoMajor == 1 {
		w.Header().Set("Connection", "close")
	}
	guardError(w, http.StatusRequestEntityTooLarge, codeBodyTooLarge,
		fmt.Sprintf("request body too large: Content-Length %d is over the limit of %d bytes (%s)", r.ContentLength, limit, flag))
	rc := http.NewResponseController(w)
	if rc.Flush() == nil {
		// The HTTP server closes the request's body before the
		// connection; with the read deadline passed it does not wait
		// for the body's bytes to close it.
		_ = rc.SetReadDeadline(time.Now())
	}
}

// guard wraps next with the checks above.
func guard(g guardConfig, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.hostAllowed(r.Host) {
			guardError(w, http.StatusMisdirectedRequest, codeHostNotAllowed,
				"host "+quote(r.Host)+" is not served here: use a loopback address or add it to --allowed-hosts")
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" && !sameOrigin(r, origin) {
			if !g.originAllowed(origin) {
				guardError(w, http.StatusForbidden, codeOriginNotAllowed,
					"origin "+quote(origin)+" is not allowed: add it to --cors-origin")
				return
			}
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", origin)
			h.Add("Vary", "Origin")
			if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
				h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, PATCH, DELETE")
				h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Idempotency-Key")
				h.Set("Access-Control-Max-Age", "600")
				w.WriteHeader(http.StatusNoContent)
				return
			}
			h.Set("Access-Control-Expose-Headers", "Retry-After, "+ringVersionHeader)
		}
		if r.ContentLength > 0 {
			if limit, flag := g.bodyLimit(r.URL.Path); r.ContentLength > limit && limit > 0 {
				refuseLargeBody(w, r, limit, flag)
				return
			}
		}
		if r.ContentLength != 0 && !bodyContentTypeOK(r.Header.Get("Content-Type"), r.URL.Path) {
			guardError(w, http.StatusUnsupportedMediaType, codeUnsupportedMedia,
				"request bodies are JSON: send Content-Type: application/json")
			return
		}
		if g.bodyTimeout > 0 && r.ContentLength != 0 {
			// Error ignored: only HTTP/2 and hijacked connections refuse
			// deadlines, and the write timeout still bounds those.
			rc := http.NewResponseController(w)
			if rc.SetReadDeadline(time.Now().Add(g.bodyTimeout)) == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
			}
		}
		// A request admitted before the HTTP server (admission.go) holds
		// a slot already.
		if g.shed != nil && !neverShed(r) && !shed.TicketFrom(r.Context()).Holding() {
			if err := g.shed.Acquire(r.Context(), "http"); err != nil {
				if errors.Is(err, shed.ErrOverloaded) {
					w.Header().Set("Retry-After", g.retryAfter)
					guardError(w, http.StatusServiceUnavailable, codeOverloaded, "server overloaded, retry later")
				} else if !errors.Is(err, context.Canceled) {
					guardError(w, http.StatusServiceUnavailable, codeOverloaded, err.Error())
				}
				return
			}
			defer g.shed.Release()
		}
		next.ServeHTTP(w, r)
	})
}

// neverShed reports the requests answered even under overload: metrics
// (monitoring must see the overload) and health checks (a shed probe
// would make the load balancer restart a node that is only busy).
func neverShed(r *http.Request) bool {
	if r.Method != http.MethodGet {
		return false
	}
	switch r.URL.Path {
	case "/metrics", "/healthz", "/readyz":
		return true
	}
	return false
}

// deadlineBody lifts the body deadline once the body has been read: the
// server's background read of the connection would otherwise hit it while
// a slow handler runs, and cancel the request.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// guardError writes the API's JSON error body.
func guardError(w http.ResponseWriter, status int, code, msg string) {
	m, _ := json.Marshal(msg) // a string always marshals
	b := make([]byte, 0, 64+len(m))
	b = append(b, `{"status":"error","error":{"code":"`...)
	b = append(b, code...)
	b = append(b, `","message":`...)
	b = append(b, m...)
	b = append(b, "}}\n"...)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// quote shortens a client-supplied value for an error message.
func quote(s string) string {
	if len(s) > 100 {
		s = s[:100] + "..."
	}
	return `"` + s + `"`
}
