package server

import (
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/counterd/counterd/internal/api/resp"
	"github.com/counterd/counterd/internal/cluster/membership"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/region"
)

// Config is everything counterd reads from its flags and environment.
type Config struct {
	Data       string // --data: data directory (default ./data)
	HTTP       string // --http: HTTP API address (default 127.0.0.1:8080)
	RESP       string // --resp: Redis-protocol address (default 127.0.0.1:6380; empty disables)
	GRPC       string // --grpc: gRPC address: Envoy rate-limit service now, peer traffic in cluster mode (default 127.0.0.1:9090; empty disables)
	Durability string // --durability: sync or async (default async)
	NodeID     string // --node-id: node name (default: hostname)
	Gossip     string // --gossip: memberlist address (default 127.0.0.1:7946; cluster mode)
	Join       string // --join: comma-separated gossip addresses (cluster mode)
	Redis      string // --redis: Redis URL (tiered mode); several addr= parameters or cluster=true: Redis Cluster
	Postgres   string // --postgres: PostgreSQL DSN (tiered mode)

	Region      string // --region: this cluster's region, recorded in the data directory (default none)
	PeerRegions string // --peer-regions: NAME=HOST:PORT,... gRPC addresses of other regions (default none; listed by GET /regions)
	// RegionInterval: how often changes are shipped to every peer region
	// (--region-interval, default 1s).
	RegionInterval time.Duration
	// RegionSyncInterval: period of anti-entropy with every peer region
	// (--region-sync-interval, default 10m; 0: only at start and after a
	// peer restarted).
	RegionSyncInterval time.Duration

	SnapshotInterval time.Duration // --snapshot-interval: tiered mode: scheduled PostgreSQL snapshots (default 0 = on demand only)
	AuditNamespaces  string        // --audit-namespaces: tiered mode: comma-separated namespaces written to the audit log, "*" all (default none)

	FlushInterval        time.Duration // --flush-interval: async flush period (default 1s)
	IdempotencyRetention time.Duration // --idempotency-retention (default 24h)
	IdempotencyMemory    int           // --idempotency-memory: records kept in memory (default 100000)
	MaxBodyBytes         int64         // --max-body: largest HTTP body (default 1 MiB)
	MaxBatch             int           // --max-batch: ops per batch (default 1000)
	RateLimitPolicies    string        // --ratelimit-policies: YAML file of rate-limit policies (default none)
	Quotas               string        // --quotas: YAML file of quotas per namespace, reloaded on SIGHUP (default none: no quotas)
	AllowFlush           bool          // --allow-flushall: let RESP FLUSHALL/FLUSHDB delete everything (default false)
	Pprof                bool          // --pprof: serve /debug/pprof on the --admin address (default false)
	ShutdownTimeout      time.Duration // --shutdown-timeout: grace period for in-flight requests (default 10s)
	// NodeStatsInterval is how often the console's node page samples the
	// node's own metrics (GET /node/stats; default 10 s, no flag: tests
	// shorten it).
	NodeStatsInterval time.Duration
	LogLevel          string // --log-level: debug, info, warn, error (default info)
	LogFormat         string // --log-format: text or json (default text)
	// OTLPEndpoint: --otlp-endpoint, the OpenTelemetry collector spans are
	// exported to (default none: tracing off; docs/tracing.md).
	OTLPEndpoint string
	// TraceSampleRatio: --trace-sample-ratio, the share of new traces
	// sampled; requests with a trace context follow it (default 1).
	TraceSampleRatio float64
	// ConfigFile: --config, a YAML file of settings keyed by flag name,
	// applied by ApplyConfigFile below flags and environment (default none).
	ConfigFile string

	// MinFreeDisk: --min-free-disk: writes are refused (HTTP 507, RESP
	// MISCONF) while the data directory's filesystem has less free; a size
	// such as 128MiB, 0 only on ENOSPC, auto: 128MiB or a tenth of the
	// filesystem if smaller (default auto; docs/operations.md, "Full disk").
	MinFreeDisk string
	// MemoryLimit: --memory-limit: the Go runtime's soft memory limit and
	// the engine's memtable budget; a size, none, or auto: GOMEMLIMIT when
	// set, else 90% of the process's cgroup memory limit when it has one,
	// else none (default auto; docs/operations.md, "Memory").
	MemoryLimit string
	// memTable is the engine's memtable size from MemoryLimit, set by Run.
	memTable uint64

	// security: auth
	Auth     string // --auth: tokens file (YAML, docs/security.md), reloaded on SIGHUP (default none: no authentication)
	Insecure bool   // --insecure: serve a non-loopback --http, --resp or --grpc without --auth, or node-to-node links beyond loopback without --peer-ca / --gossip-key-file (default false: refuse)
	// security: tls
	TLSCert       string // --tls-cert: PEM certificate for HTTP, RESP and gRPC, reloaded on change (default none: plaintext)
	TLSKey        string // --tls-key: PEM private key of --tls-cert
	PeerCA        string // --peer-ca: PEM CA that signs every node's --tls-cert: mutual TLS between cluster peers and peer regions (default none)
	GossipKeyFile string // --gossip-key-file: memberlist encryption key, 16/24/32 bytes raw or base64 (default none: plaintext gossip)
	// security: hardening (docs/security.md: Browser safety, Limits, Overload)
	AllowedHosts          string        // --allowed-hosts: Host values accepted besides loopback and the bound HTTP address, comma-separated, "*" any (default none)
	CORSOrigin            string        // --cors-origin: browser origins allowed to call the API, comma-separated, "*" any (default none)
	Admin                 string        // --admin: pprof listener, opened with --pprof (default 127.0.0.1:6060)
	HTTPReadHeaderTimeout time.Duration // --http-read-header-timeout (default 5s)
	HTTPReadBodyTimeout   time.Duration // --http-read-body-timeout: deadline of a request body (default 10s)
	HTTPWriteTimeout      time.Duration // --http-write-timeout (default 30s)
	HTTPIdleTimeout       time.Duration // --http-idle-timeout: keep-alive (default 2m)
	HTTPMaxConns          int           // --http-max-conns: 0 derived from the fd limit (at most 10000), -1 unlimited (default 0)
	RESPMaxConns          int           // --resp-max-conns: as --http-max-conns (default 0)
	RESPIdleTimeout       time.Duration // --resp-idle-timeout: 0 never (default 5m)
	RESPMaxBulk           int           // --resp-max-bulk: longest argument in bytes (default 8 MiB)
	RESPMaxCommand        int           // --resp-max-command: longest command in bytes, a connection's query buffer (default 32 MiB)
	RESPQueryBufferTotal  int           // --resp-query-buffer-total: all connections' big query buffers together (default 256 MiB)
	RESPMaxArgs           int           // --resp-max-args: most arguments of one command (default 32768)
	RESPEventLoops        int           // --resp-event-loops: -1 a goroutine per connection, 0 auto, N loops (default 0)
	HTTPEventLoops        int           // --http-event-loops: -1 none (net/http only), 0 auto (the default), N loops
	LuaTimeLimit          time.Duration // --lua-time-limit: after it a running RESP script answers other clients BUSY and may be stopped by SCRIPT KILL (default 5s)
	RESPCoalesce          time.Duration // --resp-coalesce: an event loop's nap under concurrent unpipelined load, 0 none (default 20µs)
	MaxInflight           int           // --max-inflight: requests running at once, 0 = 64 x GOMAXPROCS, -1 no shedding (default 0)
	MaxQueue              int           // --max-queue: requests waiting for a slot, 0 = 4 x max-inflight, -1 none (default 0)
	MaxQueueWait          time.Duration // --max-queue-wait: longest wait for a slot (default 20ms)
	HTTPAdmission         bool          // --http-admission: admit plaintext HTTP requests per client before the HTTP server parses them (default true; docs/security.md, Overload)
	MaxClientQueue        int           // --max-queue-per-client: a client's share of the queue (HTTP, RESP, gRPC), 0 = max-queue / 4 (default 0)
	MaxConnsPerClient     int           // --max-conns-per-client: HTTP and RESP connections of one client address, each, 0 = a quarter of --http-max-conns / --resp-max-conns, -1 unlimited (default 0)
	MaxBusyConnsPerClient int           // --max-busy-conns-per-client: HTTP connections of one client address with a request in hand while the node is overloaded (its others wait unread), 0 = --max-queue-per-client's value, -1 unlimited (default 0; docs/security.md, Overload)
	TrustedProxies        string        // --trusted-proxies: CIDRs whose X-Forwarded-For / Forwarded names the client for admission and the connection cap, comma-separated (default none)
	ShedRatePerClient     int           // --shed-rate-per-client: HTTP 503s a second per client IP before its refused connections are paused (shed requests, and separately connections over a cap), 0 = no pause (default 1000)
	// cluster failure detection (docs/cluster.md: Failover timing)
	ClusterTiming string // --cluster-timing: fast (dead after ~0.6 s) or lan (memberlist LAN defaults, ~5 s) (default fast)
	// owner leases (docs/cluster.md: Owner leases)
	ClusterLease      time.Duration // --cluster-lease: how long an owner serves without a majority's renewal, 0 = no lease (default 400ms)
	ClusterLeaseDrift time.Duration // --cluster-lease-drift: clock-drift bound a new owner adds to the old owner's lease (default 100ms)
	// global-approx rate limits (docs/ratelimit.md: Global limits)
	RateLimitGlobalInterval time.Duration // --ratelimit-global-interval: how often nodes exchange usage and shares of global-approx limits (default 100ms)
	// the event pipeline (pipeline.go, docs/pipeline.md)
	Events EventsConfig

	envErrs []error // environment variables that did not parse
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	if host == "" {
		host = "counterd"
	}
	return Config{
		Data:                    "./data",
		HTTP:                    "127.0.0.1:8080",
		RESP:                    "127.0.0.1:6380",
		GRPC:                    "127.0.0.1:9090",
		Durability:              "async",
		MinFreeDisk:             "auto",
		MemoryLimit:             "auto",
		NodeID:                  host,
		Gossip:                  "127.0.0.1:7946",
		ClusterTiming:           "fast",
		ClusterLease:            400 * time.Millisecond,
		ClusterLeaseDrift:       100 * time.Millisecond,
		RateLimitGlobalInterval: 100 * time.Millisecond,
		FlushInterval:           time.Second,
		RegionInterval:          time.Second,
		RegionSyncInterval:      10 * time.Minute,
		IdempotencyRetention:    24 * time.Hour,
		IdempotencyMemory:       100000,
		MaxBodyBytes:            1 << 20,
		MaxBatch:                1000,
		ShutdownTimeout:         10 * time.Second,
		LogLevel:                "info",
		LogFormat:               "text",
		TraceSampleRatio:        1,

		Admin:                 "127.0.0.1:6060",
		HTTPReadHeaderTimeout: 5 * time.Second,
		HTTPReadBodyTimeout:   10 * time.Second,
		HTTPWriteTimeout:      30 * time.Second,
		HTTPIdleTimeout:       2 * time.Minute,
		RESPIdleTimeout:       5 * time.Minute,
		RESPCoalesce:          20 * time.Microsecond,
		LuaTimeLimit:          resp.DefaultLuaTimeLimit,
		RESPMaxBulk:           8 << 20,
		RESPMaxCommand:        32 << 20,
		RESPQueryBufferTotal:  256 << 20,
		RESPMaxArgs:           32768,
		MaxQueueWait:          20 * time.Millisecond,
		ShedRatePerClient:     1000,
		HTTPAdmission:         true,
		Events:                defaultEventsConfig(),
	}
}

