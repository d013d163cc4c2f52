package server

import (
	"errors"
	"flag"
	"testing"
	"time"
)

func TestFlagsBeatEnvironmentBeatsDefaults(t *testing.T) {
	t.Setenv("COUNTERD_HTTP", "127.0.0.1:9999")
	t.Setenv("COUNTERD_DURABILITY", "sync")
	t.Setenv("COUNTERD_FLUSH_INTERVAL", "250ms")
	t.Setenv("COUNTERD_ALLOW_FLUSHALL", "yes")
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("counterd", flag.ContinueOnError)
	cfg.BindFlags(fs)
	if err := fs.Parse([]string{"--durability", "async"}); err != nil {
		t.Fatal(err)
	}
	if err := cfg.EnvErr(); err != nil {
		t.Fatal(err)
	}
	if cfg.HTTP != "127.0.0.1:9999" || cfg.Durability != "async" || cfg.FlushInterval != 250*time.Millisecond || !cfg.AllowFlush {
		t.Fatalf("config: %+v", cfg)
	}
	if cfg.Data != "./data" || cfg.RESP != "127.0.0.1:6380" {
		t.Fatalf("defaults lost: %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestBadEnvironmentIsReported(t *testing.T) {
	t.Setenv("COUNTERD_FLUSH_INTERVAL", "soon")
	cfg := DefaultConfig()
	cfg.BindFlags(flag.NewFlagSet("counterd", flag.ContinueOnError))
	if cfg.EnvErr() == nil {
		t.Fatal("COUNTERD_FLUSH_INTERVAL=soon accepted")
	}
}

func TestValidate(t *testing.T) {
	for name, mod := range map[string]func(*Config){
		"durability": func(c *Config) { c.Durability = "maybe" },
		"no http":    func(c *Config) { c.HTTP = "" },
		"log level":  func(c *Config) { c.LogLevel = "loud" },
		"flush":      func(c *Config) { c.FlushInterval = 0 },
		"redis only": func(c *Config) { c.Redis = "redis://127.0.0.1:6379" },
		"snapshots":  func(c *Config) { c.SnapshotInterval = -time.Second },
		// regions
		"bad region":           func(c *Config) { c.Region = "eu west" },
		"peers without region": func(c *Config) { c.PeerRegions = "us=127.0.0.1:9090" },
		"peer is self":         func(c *Config) { c.Region = "eu"; c.PeerRegions = "eu=127.0.0.1:9090" },
		"peer without port":    func(c *Config) { c.Region = "eu"; c.PeerRegions = "us=host" },
		// security: hardening
		"pprof without admin": func(c *Config) { c.Pprof = true; c.Admin = "" },
		"admin on the API":    func(c *Config) { c.Admin = c.HTTP },
		"negative body time":  func(c *Config) { c.HTTPReadBodyTimeout = -time.Second },
		"max conns -2":        func(c *Config) { c.HTTPMaxConns = -2 },
		"zero max args":       func(c *Config) { c.RESPMaxArgs = 0 },
		"bulk over command":   func(c *Config) { c.RESPMaxBulk = c.RESPMaxCommand + 1 },
		"command over budget": func(c *Config) { c.RESPMaxCommand = c.RESPQueryBufferTotal + 1 },
		"negative queue":      func(c *Config) { c.MaxQueue = -3 },
		"busy conns -2":       func(c *Config) { c.MaxBusyConnsPerClient = -2 },
		"negative coalesce":   func(c *Config) { c.RESPCoalesce = -time.Microsecond },
		"coalesce over 1ms":   func(c *Config) { c.RESPCoalesce = 2 * time.Millisecond },
	} {
		cfg := DefaultConfig()
		mod(&cfg)
		if cfg.Validate() == nil {
			t.Errorf("%s: invalid config accepted", name)
		}
	}
	for name, mod := range map[string]func(*Config){
		"join+tiered": func(c *Config) { c.Join = "10.0.0.2:7946"; c.Redis = "redis://x"; c.Postgres = "postgres://x" },
	} {
		cfg := DefaultConfig()
		mod(&cfg)
		if err := cfg.Validate(); !errors.Is(err, ErrUnsupportedMode) {
			t.Errorf("%s: %v, want ErrUnsupportedMode", name, err)
		}
	}
}

// TestValidateClusterRegion: a cluster node (--join) may replicate to
// peer regions, naming several gateways of one region.
func TestValidateClusterRegion(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Region, cfg.GRPC, cfg.Join = "eu", "127.0.0.1:0", "10.0.0.2:7946"
	cfg.PeerRegions = "us=10.1.0.1:9090,us=10.1.0.2:9090,ap=10.2.0.1:9090"
	cfg.Insecure = true // links beyond loopback without --peer-ca (TestProtectedModePeerLinks)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestValidateTieredRegion: a tiered node (--redis, --postgres) may
// replicate to peer regions.
func TestValidateTieredRegion(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Region, cfg.GRPC = "eu", "127.0.0.1:0"
	cfg.Redis, cfg.Postgres = "redis://127.0.0.1:1", "postgres://127.0.0.1:1/x"
	cfg.PeerRegions = "us=127.0.0.1:9090,us=127.0.0.1:9091"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestConnCap(t *testing.T) {
	if got := connCap(50); got != 50 {
		t.Errorf("connCap(50) = %d", got)
	}
	if got := connCap(-1); got < 1<<30 {
		t.Errorf("connCap(-1) = %d, want unlimited", got)
	}
	if got := connCap(0); got < 64 || got > 10000 {
		t.Errorf("connCap(0) = %d, want 64..10000", got)
	}
}
