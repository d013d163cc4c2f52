package client

import (
	"crypto/tls"
	"net/http"
	"time"
)

// config holds what Options set; see the With functions for the defaults.
type config struct {
	httpClient  *http.Client
	tlsConfig   *tls.Config // WithTLSConfig
	caFile      string      // WithCAFile
	timeout     time.Duration
	maxRetries  int
	backoffBase time.Duration
	backoffCap  time.Duration
	durability  string
	idempotency bool
	userAgent   string
	token       string
	cluster     clusterConfig // NewCluster only
}

func defaultConfig() config {
	return config{
		timeout:     10 * time.Second,
		maxRetries:  3,
		backoffBase: 50 * time.Millisecond,
		backoffCap:  2 * time.Second,
		idempotency: true,
		userAgent:   "counterd-go-client",
		cluster:     defaultClusterConfig(),
	}
}

// Option configures a Client in New.
type Option func(*config)

// WithHTTPClient makes the Client send its requests with hc instead of its
// own http.Client (which has a transport keeping up to 64 idle connections
// to the server). Close does not close hc's connections.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *config) { c.httpClient = hc }
}

// WithTLSConfig makes the Client's own transport use cfg for https://
// addresses, for example with RootCAs holding a private CA or with a client
// certificate. It has no effect with WithHTTPClient.
func WithTLSConfig(cfg *tls.Config) Option {
	return func(c *config) { c.tlsConfig = cfg }
}

// WithCAFile makes the Client trust the PEM certificates in path, besides
// the system's roots, for https:// addresses (a counterd with --tls-cert
// signed by a private CA). New fails if the file holds no certificate. It
// adds to WithTLSConfig's RootCAs and has no effect with WithHTTPClient.
func WithCAFile(path string) Option {
	return func(c *config) { c.caFile = path }
}

// WithTimeout bounds each HTTP attempt (default 10s; 0 means no bound other
// than the context). A call that retries may take longer in total: bound the
// whole call with the context.
func WithTimeout(d time.Duration) Option {
	return func(c *config) { c.timeout = d }
}

// WithRetries sets how many times a failed request is retried (default 3, so
// at most 4 attempts; 0 disables retries). Only network errors and 5xx
// answers are retried, never an answer such as version_conflict.
func WithRetries(n int) Option {
	return func(c *config) { c.maxRetries = max(n, 0) }
}

// WithBackoff sets the backoff between retries: before retry n (from 0) the
// client sleeps a random duration between d/2 and d, where
// d = min(base*2^n, cap). The defaults are base 50ms and cap 2s. A 503 with a
// Retry-After header waits that long instead, up to cap.
func WithBackoff(base, cap time.Duration) Option {
	return func(c *config) {
		c.backoffBase = max(base, 0)
		c.backoffCap = max(cap, c.backoffBase)
	}
}

// WithDefaultDurability sets the durability ("sync" or "async") of every
// mutation that does not give its own with WithDurability. The default ""
// leaves the choice to the server's configuration.
func WithDefaultDurability(d string) Option {
	return func(c *config) { c.durability = d }
}

// WithIdempotencyKeys turns the automatic Idempotency-Key of mutations on
// (the default) or off. Without keys the client cannot tell whether a failed
// mutation was applied, so it does not retry mutations at all; reads are still
// retried. Turning keys off saves the server the bookkeeping, for load tests.
// A key given with WithIdempotencyKey is always sent.
func WithIdempotencyKeys(on bool) Option {
	return func(c *config) { c.idempotency = on }
}

// WithUserAgent sets the User-Agent header (default "counterd-go-client").
func WithUserAgent(ua string) Option {
	return func(c *config) { c.userAgent = ua }
}

// WithToken sends token as "Authorization: Bearer <token>" on every request
// (servers started with --auth, docs/security.md). The default "" sends
// none. A wrong or missing token fails with ErrUnauthenticated, a token
// without the permission with ErrForbidden; neither is retried.
func WithToken(token string) Option {
	return func(c *config) { c.token = token }
}

// callOptions hold what per-call options set.
type callOptions struct {
	durability     string
	idempotencyKey string

	// Set
	expectedVersion *uint64
	ttl             time.Duration

	// Incr, Decr
	kind   string
	shards int
}

// CallOption configures one mutation. Every CallOption is also a SetOption
// and an IncrOption, so WithDurability and WithIdempotencyKey go to every
// mutating method.
type CallOption interface {
	SetOption
	IncrOption
	applyCall(*callOptions)
}

// SetOption configures one Set call: WithExpectedVersion, WithTTL or any
// CallOption.
type SetOption interface{ applySet(*callOptions) }

// IncrOption configures one Incr or Decr call: WithKind, WithShards or any
// CallOption.
type IncrOption interface{ applyIncr(*callOptions) }

type callOpt func(*callOptions)

func (f callOpt) applyCall(o *callOptions) { f(o) }
func (f callOpt) applySet(o *callOptions)  { f(o) }
func (f callOpt) applyIncr(o *callOptions) { f(o) }

type setOpt func(*callOptions)

func (f setOpt) applySet(o *callOptions) { f(o) }

type incrOpt func(*callOptions)

func (f incrOpt) applyIncr(o *callOptions) { f(o) }

// WithDurability overrides the acknowledgement mode of one mutation: "sync"
// answers after the write is on disk, "async" from memory.
func WithDurability(d string) CallOption {
	return callOpt(func(o *callOptions) { o.durability = d })
}

// WithIdempotencyKey sends key (1..255 printable bytes) as the mutation's
// Idempotency-Key instead of a generated one. Use it to retry a call across
// process restarts: the server applies a key's request at most once and
// answers later requests with the same key with the first result.
func WithIdempotencyKey(key string) CallOption {
	return callOpt(func(o *callOptions) { o.idempotencyKey = key })
}

// WithExpectedVersion makes Set apply only if the counter's version is v
// (optimistic locking; 0 means the counter must not exist). Otherwise Set
// fails with ErrVersionConflict.
func WithExpectedVersion(v uint64) SetOption {
	return setOpt(func(o *callOptions) { o.expectedVersion = &v })
}

// WithTTL gives the counter written by Set a time to live (millisecond
// resolution). Without it Set clears any TTL.
func WithTTL(d time.Duration) SetOption {
	return setOpt(func(o *callOptions) { o.ttl = d })
}

// WithKind makes Incr or Decr create a counter of this additive kind
// (KindCounter, KindSharded or KindPN) or require that the existing counter
// has it. Without it the counter's existing kind is used, and a new counter
// is a KindCounter. Window counters are created with WindowIncr.
func WithKind(k Kind) IncrOption {
	return incrOpt(func(o *callOptions) { o.kind = string(k) })
}

// WithShards sets the number of shards of a sharded counter that Incr
// creates (default: the server's). It implies WithKind(KindSharded).
func WithShards(n int) IncrOption {
	return incrOpt(func(o *callOptions) { o.kind = string(KindSharded); o.shards = n })
}