// ErrUnsupportedMode is returned for deployment shapes this build does not
// serve yet.
var ErrUnsupportedMode = errors.New("server: deployment mode not available in this build")

// Validate reports the first invalid setting.
func (c *Config) Validate() error {
	if _, err := contract.ParseDurability(c.Durability); err != nil || c.Durability == "" {
		return fmt.Errorf("server: --durability must be sync or async, not %q", c.Durability)
	}
	if c.HTTP == "" {
		return errors.New("server: --http is empty")
	}
	if _, err := parseMinFreeDisk(c.MinFreeDisk); err != nil {
		return fmt.Errorf("server: --min-free-disk: %w", err)
	}
	if _, _, err := parseMemoryLimit(c.MemoryLimit); err != nil {
		return fmt.Errorf("server: --memory-limit: %w", err)
	}
	if (c.Redis == "") != (c.Postgres == "") {
		return errors.New("server: tiered mode needs both --redis and --postgres")
	}
	if err := c.validateRegions(); err != nil {
		return err
	}
	if c.SnapshotInterval < 0 {
		return errors.New("server: --snapshot-interval must not be negative")
	}
	if c.Join != "" && c.Redis != "" {
		// Tiered nodes keep no state of their own: run several behind a
		// load balancer instead of clustering them.
		return fmt.Errorf("%w: --join with --redis/--postgres (tiered nodes are stateless and need no cluster)", ErrUnsupportedMode)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("server: --log-level must be debug, info, warn or error, not %q", c.LogLevel)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return fmt.Errorf("server: --log-format must be text or json, not %q", c.LogFormat)
	}
	if err := c.validateProtectedMode(); err != nil {
		return err
	}
	if err := c.validateTracing(); err != nil { // tracing.go
		return err
	}
	if err := c.validateTLS(); err != nil {
		return err
	}
	if _, err := membership.ParseTiming(c.ClusterTiming); err != nil {
		return fmt.Errorf("server: --cluster-timing: %w", err)
	}
	if c.ClusterLease < 0 || c.ClusterLease > 0 && c.ClusterLease < 10*time.Millisecond || c.ClusterLeaseDrift < 0 {
		return fmt.Errorf("server: --cluster-lease must be 0 (no lease) or at least 10ms, and --cluster-lease-drift not negative (got %v, %v)", c.ClusterLease, c.ClusterLeaseDrift)
	}
	if c.RateLimitGlobalInterval < time.Millisecond {
		return fmt.Errorf("server: --ratelimit-global-interval must be at least 1ms (got %v)", c.RateLimitGlobalInterval)
	}
	if err := c.validateHardening(); err != nil {
		return err
	}
	if err := c.Events.validate(); err != nil {
		return err
	}
	if c.FlushInterval <= 0 || c.IdempotencyRetention <= 0 || c.IdempotencyMemory <= 0 || c.MaxBodyBytes <= 0 || c.MaxBatch <= 0 {
		return errors.New("server: durations and limits must be positive")
	}
	return nil
}

