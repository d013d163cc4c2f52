package server

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/counterd/counterd/internal/engine"
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
	Redis      string // --redis: Redis URL (tiered mode)
	Postgres   string // --postgres: PostgreSQL DSN (tiered mode)

	SnapshotInterval time.Duration // --snapshot-interval: tiered mode: scheduled PostgreSQL snapshots (default 0 = on demand only)
	AuditNamespaces  string        // --audit-namespaces: tiered mode: comma-separated namespaces written to the audit log, "*" all (default none)

	FlushInterval        time.Duration // --flush-interval: async flush period (default 1s)
	IdempotencyRetention time.Duration // --idempotency-retention (default 24h)
	IdempotencyMemory    int           // --idempotency-memory: records kept in memory (default 100000)
	MaxBodyBytes         int64         // --max-body: largest HTTP body (default 1 MiB)
	MaxBatch             int           // --max-batch: ops per batch (default 1000)
	RateLimitPolicies    string        // --ratelimit-policies: YAML file of rate-limit policies (default none)
	AllowFlush           bool          // --allow-flushall: let RESP FLUSHALL/FLUSHDB delete everything (default false)
	Pprof                bool          // --pprof: serve /debug/pprof on the HTTP address (default false)
	ShutdownTimeout      time.Duration // --shutdown-timeout: grace period for in-flight requests (default 10s)
	LogLevel             string        // --log-level: debug, info, warn, error (default info)
	LogFormat            string        // --log-format: text or json (default text)

	// security: auth
	Auth     string // --auth: tokens file (YAML, docs/security.md), reloaded on SIGHUP (default none: no authentication)
	Insecure bool   // --insecure: serve a non-loopback --http, --resp or --grpc without --auth (default false: refuse)

	envErrs []error // environment variables that did not parse
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	if host == "" {
		host = "counterd"
	}
	return Config{
		Data:                 "./data",
		HTTP:                 "127.0.0.1:8080",
		RESP:                 "127.0.0.1:6380",
		GRPC:                 "127.0.0.1:9090",
		Durability:           "async",
		NodeID:               host,
		Gossip:               "127.0.0.1:7946",
		FlushInterval:        time.Second,
		IdempotencyRetention: 24 * time.Hour,
		IdempotencyMemory:    100000,
		MaxBodyBytes:         1 << 20,
		MaxBatch:             1000,
		ShutdownTimeout:      10 * time.Second,
		LogLevel:             "info",
		LogFormat:            "text",
	}
}

// ErrUnsupportedMode is returned for deployment shapes this build does not
// serve yet.
var ErrUnsupportedMode = errors.New("server: deployment mode not available in this build")

// Validate reports the first invalid setting.
func (c *Config) Validate() error {
	if _, err := engine.ParseDurability(c.Durability); err != nil || c.Durability == "" {
		return fmt.Errorf("server: --durability must be sync or async, not %q", c.Durability)
	}
	if c.HTTP == "" {
		return errors.New("server: --http is empty")
	}
	if (c.Redis == "") != (c.Postgres == "") {
		return errors.New("server: tiered mode needs both --redis and --postgres")
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
	if c.FlushInterval <= 0 || c.IdempotencyRetention <= 0 || c.IdempotencyMemory <= 0 || c.MaxBodyBytes <= 0 || c.MaxBatch <= 0 {
		return errors.New("server: durations and limits must be positive")
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
	str(&c.Durability, "durability", "default acknowledgement mode: sync or async")
	str(&c.NodeID, "node-id", "node name")
	str(&c.Gossip, "gossip", "gossip bind address (cluster mode)")
	str(&c.Join, "join", "gossip addresses of nodes to join, comma-separated (cluster mode)")
	str(&c.Redis, "redis", "Redis URL (tiered mode)")
	str(&c.Postgres, "postgres", "PostgreSQL DSN (tiered mode)")
	dur(&c.SnapshotInterval, "snapshot-interval", "tiered mode: take a PostgreSQL snapshot at this period (0: on demand only)")
	str(&c.AuditNamespaces, "audit-namespaces", `tiered mode: namespaces whose changes go to the audit log, comma-separated ("*": all)`)
	dur(&c.FlushInterval, "flush-interval", "async flush period")
	dur(&c.IdempotencyRetention, "idempotency-retention", "how long idempotency keys are remembered")
	fs.IntVar(&c.IdempotencyMemory, "idempotency-memory", envInt("idempotency-memory", c.IdempotencyMemory), "idempotency records kept in memory (older ones are read from disk)")
	fs.Int64Var(&c.MaxBodyBytes, "max-body", int64(envInt("max-body", int(c.MaxBodyBytes))), "largest HTTP request body in bytes")
	fs.IntVar(&c.MaxBatch, "max-batch", envInt("max-batch", c.MaxBatch), "most ops in one batch")
	fs.BoolVar(&c.AllowFlush, "allow-flushall", envBool("allow-flushall", c.AllowFlush), "allow RESP FLUSHALL/FLUSHDB")
	fs.BoolVar(&c.Pprof, "pprof", envBool("pprof", c.Pprof), "serve /debug/pprof on the HTTP address")
	dur(&c.ShutdownTimeout, "shutdown-timeout", "grace period for in-flight requests on shutdown")
	str(&c.LogLevel, "log-level", "debug, info, warn or error")
	str(&c.LogFormat, "log-format", "text or json")
	// security: auth
	str(&c.Auth, "auth", "tokens file (YAML, docs/security.md); SIGHUP reloads it")
	fs.BoolVar(&c.Insecure, "insecure", envBool("insecure", c.Insecure), "serve a non-loopback address without --auth")
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