// validateRegions checks --region and --peer-regions.
func (c *Config) validateRegions() error {
	if c.Region != "" {
		if err := region.ValidateName(c.Region); err != nil {
			return fmt.Errorf("server: --region: %w", err)
		}
	}
	if c.PeerRegions != "" && c.Region == "" {
		return errors.New("server: --peer-regions needs --region (peers tell regions apart by name)")
	}
	peers, err := region.ParsePeers(c.PeerRegions, c.Region)
	if err != nil {
		return fmt.Errorf("server: --peer-regions: %w", err)
	}
	if c.RegionInterval < 0 {
		return errors.New("server: --region-interval must not be negative")
	}
	if c.RegionSyncInterval < 0 {
		return errors.New("server: --region-sync-interval must not be negative")
	}
	if len(peers) > 0 && c.GRPC == "" {
		return errors.New("server: --peer-regions needs --grpc: peer regions push to this region's gRPC address")
	}
	return nil
}

// validateTLS checks the combinations of the TLS flags; the files are read
// by Run.
func (c *Config) validateTLS() error {
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return errors.New("server: --tls-cert and --tls-key go together")
	}
	if c.PeerCA != "" && c.TLSCert == "" {
		return errors.New("server: --peer-ca needs --tls-cert and --tls-key (each node presents its certificate to its peers)")
	}
	if c.Join != "" && c.TLSCert != "" && c.PeerCA == "" {
		return errors.New("server: a cluster with --tls-cert needs --peer-ca (peers verify each other against it)")
	}
	if c.PeerRegions != "" && c.TLSCert != "" && c.PeerCA == "" {
		return errors.New("server: peer regions with --tls-cert need --peer-ca (regions verify each other against it)")
	}
	if c.Join != "" && c.PeerCA != "" && c.GossipKeyFile == "" {
		// Without it anyone who reaches the gossip port can declare
		// members dead or lie about their addresses.
		return errors.New("server: --peer-ca needs --gossip-key-file in a cluster (unencrypted gossip is unauthenticated)")
	}
	if c.PeerCA != "" && c.Join == "" && c.PeerRegions == "" {
		return errors.New("server: --peer-ca is for node-to-node links: cluster mode (--join) or peer regions (--peer-regions)")
	}
	if c.GossipKeyFile != "" && c.Join == "" {
		return errors.New("server: --gossip-key-file is for cluster mode (--join)")
	}
	return nil
}

// BindFlags registers every setting on fs, with its default taken from the
// environment variable COUNTERD_<NAME> when set (flag beats environment
// beats default). Call fs.Parse, then EnvErr, before using c.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	str := func(p *string, name, usage string) { fs.StringVar(p, name, envStr(name, *p), usage) }
	dur := func(p *time.Duration, name, usage string) {
		fs.DurationVar(p, name, envParse(c, name, *p, time.ParseDuration), usage)
	}
	envInt := func(name string, def int) int { return envParse(c, name, def, strconv.Atoi) }
	envBool := func(name string, def bool) bool { return envParse(c, name, def, parseBool) }
	str(&c.Data, "data", "data directory")
	str(&c.HTTP, "http", "HTTP API address")
	str(&c.RESP, "resp", "Redis-protocol address (empty disables)")
	str(&c.GRPC, "grpc", "gRPC address: Envoy rate-limit service (empty disables)")
	str(&c.RateLimitPolicies, "ratelimit-policies", "YAML file of rate-limit policies (docs/ratelimit.md)")
	str(&c.Quotas, "quotas", "YAML file of quotas: keys per namespace and fields per hash (docs/security.md, Quotas); SIGHUP reloads it")
	str(&c.Durability, "durability", "default acknowledgement mode: sync or async")
	str(&c.MinFreeDisk, "min-free-disk", "free space the data directory's filesystem keeps: below it the node is read-only (writes answer HTTP 507 / RESP MISCONF, reads are served) until space returns; a size such as 128MiB or 1GiB, 0: only once the disk is full, auto: 128MiB or a tenth of the filesystem if smaller")
	str(&c.MemoryLimit, "memory-limit", "soft limit of the process's memory: the Go runtime's memory limit and the engine's memtable budget (a size such as 512MiB or 4GiB; none; auto: GOMEMLIMIT if set, else 90% of the cgroup's memory limit if there is one, else none)")
	str(&c.NodeID, "node-id", "node name")
	str(&c.Region, "region", "this cluster's region (letters, digits, _ - .), recorded in the data directory")
	str(&c.PeerRegions, "peer-regions", "other regions as NAME=HOST:PORT,... (gRPC addresses; listed by GET /regions)")
	dur(&c.RegionInterval, "region-interval", "how often changes are shipped to every peer region")
	dur(&c.RegionSyncInterval, "region-sync-interval", "period of anti-entropy (hash-addressed comparison) with every peer region; 0: only at start and after a peer restarted")
	str(&c.Gossip, "gossip", "gossip bind address (cluster mode)")
	str(&c.Join, "join", "gossip addresses of nodes to join, comma-separated (cluster mode)")
	str(&c.Redis, "redis", "Redis URL (tiered mode): redis://host:port/db; Redis Cluster: redis://host:port?addr=host:port&addr=host:port, or one seed node with ?cluster=true")
	str(&c.Postgres, "postgres", "PostgreSQL DSN (tiered mode)")
	dur(&c.SnapshotInterval, "snapshot-interval", "tiered mode: take a PostgreSQL snapshot at this period (0: on demand only)")
	str(&c.AuditNamespaces, "audit-namespaces", `tiered mode: namespaces whose changes go to the audit log, comma-separated ("*": all)`)
	dur(&c.FlushInterval, "flush-interval", "async flush period")
	dur(&c.IdempotencyRetention, "idempotency-retention", "how long idempotency keys are remembered")
	fs.IntVar(&c.IdempotencyMemory, "idempotency-memory", envInt("idempotency-memory", c.IdempotencyMemory), "idempotency records kept in memory (older ones are read from disk)")
	fs.Int64Var(&c.MaxBodyBytes, "max-body", int64(envInt("max-body", int(c.MaxBodyBytes))), "largest HTTP request body in bytes")
	fs.IntVar(&c.MaxBatch, "max-batch", envInt("max-batch", c.MaxBatch), "most ops in one batch")
	fs.BoolVar(&c.AllowFlush, "allow-flushall", envBool("allow-flushall", c.AllowFlush), "allow RESP FLUSHALL/FLUSHDB")
	fs.BoolVar(&c.Pprof, "pprof", envBool("pprof", c.Pprof), "serve /debug/pprof on the --admin address")
	dur(&c.ShutdownTimeout, "shutdown-timeout", "grace period for in-flight requests on shutdown")
	// security: hardening
	str(&c.AllowedHosts, "allowed-hosts", `Host values accepted besides loopback and the bound HTTP address, comma-separated ("*": any)`)
	str(&c.CORSOrigin, "cors-origin", `browser origins allowed to call the API, comma-separated ("*": any)`)
	str(&c.Admin, "admin", "admin listener address: pprof, opened with --pprof")
	dur(&c.HTTPReadHeaderTimeout, "http-read-header-timeout", "longest time to read a request's headers")
	dur(&c.HTTPReadBodyTimeout, "http-read-body-timeout", "longest time to read a request's body")
	dur(&c.HTTPWriteTimeout, "http-write-timeout", "longest time to write an answer")
	dur(&c.HTTPIdleTimeout, "http-idle-timeout", "keep-alive connections idle this long are closed")
	fs.IntVar(&c.HTTPMaxConns, "http-max-conns", envInt("http-max-conns", c.HTTPMaxConns), "most HTTP connections at once (0: from the fd limit, at most 10000; -1: unlimited)")
	fs.IntVar(&c.RESPMaxConns, "resp-max-conns", envInt("resp-max-conns", c.RESPMaxConns), "most Redis-protocol connections at once (0: from the fd limit, at most 10000; -1: unlimited)")
	dur(&c.RESPIdleTimeout, "resp-idle-timeout", "Redis-protocol connections idle this long are closed (0: never)")
	fs.IntVar(&c.RESPMaxBulk, "resp-max-bulk", envInt("resp-max-bulk", c.RESPMaxBulk), "longest Redis-protocol argument in bytes")
	fs.IntVar(&c.RESPMaxCommand, "resp-max-command", envInt("resp-max-command", c.RESPMaxCommand), "longest Redis-protocol command in bytes (one connection's query buffer)")
	fs.IntVar(&c.RESPQueryBufferTotal, "resp-query-buffer-total", envInt("resp-query-buffer-total", c.RESPQueryBufferTotal), "bytes of query buffers above 64 KiB held by all Redis-protocol connections together")
	fs.IntVar(&c.RESPMaxArgs, "resp-max-args", envInt("resp-max-args", c.RESPMaxArgs), "most arguments of one Redis-protocol command")
	fs.IntVar(&c.RESPEventLoops, "resp-event-loops", envInt("resp-event-loops", c.RESPEventLoops), "Redis-protocol event loops (epoll, Linux; plain TCP): 0 auto (one per two cores with the embedded engine and --durability async, else none), -1 none (a goroutine per connection), N that many")
	fs.IntVar(&c.HTTPEventLoops, "http-event-loops", envInt("http-event-loops", c.HTTPEventLoops), "HTTP/1.1 event loops (epoll, Linux; plain TCP) for the hot routes (rate-limit checks, counter increments and reads; other requests go to the HTTP server): 0 auto (the default: one per two cores with the embedded engine and --durability async, else none), N that many, -1 none (every request through the HTTP server and its admission)")
	dur(&c.LuaTimeLimit, "lua-time-limit", "Redis's lua-time-limit: once a Redis-protocol script (EVAL) has run this long, other clients' commands are answered BUSY (HTTP writes waiting for it 503) and SCRIPT KILL may stop it if it has not written; in tiered mode also the lease of a script's key locks, renewed while it runs (other nodes' writes of its keys wait up to twice this, then fail with TRYAGAIN / 503)")
	dur(&c.RESPCoalesce, "resp-coalesce", "while 32 or more Redis-protocol connections are active and not pipelining, an event loop naps this long after a round, then serves what came meanwhile together: senders do not pay for waking it; adds up to the nap plus the kernel's timer slack to those requests' latency (0: never nap; at most 1ms)")
	fs.IntVar(&c.MaxInflight, "max-inflight", envInt("max-inflight", c.MaxInflight), "requests served at once before shedding (0: 64 x GOMAXPROCS; -1: never shed)")
	fs.IntVar(&c.MaxQueue, "max-queue", envInt("max-queue", c.MaxQueue), "requests waiting for a slot before shedding (0: 4 x max-inflight; -1: none)")
	dur(&c.MaxQueueWait, "max-queue-wait", "longest wait for a slot before a request is shed")
	fs.BoolVar(&c.HTTPAdmission, "http-admission", envBool("http-admission", c.HTTPAdmission), "admit plaintext HTTP requests per client, round-robin, before the HTTP server parses them; shed ones get a cheap 503 or 429 (false: only the handler limit; docs/security.md, Overload)")
	fs.IntVar(&c.ShedRatePerClient, "shed-rate-per-client", envInt("shed-rate-per-client", c.ShedRatePerClient), "HTTP 503 answers a second per client IP; beyond, a refused connection is not read again for up to 250ms; likewise HTTP and RESP connections refused over a connection cap, held up to 2s before their answer (0: never paused)")
	fs.IntVar(&c.MaxClientQueue, "max-queue-per-client", envInt("max-queue-per-client", c.MaxClientQueue), "a client's share of the queue (HTTP requests, RESP batches, gRPC calls): beyond it, while other clients wait, its next is shed with 429 / -BUSY / RESOURCE_EXHAUSTED, and its requests waiting longer than --max-queue-wait are shed (0: max-queue / 4)")
	fs.IntVar(&c.MaxConnsPerClient, "max-conns-per-client", envInt("max-conns-per-client", c.MaxConnsPerClient), "most HTTP connections, and most Redis-protocol connections, of one client address (IPv6: /64); --trusted-proxies addresses are not capped (0: a quarter of --http-max-conns / --resp-max-conns; -1: unlimited)")
	fs.IntVar(&c.MaxBusyConnsPerClient, "max-busy-conns-per-client", envInt("max-busy-conns-per-client", c.MaxBusyConnsPerClient), "while the node is overloaded (requests shed, or waiting --max-queue-wait / 2 in their sockets, within the last second), most HTTP connections of one client address (IPv6: /64) with a request in hand: its other connections are not read until one of those is answered, taking turns, so a client flooding on many connections does not fill the scheduler's queue ahead of other clients; a request that waited its turn past --max-queue-wait is answered 503; no limit otherwise, nor for --trusted-proxies addresses (0: --max-queue-per-client's value, 128 on 2 cores; -1: unlimited)")
	str(&c.TrustedProxies, "trusted-proxies", "CIDRs (or addresses) of proxies whose X-Forwarded-For or Forwarded header names the client, for per-client admission, comma-separated (default none: the peer address is the client)")
	str(&c.LogLevel, "log-level", "debug, info, warn or error")
	str(&c.LogFormat, "log-format", "text or json")
	str(&c.OTLPEndpoint, "otlp-endpoint", "OpenTelemetry collector to export traces to: host:port or grpc://host:port (OTLP gRPC), grpcs://host:port (gRPC over TLS), http(s)://host:port[/v1/traces] (OTLP/HTTP) (default none: tracing off; docs/tracing.md)")
	fs.Float64Var(&c.TraceSampleRatio, "trace-sample-ratio", envParse(c, "trace-sample-ratio", c.TraceSampleRatio, func(s string) (float64, error) { return strconv.ParseFloat(s, 64) }), "share of new traces sampled, 0 to 1; a request carrying a W3C traceparent follows its sampled flag")
	str(&c.ConfigFile, "config", "YAML file of settings, keys are flag names (docs/operations.md, Configuration)")
	// security: auth
	str(&c.Auth, "auth", "tokens file (YAML, docs/security.md); SIGHUP reloads it")
	fs.BoolVar(&c.Insecure, "insecure", envBool("insecure", c.Insecure), "serve a non-loopback address without --auth, or node-to-node links beyond loopback without --peer-ca / --gossip-key-file")
	// security: tls
	str(&c.TLSCert, "tls-cert", "PEM certificate for HTTP, RESP and gRPC (with --tls-key; reloaded when the files change)")
	str(&c.TLSKey, "tls-key", "PEM private key of --tls-cert")
	str(&c.PeerCA, "peer-ca", "PEM CA of the nodes: cluster peers and peer regions present --tls-cert and must be signed by it (mutual TLS); with --peer-regions, --tls-cert must name the region as URI SAN counterd-region://NAME (docs/security.md, Node-to-node links). Required for a non-loopback --grpc with --join or --peer-regions")
	str(&c.GossipKeyFile, "gossip-key-file", "gossip encryption key file: 16, 24 or 32 bytes, raw or base64 (required for a non-loopback --gossip)")
	str(&c.ClusterTiming, "cluster-timing", "failure detection preset: fast (a crashed node is declared dead after about 0.6 s) or lan (memberlist LAN defaults, about 5 s)")
	dur(&c.ClusterLease, "cluster-lease", "owner lease: an owner serves owner operations only this long after a majority renewed it (every quarter of it); a new owner waits for a dropped node's lease to run out (0: no lease)")
	dur(&c.ClusterLeaseDrift, "cluster-lease-drift", "clock-drift bound a new owner adds to a dropped owner's lease before it serves its ids")
	dur(&c.RateLimitGlobalInterval, "ratelimit-global-interval", "cluster mode: how often each node reports its use of global-approx rate limits to their keys' owners and gets its shares back; the overshoot bound grows with it (docs/ratelimit.md, Global limits)")
	c.bindEventsFlags(fs)
	fs.VisitAll(func(f *flag.Flag) { f.Usage += " (env " + envName(f.Name) + ")" })
}

// EnvErr reports environment variables that did not parse.
func (c *Config) EnvErr() error { return errors.Join(c.envErrs...) }

func envName(flagName string) string {
	return "COUNTERD_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func envStr(name, def string) string {
	if v, ok := os.LookupEnv(envName(name)); ok {
		return v
	}
	return def
}

func envParse[T any](c *Config, name string, def T, parse func(string) (T, error)) T {
	v, ok := os.LookupEnv(envName(name))
	if !ok {
		return def
	}
	x, err := parse(v)
	if err != nil {
		c.envErrs = append(c.envErrs, fmt.Errorf("%s=%q: %v", envName(name), v, err))
		return def
	}
	return x
}

func parseBool(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "1", "true", "yes", "on":
		return true, nil
	case "0", "false", "no", "off", "":
		return false, nil
	}
	return false, errors.New("not a boolean")
}

// validateHardening checks the limits of docs/security.md.
func (c *Config) validateHardening() error {
	if c.Pprof && c.Admin == "" {
		return errors.New("server: --pprof needs an --admin address")
	}
	if c.Admin != "" && (c.Admin == c.HTTP || c.Admin == c.RESP || c.Admin == c.GRPC) {
		return fmt.Errorf("server: --admin %s is another listener's address", c.Admin)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"http-read-header-timeout", c.HTTPReadHeaderTimeout}, {"http-read-body-timeout", c.HTTPReadBodyTimeout},
		{"http-write-timeout", c.HTTPWriteTimeout}, {"http-idle-timeout", c.HTTPIdleTimeout},
		{"resp-idle-timeout", c.RESPIdleTimeout}, {"max-queue-wait", c.MaxQueueWait}, {"resp-coalesce", c.RESPCoalesce}, {"lua-time-limit", c.LuaTimeLimit}} {
		if d.v < 0 {
			return fmt.Errorf("server: --%s must not be negative", d.name)
		}
	}
	if _, err := parseTrustedProxies(c.TrustedProxies); err != nil {
		return err
	}
	if c.RESPCoalesce > resp.MaxCoalesce {
		return fmt.Errorf("server: --resp-coalesce must be at most %v", resp.MaxCoalesce)
	}
	if c.MaxConnsPerClient < -1 || c.MaxBusyConnsPerClient < -1 {
		return errors.New("server: --max-conns-per-client and --max-busy-conns-per-client must be -1 or more")
	}
	if c.MaxClientQueue < 0 || c.ShedRatePerClient < 0 {
		return errors.New("server: --max-queue-per-client and --shed-rate-per-client must not be negative")
	}
	if c.HTTPMaxConns < -1 || c.RESPMaxConns < -1 || c.MaxInflight < -1 || c.MaxQueue < -1 {
		return errors.New("server: --http-max-conns, --resp-max-conns, --max-inflight and --max-queue must be -1 or more")
	}
	if c.RESPMaxBulk <= 0 || c.RESPMaxCommand <= 0 || c.RESPQueryBufferTotal <= 0 || c.RESPMaxArgs <= 0 {
		return errors.New("server: --resp-max-bulk, --resp-max-command, --resp-query-buffer-total and --resp-max-args must be positive")
	}
	if c.RESPMaxBulk > c.RESPMaxCommand || c.RESPMaxCommand > c.RESPQueryBufferTotal {
		return errors.New("server: need --resp-max-bulk <= --resp-max-command <= --resp-query-buffer-total")
	}
	return nil
}

// parseTrustedProxies parses --trusted-proxies: CIDRs or single addresses,
// comma-separated.
func parseTrustedProxies(v string) ([]netip.Prefix, error) {
	var ps []netip.Prefix
	for _, e := range splitList(v) {
		p, err := netip.ParsePrefix(e)
		if err != nil {
			ip, aerr := netip.ParseAddr(e)
			if aerr != nil {
				return nil, fmt.Errorf("server: --trusted-proxies: %q is neither a CIDR nor an address", e)
			}
			p = netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen())
		}
		ps = append(ps, p.Masked())
	}
	return ps, nil
}

// trustedProxies is --trusted-proxies parsed (Validate checked it).
func (c *Config) trustedProxies() []netip.Prefix {
	ps, _ := parseTrustedProxies(c.TrustedProxies)
	return ps
}
