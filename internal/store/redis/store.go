// Package redisstore is counterd's Redis tier: counters kept in a real
// Redis server or Redis Cluster with the seeds' key layout.
//
// Each counter id has a meta hash counter:{id}:meta (kind, version,
// updated_at and the kind's configuration) and its value keys:
// counter:{id} (a string for counter, a hash for hash, an HLL for hll),
// counter:{id}:shard:<n> (sharded) and counter:{id}:w:<bucket start ms>
// (window buckets, each expiring after span+granularity). The {id} hash
// tag keeps all of them in one Cluster slot, so every operation is one
// Lua script (EVALSHA, falling back to EVAL after NOSCRIPT) that checks
// the kind, applies the change and bumps the version atomically. On Redis
// Cluster the few operations over several ids (PFCOUNT and PFMERGE of
// several counters, FlushCounters) read or scan per slot and master
// instead; see docs/redis-tier.md, "Redis Cluster".
//
// With Options.Loader set the store is a read-through cache over a
// slower tier: a miss calls the loader and caches its record for
// Options.CacheTTL with a script that writes only while the counter is
// still absent. See docs/redis-tier.md.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	neturl "net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/shed"
	"github.com/redis/go-redis/v9"
)

// Sentinel errors; every error the store returns wraps at most one.
var (
	ErrInvalidArgument = errors.New("redisstore: invalid argument")
	// ErrTooLate: a window add's event time is older than the window.
	ErrTooLate         = errors.New("redisstore: event time too late")
	ErrWrongKind       = errors.New("redisstore: operation against a counter of the wrong kind")
	ErrOverflow        = errors.New("redisstore: increment or decrement would overflow")
	ErrVersionConflict = errors.New("redisstore: version conflict")
	ErrUnavailable     = errors.New("redisstore: redis unavailable")
	ErrClosed          = errors.New("redisstore: closed")
	// ErrNotFloat: a float increment Redis's INCRBYFLOAT does not parse.
	ErrNotFloat = errors.New("redisstore: value is not a valid float")
	// ErrFloatRange: a float increment that would make NaN or Infinity.
	ErrFloatRange = errors.New("redisstore: increment would produce NaN or Infinity")
	// ErrNotInteger: an integer add to a float whose value is not one.
	ErrNotInteger = errors.New("redisstore: value is not an integer")
	// ErrFieldLimit: a hash write that would pass HAddMax's or HSetMax's
	// maxFields (the reply's detail is the limit).
	ErrFieldLimit = errors.New("redisstore: too many hash fields")
)

// Kind is a counter kind, spelled as contract.Kind.String spells it.
type Kind string

// The kinds the Redis tier stores. KindAuto, for Add, means the existing
// additive kind, or KindCounter for a new counter.
const (
	KindAuto    Kind = ""
	KindCounter Kind = "counter"
	KindSharded Kind = "sharded"
	KindWindow  Kind = "window"
	KindHash    Kind = "hash"
	KindHLL     Kind = "hll"
	// KindPN is a pn counter stored like a plain counter (one value): a
	// tiered node has no replicas of its own to keep apart.
	KindPN Kind = "pn"
	// KindFloat is a float counter: the value key holds the decimal text
	// Redis's INCRBYFLOAT writes, and only INCRBYFLOAT changes it.
	KindFloat Kind = "float"
)

// Options configure a Store. The zero value of each field means its default.
type Options struct {
	PoolSize     int           // connections; default 10 per GOMAXPROCS (go-redis)
	DialTimeout  time.Duration // default 1s
	ReadTimeout  time.Duration // default 500ms
	WriteTimeout time.Duration // default 500ms
	PoolTimeout  time.Duration // wait for a free connection; default 1s

	// MaxRetries is how often a failed call is retried; default 3, -1 for
	// none. Reads retry on any connection error; writes only when no
	// connection could be made, so a retry never applies a write twice.
	MaxRetries int
	// Backoff between retries doubles from MinRetryBackoff (default 8ms)
	// up to MaxRetryBackoff (default 256ms).
	MinRetryBackoff, MaxRetryBackoff time.Duration

	// DefaultShards is the shard count of a new sharded counter; default 8.
	DefaultShards int
	// DefaultWindow is the spec of a new window counter; default a
	// sliding 60s window of 1s buckets.
	DefaultWindow counter.WindowSpec

	// Loader, when set, is called on a miss (by reads, and by writes
	// before they create a counter); a found record is cached for
	// CacheTTL. Counter, sharded, hash and hll records are cached; other
	// kinds are returned but not cached.
	Loader func(ctx context.Context, id string) (Record, bool, error)
	// CacheTTL is the time to live of a loaded record; default 60s.
	CacheTTL time.Duration
	// TombstoneTTL is how long a deleted counter's tombstone stays
	// (counter:{id}:dead: reads answer missing, no read-through, and a
	// write creates the next life); default 1 h. It must outlast the
	// time the delete takes to reach the Loader's tier.
	TombstoneTTL time.Duration
	// BeforeCreate, when set with a Loader, is called by a write after
	// the Loader found nothing, right before the script that may create
	// the counter; an error fails the write with nothing changed. (A
	// tiered node reserves a quota's key there.)
	BeforeCreate func(ctx context.Context, id string) error

	// Now is the clock for updated_at and window buckets; default time.Now.
	Now func() time.Time
	// Observe, when set, is called after every operation (metrics hook).
	Observe func(op string, d time.Duration, err error)

	// Pipeline, when > 0, sends concurrent Adds to Redis together: up to
	// Pipeline add scripts in one round trip (one pipeline of EVALSHAs)
	// on each of PipelineConns connections (default 4). Each Add is still
	// one atomic script; only the round trips are shared (on Redis
	// Cluster, one per master the batch touches). Default 0: off.
	Pipeline      int
	PipelineConns int

	// Hooks are added to the client (the server's tracing.RedisHook);
	// default none.
	Hooks []redis.Hook

	// LockWait bounds how long a write waits for a counter's script lock
	// held by another holder (locks.go) when its context has no earlier
	// deadline; then it fails with ErrLocked. Default DefaultLockWait.
	LockWait time.Duration
}

func (o *Options) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&o.DialTimeout, time.Second)
	def(&o.ReadTimeout, 500*time.Millisecond)
	def(&o.WriteTimeout, 500*time.Millisecond)
	def(&o.PoolTimeout, time.Second)
	def(&o.MinRetryBackoff, 8*time.Millisecond)
	def(&o.MaxRetryBackoff, 256*time.Millisecond)
	def(&o.CacheTTL, 60*time.Second)
	def(&o.TombstoneTTL, time.Hour)
	def(&o.LockWait, DefaultLockWait)
	if o.MaxRetries == 0 {
		o.MaxRetries = 3
	} else if o.MaxRetries < 0 {
		o.MaxRetries = 0
	}
	if o.DefaultShards == 0 {
		o.DefaultShards = 8
	}
	if o.DefaultWindow == (counter.WindowSpec{}) {
		o.DefaultWindow = counter.WindowSpec{Granularity: time.Second, Span: time.Minute}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Validate reports an invalid option (after defaults are applied).
func (o Options) Validate() error {
	o.defaults()
	if o.DefaultShards < 1 || o.DefaultShards > 1024 {
		return fmt.Errorf("%w: DefaultShards %d not in 1..1024", ErrInvalidArgument, o.DefaultShards)
	}
	if err := o.DefaultWindow.Validate(); err != nil {
		return fmt.Errorf("%w: DefaultWindow: %v", ErrInvalidArgument, err)
	}
	return nil
}

// Record is one counter as stored.
type Record struct {
	Kind      Kind
	Value     int64 // counter value, sharded or window sum, hll estimate
	Version   uint64
	UpdatedAt time.Time
	// TTL is the counter's own remaining time to live (0: none). The
	// Redis TTL of a cached record (CacheTTL) is not reported. In a
	// Loader's record it is the TTL to keep.
	TTL time.Duration

	Shards  []int64            // sharded: every shard
	Fields  []counter.Field    // hash, sorted by name
	Window  counter.WindowSpec // window
	Buckets []counter.Bucket   // window: non-empty buckets inside the window, oldest first
	HLL     []byte             // hll, only in a Loader's record: a raw Redis HLL string
	Float   string             // float: the value's decimal text
	// Life is the counter's life (docs/redis-tier.md, "Deletes and
	// lives"): set by a Loader. A Loader that finds no counter returns in
	// it the life the next tier recorded as deleted (0: none), so a
	// tombstone keeps the life going.
	Life uint64
}

// AddOptions qualify Add.
type AddOptions struct {
	Shards int                // creating a sharded counter; 0: DefaultShards
	Shard  int                // sharded: the shard to add to when FixedShard
	Fixed  bool               // add to Shard instead of a random shard
	Window counter.WindowSpec // creating a window counter; zero: DefaultWindow
	// At, for a window counter: the event time (unix ns; 0: now) whose
	// bucket takes the add; older than the window is ErrTooLate.
	At int64
}

// Store is the Redis tier. It is safe for concurrent use; call Close.
type Store struct {
	rdb     Client               // *redis.Client, or *redis.ClusterClient on Redis Cluster
	cluster *redis.ClusterClient // nil on a single Redis
	opts    Options

	closeOnce sync.Once
	closeErr  error

	pipe    chan *pipeReq // Add requests for the pipeliners (Options.Pipeline)
	stopped chan struct{} // closed by Close

	lockUsers atomic.Int64 // Locks not yet unlocked (locks.go)
}

// Open connects to the Redis at url, checks it answers, and loads the
// scripts. url is redis://[user:pass@]host:port/db (rediss:// for TLS) or
// host:port for a single Redis. A Redis Cluster is named in go-redis's
// cluster URL form, redis://host:port?addr=host:port&addr=host:port (any
// addr parameter means Cluster), or by one seed node with cluster=true
// (redis://host:port?cluster=true): the client discovers the other nodes
// and follows MOVED and ASK redirections. The error wraps ErrUnavailable
// when Redis does not answer.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.defaults()
	s := &Store{opts: opts, stopped: make(chan struct{})}
	co, ro, err := ParseURL(url)
	if err != nil {
		return nil, err
	}
	var addr string
	if co != nil {
		s.setClusterOptions(co)
		s.cluster = redis.NewClusterClient(co)
		for _, h := range opts.Hooks {
			s.cluster.AddHook(h)
		}
		s.rdb, addr = s.cluster, strings.Join(co.Addrs, ",")
	} else {
		s.setOptions(ro)
		c := redis.NewClient(ro)
		for _, h := range opts.Hooks {
			c.AddHook(h)
		}
		s.rdb, addr = c, ro.Addr
	}
	s.startPipeline()
	err = s.do(ctx, "open", false, func(ctx context.Context) error {
		for _, sc := range allScripts {
			if err := sc.Load(ctx, s.rdb).Err(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		s.rdb.Close()
		return nil, fmt.Errorf("open %s: %w", addr, err)
	}
	return s, nil
}

// ParseURL reads a Redis URL as Open does: exactly one of the results is
// non-nil, cluster options for a Redis Cluster URL. The error wraps
// ErrInvalidArgument.
func ParseURL(url string) (*redis.ClusterOptions, *redis.Options, error) {
	if !strings.Contains(url, "://") {
		url = "redis://" + url
	}
	u, err := neturl.Parse(url)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: redis url: %v", ErrInvalidArgument, err)
	}
	q := u.Query()
	isCluster := q.Has("addr")
	if q.Has("cluster") {
		v := q.Get("cluster")
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: redis url: cluster=%q is not a boolean", ErrInvalidArgument, v)
		}
		isCluster = isCluster || b
		q.Del("cluster")
		u.RawQuery = q.Encode()
	}
	if !isCluster {
		ro, err := redis.ParseURL(u.String())
		if err != nil {
			return nil, nil, fmt.Errorf("%w: redis url: %v", ErrInvalidArgument, err)
		}
		return nil, ro, nil
	}
	if db := strings.Trim(u.Path, "/"); db != "" && db != "0" {
		return nil, nil, fmt.Errorf("%w: redis url: Redis Cluster has only database 0, not %q", ErrInvalidArgument, db)
	}
	u.Path = ""
	co, err := redis.ParseClusterURL(u.String())
	if err != nil {
		return nil, nil, fmt.Errorf("%w: redis cluster url: %v", ErrInvalidArgument, err)
	}
	if co.ReadOnly || co.RouteByLatency || co.RouteRandomly {
		// Replicas lag: a read there could miss an acknowledged write.
		return nil, nil, fmt.Errorf("%w: redis cluster url: read_only, route_by_latency and route_randomly are not supported (reads go to masters)", ErrInvalidArgument)
	}
	return co, nil, nil
}

// setOptions applies the Store's options to a single Redis client.
func (s *Store) setOptions(ro *redis.Options) {
	if s.opts.PoolSize > 0 {
		ro.PoolSize = s.opts.PoolSize
	}
	ro.DialTimeout = s.opts.DialTimeout
	ro.ReadTimeout = s.opts.ReadTimeout
	ro.WriteTimeout = s.opts.WriteTimeout
	ro.PoolTimeout = s.opts.PoolTimeout
	ro.MaxRetries = -1 // Store.do retries, knowing which calls are safe to repeat
	ro.DialerRetries = 1
	ro.DisableIdentity = true
	ro.ContextTimeoutEnabled = true
}

// setClusterOptions applies the Store's options to a cluster client. Its
// nodes do not retry (MaxRetries -1); the cluster client itself follows
// MOVED/ASK and retries refused commands (TRYAGAIN, CLUSTERDOWN, ...) up
// to MaxRedirects times, but never a write whose outcome is unknown (see
// once).
func (s *Store) setClusterOptions(co *redis.ClusterOptions) {
	if s.opts.PoolSize > 0 {
		co.PoolSize = s.opts.PoolSize
	}
	co.DialTimeout = s.opts.DialTimeout
	co.ReadTimeout = s.opts.ReadTimeout
	co.WriteTimeout = s.opts.WriteTimeout
	co.PoolTimeout = s.opts.PoolTimeout
	co.MaxRetries = -1
	co.MinRetryBackoff, co.MaxRetryBackoff = s.opts.MinRetryBackoff, s.opts.MaxRetryBackoff
	co.DialerRetries = 1
	co.DisableIdentity = true
	co.ContextTimeoutEnabled = true
}

// Cluster reports whether the store talks to a Redis Cluster.
func (s *Store) Cluster() bool { return s.cluster != nil }

// forEachMaster calls fn with a client of every master: the one server of
// a single Redis, each master of a cluster (concurrently).
func (s *Store) forEachMaster(ctx context.Context, fn func(ctx context.Context, c *redis.Client) error) error {
	if s.cluster != nil {
		return s.cluster.ForEachMaster(ctx, fn)
	}
	return fn(ctx, s.rdb.(*redis.Client))
}

// Close closes the connection pool. It is safe to call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.stopped)
		s.closeErr = s.rdb.Close()
	})
	return s.closeErr
}

// Ready reports whether Redis answers PING (for /readyz).
func (s *Store) Ready(ctx context.Context) error {
	return s.do(ctx, "ready", false, func(ctx context.Context) error { return s.rdb.Ping(ctx).Err() })
}

// Client is the underlying go-redis client (a *redis.ClusterClient on
// Redis Cluster), for single-key commands, tests and diagnostics.
func (s *Store) Client() Client { return s.rdb }

// Key names. Every key of one id carries the hash tag {id}.
func ValueKey(id string) string        { return "counter:{" + id + "}" }
func MetaKey(id string) string         { return ValueKey(id) + ":meta" }
func ShardKey(id string, n int) string { return ValueKey(id) + ":shard:" + strconv.Itoa(n) }
func BucketKey(id string, start int64) string {
	return ValueKey(id) + ":w:" + strconv.FormatInt(start, 10)
}

// checkID rejects ids the hash tag cannot carry: an id starting with '}'
// would give counter:{}... keys, which Cluster hashes whole.
func checkID(id string) error {
	if id == "" || len(id) > 255 || id[0] == '}' {
		return fmt.Errorf("%w: id %q (1..255 bytes, not starting with '}')", ErrInvalidArgument, id)
	}
	return nil
}

func keys(id string) []string { return []string{ValueKey(id), MetaKey(id)} }

func (s *Store) nowMS() int64 { return s.opts.Now().UnixMilli() }

// Add adds delta to an additive counter (counter, sharded, window) and
// returns its new value (the sum for sharded and window) and version.
func (s *Store) Add(ctx context.Context, id string, kind Kind, delta int64, o AddOptions) (int64, uint64, error) {
	r, err := s.AddResult(ctx, id, kind, delta, o)
	return r.Value, r.Version, err
}

// AddReply is what AddResult returns.
type AddReply struct {
	Kind    Kind // the counter's kind (KindAuto resolved)
	Value   int64
	Version uint64
	Shard   int // sharded: the shard added to; -1 otherwise
	// FromFloat: the add made a float whose value was an integer a
	// counter again (Redis INCR after INCRBYFLOAT); Value is absolute.
	FromFloat bool
}

// AddResult is Add that also reports the counter's kind and, for a
// sharded counter, the shard the delta went to.
func (s *Store) AddResult(ctx context.Context, id string, kind Kind, delta int64, o AddOptions) (AddReply, error) {
	return s.addResult(ctx, id, kind, delta, o, nil, nil)
}

// addResult is AddResult, guarded by m when it is not nil (marked.go):
// *mr says what the script did then.
func (s *Store) addResult(ctx context.Context, id string, kind Kind, delta int64, o AddOptions, m *Marks, mr *MarkedReply) (AddReply, error) {
	return s.addResultJ(ctx, id, kind, delta, o, m, mr, nil, nil)
}

// addResultJ is addResult, journaled in j when it is not nil (journal.go):
// *jd says whether it was.
func (s *Store) addResultJ(ctx context.Context, id string, kind Kind, delta int64, o AddOptions, m *Marks, mr *MarkedReply, j *Journal, jd *bool) (AddReply, error) {
	if err := checkID(id); err != nil {
		return AddReply{}, err
	}
	switch kind {
	case KindAuto, KindCounter, KindSharded, KindWindow, KindPN:
	default:
		return AddReply{}, fmt.Errorf("%w: Add does not apply to kind %q", ErrInvalidArgument, kind)
	}
	shards := o.Shards
	if shards == 0 {
		shards = s.opts.DefaultShards
	}
	shard := -1
	if o.Fixed {
		shard = o.Shard
		if shard < 0 {
			return AddReply{}, fmt.Errorf("%w: shard %d", ErrInvalidArgument, shard)
		}
	}
	w := o.Window
	if w == (counter.WindowSpec{}) {
		w = s.opts.DefaultWindow
	}
	if err := w.Validate(); err != nil {
		return AddReply{}, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	fixed := "0"
	if w.Fixed {
		fixed = "1"
	}
	var out AddReply
	err := s.write(ctx, "add", id, func(ctx context.Context, mayCreate string) ([]any, error) {
		args := []any{string(kind), delta, s.nowMS(), mayCreate, shards,
			rand.Uint32(), shard, w.Granularity.Milliseconds(), w.Span.Milliseconds(), fixed, o.At / int64(time.Millisecond)}
		if m != nil {
			return s.runMarked(ctx, markedAddScript, id, m, args...)
		}
		if j != nil {
			return s.runAddScript(ctx, journaledAddScript, journaledKeys(id, j), append(args, j.Head, j.Tail)...)
		}
		return s.runAdd(ctx, id, args...)
	}, func(r []any) (err error) {
		if m != nil {
			var done bool
			if *mr, done, err = markedReply(r); done || err != nil {
				return err
			}
		}
		if j != nil {
			*jd = journaled(r)
		}
		out.Kind = Kind(str(r[1]))
		v, err1 := toInt(r[2])
		sh, err2 := toInt(r[3])
		if err = errors.Join(err1, err2); err != nil {
			return err
		}
		out.Version, out.Shard = uint64(v), int(sh)
		if out.Kind == KindCounter || out.Kind == KindPN {
			out.FromFloat = len(r) > 5 && str(r[5]) == "float"
			out.Value, err = toInt(r[4])
			return err
		}
		out.Value, _, err = sum(r[4:])
		return err
	})
	return out, err
}

// AddFloat adds the increment incr (text, parsed by Redis's INCRBYFLOAT)
// to the float counter id, creating it, or converting a counter (as Redis
// does with a string holding an integer). It returns the new text and
// version, and prev: the counter's integer value when it was converted
// (0 otherwise), for a write-behind tier that must zero it.
func (s *Store) AddFloat(ctx context.Context, id, incr string) (text string, ver uint64, prev int64, converted bool, err error) {
	if err := checkID(id); err != nil {
		return "", 0, 0, false, err
	}
	err = s.write(ctx, "addfloat", id, func(ctx context.Context, mayCreate string) ([]any, error) {
		return s.run(ctx, addFloatScript, id, incr, s.nowMS(), mayCreate)
	}, func(r []any) error {
		v, err1 := toInt(r[1])
		p, err2 := toInt(r[3])
		text, ver, prev, converted = str(r[2]), uint64(v), p, str(r[4]) == "1"
		return errors.Join(err1, err2)
	})
	return text, ver, prev, converted, err
}

// Get reads a counter. found is false when neither Redis nor the Loader
// has it.
func (s *Store) Get(ctx context.Context, id string) (Record, bool, error) {
	if err := checkID(id); err != nil {
		return Record{}, false, err
	}
	start := time.Now()
	rec, found, err := s.get(ctx, id)
	s.observe("get", start, err)
	return rec, found, err
}

func (s *Store) get(ctx context.Context, id string) (Record, bool, error) {
	rec, found, dead, err := s.getCached(ctx, id)
	if err != nil || found || dead || s.opts.Loader == nil {
		return rec, found, err
	}
	loaded, ok, err := s.load(ctx, id)
	if err != nil || !ok {
		return Record{}, false, err
	}
	if loaded.cacheable() {
		// Read back what Redis holds: a write may have landed since the
		// fill, or a delete (its tombstone refuses the fill).
		if rec, found, dead, err = s.getCached(ctx, id); err != nil || found || dead {
			return rec, found, err
		}
	}
	return loaded, true, nil
}

// getCached reads id from Redis; dead reports a tombstone (deleted: not
// to be read through).
func (s *Store) getCached(ctx context.Context, id string) (rec Record, found, dead bool, err error) {
	var r []any
	err = s.do(ctx, "get", false, func(ctx context.Context) (err error) {
		r, err = s.run(ctx, getScript, id, s.nowMS())
		return err
	})
	if err != nil {
		return Record{}, false, false, err
	}
	switch str(r[0]) {
	case "MISS":
		return Record{}, false, false, nil
	case "DEAD":
		return Record{}, false, true, nil
	}
	rec, err = parseRecord(r)
	return rec, err == nil, false, err
}

func parseRecord(r []any) (Record, error) {
	if len(r) < 5 {
		return Record{}, fmt.Errorf("redisstore: short reply %v", r)
	}
	var rec Record
	rec.Kind = Kind(str(r[1]))
	ver, err1 := toInt(r[2])
	upd, err2 := toInt(r[3])
	pttl, err3 := toInt(r[4])
	err := errors.Join(err1, err2, err3)
	if err != nil {
		return rec, err
	}
	rec.Version, rec.UpdatedAt = uint64(ver), time.UnixMilli(upd)
	if pttl > 0 {
		rec.TTL = time.Duration(pttl) * time.Millisecond
	}
	p := r[5:]
	switch rec.Kind {
	case KindCounter, KindPN, KindHLL:
		if len(p) != 1 {
			return rec, fmt.Errorf("redisstore: bad %s reply %v", rec.Kind, r)
		}
		rec.Value, err = toInt(p[0])
	case KindFloat:
		if len(p) != 1 {
			return rec, fmt.Errorf("redisstore: bad %s reply %v", rec.Kind, r)
		}
		rec.Float = str(p[0])
	case KindSharded:
		rec.Value, rec.Shards, err = sum(p)
	case KindWindow:
		if len(p) < 3 {
			return rec, fmt.Errorf("redisstore: bad window reply %v", r)
		}
		g, _ := toInt(p[0])
		span, _ := toInt(p[1])
		rec.Window = counter.WindowSpec{Granularity: time.Duration(g) * time.Millisecond,
			Span: time.Duration(span) * time.Millisecond, Fixed: str(p[2]) == "1"}
		// A stored spec is checked like a requested one, so a window
		// written before (or around) today's bounds is refused, not read.
		if err := rec.Window.Validate(); err != nil {
			return rec, fmt.Errorf("redisstore: stored window: %w", err)
		}
		for i := 3; i+1 < len(p); i += 2 {
			start, e1 := toInt(p[i])
			n, e2 := toInt(p[i+1])
			if err = errors.Join(e1, e2); err != nil {
				break
			}
			if rec.Value, err = add64(rec.Value, n); err != nil {
				break
			}
			rec.Buckets = append(rec.Buckets, counter.Bucket{Start: time.UnixMilli(start).UTC(), Count: n})
		}
	case KindHash:
		for i := 0; i+1 < len(p); i += 2 {
			v, e := toInt(p[i+1])
			if e != nil {
				return rec, e
			}
			rec.Fields = append(rec.Fields, counter.Field{Name: str(p[i]), Value: v})
		}
		sort.Slice(rec.Fields, func(i, j int) bool { return rec.Fields[i].Name < rec.Fields[j].Name })
	default:
		return rec, fmt.Errorf("redisstore: unknown kind %q in meta", rec.Kind)
	}
	return rec, err
}

func (r Record) cacheable() bool {
	switch r.Kind {
	case KindCounter, KindPN, KindSharded, KindHash, KindFloat:
		return true
	case KindHLL:
		return len(r.HLL) > 0
	}
	return false
}

// load calls the Loader and caches what it found. It reports whether the
// loader found the counter.
func (s *Store) load(ctx context.Context, id string) (Record, bool, error) {
	rec, ok, err := s.opts.Loader(ctx, id)
	if err != nil {
		return Record{}, false, fmt.Errorf("redisstore: load %q: %w", id, err)
	}
	if !ok && rec.Life > 0 { // deleted in the Loader's tier: keep its life
		err = s.do(ctx, "tombstone", false, func(ctx context.Context) error {
			return s.eval(ctx, tombstoneScript, keys(id), rec.Life, s.opts.TombstoneTTL.Milliseconds()).Err()
		})
		return Record{}, false, err
	}
	if !ok || !rec.cacheable() {
		return rec, ok, nil
	}
	ttl, exp := s.opts.CacheTTL, int64(0)
	if rec.TTL > 0 {
		exp = s.nowMS() + max(rec.TTL.Milliseconds(), 1)
		ttl = min(ttl, rec.TTL)
	}
	args := []any{string(rec.Kind), rec.Version, rec.UpdatedAt.UnixMilli(), max(ttl.Milliseconds(), 1), exp, max(rec.Life, 1)}
	switch rec.Kind {
	case KindCounter, KindPN:
		args = append(args, rec.Value)
	case KindFloat:
		args = append(args, rec.Float)
	case KindSharded:
		if len(rec.Shards) == 0 {
			args = append(args, rec.Value)
		}
		for _, v := range rec.Shards {
			args = append(args, v)
		}
	case KindHash:
		for _, f := range rec.Fields {
			args = append(args, f.Name, f.Value)
		}
	case KindHLL:
		args = append(args, rec.HLL)
	}
	err = s.do(ctx, "fill", false, func(ctx context.Context) error {
		return s.eval(ctx, fillScript, keys(id), args...).Err()
	})
	return rec, true, err
}

// write runs a mutating script. With a Loader, the first attempt may not
// create the counter: on MISS the loader's record is cached, then the
// script runs again allowed to create.
//
// Once sent, a script's reply is awaited even if ctx is cancelled
// (bounded by the read timeout): a caller that gave up must not leave a
// change applied in Redis that it then fails to hand to a write-behind
// tier. Only a Redis that does not answer leaves the outcome unknown.
func (s *Store) write(ctx context.Context, op, id string, run func(ctx context.Context, mayCreate string) ([]any, error), parse func([]any) error) error {
	orig := ctx // its deadline bounds a wait for a script lock (doWrite)
	ctx = context.WithoutCancel(ctx)
	start := time.Now()
	mayCreate := "1"
	if s.opts.Loader != nil {
		mayCreate = "0"
	}
	var r []any
	err := s.doWrite(orig, ctx, op, func(ctx context.Context) (err error) {
		r, err = run(ctx, mayCreate)
		return err
	})
	life := stripLife(r)
	if err == nil && str(r[0]) == "MISS" {
		var found bool
		if len(r) < 2 || str(r[1]) != "DEAD" { // a tombstone: deleted, not read through
			_, found, err = s.load(ctx, id)
		}
		if err == nil && !found && s.opts.BeforeCreate != nil {
			err = s.opts.BeforeCreate(ctx, id)
		}
		if err == nil {
			err = s.doWrite(orig, ctx, op, func(ctx context.Context) (err error) {
				r, err = run(ctx, "1")
				return err
			})
			life = stripLife(r)
		}
	}
	if err == nil {
		err = parse(r)
	}
	if p, ok := ctx.Value(lifeKey{}).(*uint64); ok && err == nil {
		*p = life
	}
	s.observe(op, start, err)
	return err
}

// Set sets a counter to value. With expected set the write applies only if
// the version is *expected (0: the counter must not exist), else it fails
// with ErrVersionConflict. ttl > 0 sets a time to live, 0 removes it.
func (s *Store) Set(ctx context.Context, id string, value int64, expected *uint64, ttl time.Duration) (uint64, error) {
	ver, _, err := s.SetPrev(ctx, id, value, expected, ttl)
	return ver, err
}

// SetPrev is Set that also returns the value before the write (0 for a
// new counter), so a caller can hand value-prev to a write-behind tier.
func (s *Store) SetPrev(ctx context.Context, id string, value int64, expected *uint64, ttl time.Duration) (uint64, int64, error) {
	ver, prev, _, err := s.SetPrevKind(ctx, id, value, expected, ttl)
	return ver, prev, err
}

// SetPrevKind is SetPrev that also reports whether the write replaced a
// float counter (Redis's SET over a string); prev is 0 then.
func (s *Store) SetPrevKind(ctx context.Context, id string, value int64, expected *uint64, ttl time.Duration) (ver uint64, prev int64, fromFloat bool, err error) {
	if err := checkID(id); err != nil {
		return 0, 0, false, err
	}
	check, exp := "0", uint64(0)
	if expected != nil {
		check, exp = "1", *expected
	}
	err = s.write(ctx, "set", id, func(ctx context.Context, mayCreate string) ([]any, error) {
		return s.run(ctx, setScript, id, value, check, exp, ttl.Milliseconds(), s.nowMS(), mayCreate)
	}, func(r []any) error {
		v, err1 := toInt(r[1])
		p, err2 := toInt(r[2])
		ver, prev, fromFloat = uint64(v), p, len(r) > 3 && str(r[3]) == "float"
		return errors.Join(err1, err2)
	})
	return ver, prev, fromFloat, err
}

// HAdd adds to several fields of a hash counter atomically: all or none
// (ErrOverflow leaves every field unchanged). It returns the new values
// of the fields, in the order given, and the new version.
func (s *Store) HAdd(ctx context.Context, id string, deltas []counter.FieldDelta) ([]counter.Field, uint64, error) {
	return s.HAddMax(ctx, id, deltas, 0)
}

// HAddMax is HAdd that fails with ErrFieldLimit, changing nothing, when
// the hash would have more than maxFields fields and the add makes new
// ones (0: no limit). The check is part of the script that adds.
func (s *Store) HAddMax(ctx context.Context, id string, deltas []counter.FieldDelta, maxFields int64) ([]counter.Field, uint64, error) {
	return s.hadd(ctx, id, deltas, maxFields, nil, nil)
}

// hadd is HAddMax, guarded by m when it is not nil (marked.go).
func (s *Store) hadd(ctx context.Context, id string, deltas []counter.FieldDelta, maxFields int64, m *Marks, mr *MarkedReply) ([]counter.Field, uint64, error) {
	return s.haddJ(ctx, id, deltas, maxFields, m, mr, nil, nil)
}

// haddJ is hadd, journaled in j when it is not nil (journal.go): *jd
// says whether it was.
func (s *Store) haddJ(ctx context.Context, id string, deltas []counter.FieldDelta, maxFields int64, m *Marks, mr *MarkedReply, j *Journal, jd *bool) ([]counter.Field, uint64, error) {
	if err := checkID(id); err != nil {
		return nil, 0, err
	}
	if len(deltas) == 0 {
		return nil, 0, fmt.Errorf("%w: no fields", ErrInvalidArgument)
	}
	var out []counter.Field
	var ver uint64
	err := s.write(ctx, "hadd", id, func(ctx context.Context, mayCreate string) ([]any, error) {
		args := make([]any, 0, 3+2*len(deltas))
		args = append(args, s.nowMS(), mayCreate, maxFields)
		for _, d := range deltas {
			args = append(args, d.Name, d.Delta)
		}
		if m != nil {
			return s.runMarked(ctx, markedHAddScript, id, m, args...)
		}
		if j != nil {
			return s.runJournaled(ctx, journaledHAddScript, id, j, args...)
		}
		return s.run(ctx, haddScript, id, args...)
	}, func(r []any) error {
		if m != nil {
			done, err := false, error(nil)
			if *mr, done, err = markedReply(r); done || err != nil {
				return err
			}
		}
		if j != nil {
			*jd = journaled(r)
		}
		v, err := toInt(r[1])
		ver = uint64(v)
		out = make([]counter.Field, len(deltas))
		for i, d := range deltas {
			n, e := toInt(r[2+i])
			out[i] = counter.Field{Name: d.Name, Value: n}
			err = errors.Join(err, e)
		}
		return err
	})
	return out, ver, err
}

// HSet sets fields of a hash counter like Redis HSET (with onlyAbsent,
// HSETNX: only the fields that do not exist), atomically. It returns how
// many fields it created, the version (unchanged when nothing was set)
// and, for a write-behind tier, the change of each field it set
// (new - old, wrapping like the int64 it stands for).
func (s *Store) HSet(ctx context.Context, id string, fields []counter.Field, onlyAbsent bool) (created int, ver uint64, deltas []counter.FieldDelta, err error) {
	return s.HSetMax(ctx, id, fields, onlyAbsent, 0)
}

// HSetMax is HSet with HAddMax's maxFields.
func (s *Store) HSetMax(ctx context.Context, id string, fields []counter.Field, onlyAbsent bool, maxFields int64) (created int, ver uint64, deltas []counter.FieldDelta, err error) {
	if err := checkID(id); err != nil {
		return 0, 0, nil, err
	}
	if len(fields) == 0 {
		return 0, 0, nil, fmt.Errorf("%w: no fields", ErrInvalidArgument)
	}
	nx := "0"
	if onlyAbsent {
		nx = "1"
	}
	err = s.write(ctx, "hset", id, func(ctx context.Context, mayCreate string) ([]any, error) {
		args := make([]any, 0, 4+2*len(fields))
		args = append(args, s.nowMS(), mayCreate, nx, maxFields)
		for _, f := range fields {
			args = append(args, f.Name, f.Value)
		}
		return s.run(ctx, hsetScript, id, args...)
	}, func(r []any) error {
		v, err1 := toInt(r[1])
		n, err2 := toInt(r[2])
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		ver, created, deltas = uint64(v), int(n), deltas[:0]
		for i, f := range fields {
			if 3+i >= len(r) || r[3+i] == nil {
				continue // skipped by nx (a Lua false is a nil reply)
			}
			var old int64
			if o := str(r[3+i]); o != "" {
				if old, err = toInt(o); err != nil {
					return err
				}
			}
			deltas = append(deltas, counter.FieldDelta{Name: f.Name, Delta: f.Value - old})
		}
		return nil
	})
	return created, ver, deltas, err
}

// HGetAll returns the fields of a hash counter sorted by name; none when
// it does not exist.
func (s *Store) HGetAll(ctx context.Context, id string) ([]counter.Field, error) {
	rec, found, err := s.Get(ctx, id)
	if err != nil || !found {
		return nil, err
	}
	if rec.Kind != KindHash {
		return nil, fmt.Errorf("%w: %q is a %s", ErrWrongKind, id, rec.Kind)
	}
	return rec.Fields, nil
}

// PFAdd adds items to an hll counter and reports whether its estimate
// may have changed.
func (s *Store) PFAdd(ctx context.Context, id string, items ...[]byte) (bool, error) {
	changed, _, err := s.PFAddVersion(ctx, id, items...)
	return changed, err
}

// PFAddVersion is PFAdd that also returns the counter's version after it.
func (s *Store) PFAddVersion(ctx context.Context, id string, items ...[]byte) (bool, uint64, error) {
	if err := checkID(id); err != nil {
		return false, 0, err
	}
	var changed bool
	var ver uint64
	err := s.write(ctx, "pfadd", id, func(ctx context.Context, mayCreate string) ([]any, error) {
		return s.run(ctx, pfaddScript, id, scriptArgs(s.nowMS(), mayCreate, items)...)
	}, func(r []any) error {
		c, err1 := toInt(r[1])
		v, err2 := toInt(r[2])
		changed, ver = c == 1, uint64(v)
		return errors.Join(err1, err2)
	})
	return changed, ver, err
}

// PFCount estimates the number of distinct items in the union of the hll
// counters ids (PFCOUNT of their keys). On Redis Cluster several ids live
// in several slots: their raw sketches are read, then counted together by
// one script (through a scratch key in the first id's slot).
func (s *Store) PFCount(ctx context.Context, ids ...string) (int64, error) {
	if len(ids) == 0 {
		return 0, fmt.Errorf("%w: no ids", ErrInvalidArgument)
	}
	ks := make([]string, len(ids))
	for i, id := range ids {
		if err := checkID(id); err != nil {
			return 0, err
		}
		ks[i] = ValueKey(id)
	}
	var n int64
	start := time.Now()
	err := s.do(ctx, "pfcount", false, func(ctx context.Context) (err error) {
		if s.cluster == nil || len(ids) == 1 {
			n, err = s.rdb.PFCount(ctx, ks...).Result()
			return err
		}
		raws, err := s.rawHLLs(ctx, ids)
		if err != nil {
			return err
		}
		n, err = s.eval(ctx, pfcountRawScript, []string{ks[0] + ":tmp:pfcount"}, raws...).Int64()
		return err
	})
	s.observe("pfcount", start, err)
	return n, err
}

// Delete removes a counter from Redis (not from a Loader's tier) and
// reports whether it existed.
func (s *Store) Delete(ctx context.Context, id string) (bool, error) {
	existed, _, err := s.DeleteLife(ctx, id)
	return existed, err
}

// DeleteLife is Delete that also returns the life it ended (0 when the
// counter did not exist). It leaves the counter's tombstone for
// TombstoneTTL: reads answer missing without reading through, and the
// next write creates the counter's next life.
func (s *Store) DeleteLife(ctx context.Context, id string) (existed bool, life uint64, err error) {
	if err := checkID(id); err != nil {
		return false, 0, err
	}
	start := time.Now()
	var r []any
	err = s.doWrite(ctx, context.WithoutCancel(ctx), "delete", func(ctx context.Context) (err error) { // see write
		r, err = s.runKeys(ctx, deleteScript, keys(id), s.nowMS(), s.opts.TombstoneTTL.Milliseconds())
		return err
	})
	s.observe("delete", start, err)
	if err != nil {
		return false, 0, err
	}
	n, err1 := toInt(r[0])
	var l int64
	if len(r) > 1 {
		l, err = toInt(r[1])
	}
	return n == 1, uint64(max(l, 0)), errors.Join(err1, err)
}

// lifeKey carries WithLife's destination.
type lifeKey struct{}

// WithLife returns ctx whose write (Add, Set, HAdd, ... : one through
// the store's write path) stores in *life the counter's life it wrote in
// (docs/redis-tier.md, "Deletes and lives").
func WithLife(ctx context.Context, life *uint64) context.Context {
	return context.WithValue(ctx, lifeKey{}, life)
}

// stripLife reads the life a write script appended to its reply's head
// ('OK:<life>', 'OKJ:<life>': writeScript) and restores the head. It
// returns 0 for any other reply.
func stripLife(r []any) uint64 {
	if len(r) == 0 {
		return 0
	}
	head, ok := r[0].(string)
	if !ok {
		return 0
	}
	h, l, ok := strings.Cut(head, ":")
	if !ok || (h != "OK" && h != "OKJ") {
		return 0
	}
	r[0] = h
	n, _ := strconv.ParseUint(l, 10, 64)
	return n
}

// Expire sets a counter's time to live; ttl == 0 removes it. It reports
// whether the counter exists.
func (s *Store) Expire(ctx context.Context, id string, ttl time.Duration) (bool, error) {
	ok, _, err := s.ExpireVersion(ctx, id, ttl)
	return ok, err
}

// ExpireVersion is Expire that also returns the counter's version after
// it: raised like any write's, unchanged when removing a TTL the counter
// did not have.
func (s *Store) ExpireVersion(ctx context.Context, id string, ttl time.Duration) (exists bool, version uint64, err error) {
	if ttl < 0 {
		return false, 0, fmt.Errorf("%w: negative ttl", ErrInvalidArgument)
	}
	if err := checkID(id); err != nil {
		return false, 0, err
	}
	ms := ttl.Milliseconds()
	if ttl > 0 && ms == 0 {
		ms = 1
	}
	start := time.Now()
	var n int64
	err = s.doWrite(ctx, context.WithoutCancel(ctx), "expire", func(ctx context.Context) (err error) { // see write
		n, err = s.eval(ctx, expireScript, keys(id), ms, s.nowMS()).Int64()
		return err
	})
	s.observe("expire", start, err)
	if err != nil || n < 0 {
		return false, 0, err
	}
	return true, uint64(n), nil
}

// run runs a script that replies with a table.
func (s *Store) run(ctx context.Context, sc *script, id string, args ...any) ([]any, error) {
	return s.runKeys(ctx, sc, keys(id), args...)
}

// runKeys runs sc with keys.
func (s *Store) runKeys(ctx context.Context, sc *script, keys []string, args ...any) ([]any, error) {
	v, err := s.eval(ctx, sc, keys, args...).Slice()
	if err != nil {
		return nil, err
	}
	if len(v) == 0 {
		return nil, errEmptyReply
	}
	return v, nil
}

// do calls f, retrying with backoff when the error is a connection error
// and, for writes, only when no connection could be made or Redis refused
// the command (either way it did not run). Errors are mapped to the
// sentinels.
func (s *Store) do(ctx context.Context, op string, write bool, f func(ctx context.Context) error) error {
	// Round trips to Redis are I/O: the request's admission slot goes to
	// the next request meanwhile (shed.IOWait).
	defer shed.IOWait(ctx).Resume()
	backoff := s.opts.MinRetryBackoff
	for attempt := 0; ; attempt++ {
		err := f(ctx)
		if err == nil {
			return nil
		}
		safe := !write || isDialError(err) || isRefused(err)
		err = mapError(err)
		if !errors.Is(err, ErrUnavailable) || attempt >= s.opts.MaxRetries || !safe {
			return fmt.Errorf("%s: %w", op, err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: %w", op, err)
		case <-t.C:
		}
		backoff = min(2*backoff, s.opts.MaxRetryBackoff)
	}
}

var errEmptyReply = errors.New("redisstore: empty script reply")

func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// isRefused reports a Redis error reply that means the command was not
// executed: the node is loading, has no quorum or is a replica now (a
// failover), the slot is moving or unserved, or a script is busy.
func isRefused(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	word, _, _ := strings.Cut(rerr.Error(), " ")
	switch word {
	case "LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "BUSY", "READONLY":
		return true
	}
	return false
}

// replyWords maps the first word of an error reply (the scripts' own, or
// Redis's) to its sentinel.
var replyWords = map[string]error{
	"WRONGKIND": ErrWrongKind, "WRONGTYPE": ErrWrongKind,
	"OVERFLOW":        ErrOverflow,
	"VERSIONCONFLICT": ErrVersionConflict,
	"INVALID":         ErrInvalidArgument,
	"TOOLATE":         ErrTooLate,
	"NOTFLOAT":        ErrNotFloat,
	"FLOATRANGE":      ErrFloatRange,
	"NOTINTEGER":      ErrNotInteger,
	"FIELDLIMIT":      ErrFieldLimit,
	"LOCKED":          ErrLocked,
	"LOCKLOST":        ErrLockLost,
	"LOADING":         ErrUnavailable, "MASTERDOWN": ErrUnavailable, "CLUSTERDOWN": ErrUnavailable,
	"TRYAGAIN": ErrUnavailable, "BUSY": ErrUnavailable, "READONLY": ErrUnavailable,
}

// ReplyError is an error reply of one of the store's scripts that means
// bad input or a conflict rather than a failure: Kind is the sentinel
// (ErrWrongKind, ErrOverflow, ErrVersionConflict, ErrInvalidArgument,
// ErrNotFloat, ErrFloatRange, ErrNotInteger),
// Reply the reply as Redis sent it, Detail the part of it fit to show a
// client ("version is 1, not 0").
type ReplyError struct {
	Kind   error
	Reply  string
	Detail string
}

func (e *ReplyError) Error() string { return e.Kind.Error() + ": " + e.Reply }
func (e *ReplyError) Unwrap() error { return e.Kind }

func mapError(err error) error {
	if errors.Is(err, redis.ErrClosed) {
		return ErrClosed
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		word, rest, _ := strings.Cut(msg, " ")
		if sentinel, ok := replyWords[word]; ok {
			if sentinel == ErrUnavailable {
				return fmt.Errorf("%w: %s", ErrUnavailable, msg)
			}
			return &ReplyError{Kind: sentinel, Reply: msg, Detail: rest}
		}
		if strings.Contains(msg, "hash value is not an integer") || strings.Contains(msg, "not an integer or out of range") {
			return &ReplyError{Kind: ErrWrongKind, Reply: msg, Detail: "a stored value is not an integer"}
		}
		return fmt.Errorf("redisstore: %w", err)
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

func (s *Store) observe(op string, start time.Time, err error) {
	if s.opts.Observe != nil {
		s.opts.Observe(op, time.Since(start), err)
	}
}

func str(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	}
	return fmt.Sprint(v)
}

func toInt(v any) (int64, error) {
	switch v := v.(type) {
	case int64:
		return v, nil
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("redisstore: bad integer %q in reply", v)
		}
		return n, nil
	}
	return 0, fmt.Errorf("redisstore: unexpected %T in reply", v)
}

// sum parses values and adds them up, failing with ErrOverflow when the
// total does not fit in an int64.
func sum(vs []any) (int64, []int64, error) {
	var total int64
	out := make([]int64, len(vs))
	for i, v := range vs {
		n, err := toInt(v)
		if err != nil {
			return 0, nil, err
		}
		out[i] = n
		if total, err = add64(total, n); err != nil {
			return 0, nil, err
		}
	}
	return total, out, nil
}

func add64(a, b int64) (int64, error) {
	if (b > 0 && a > math.MaxInt64-b) || (b < 0 && a < math.MinInt64-b) {
		return 0, fmt.Errorf("%w: sum of shards or buckets", ErrOverflow)
	}
	return a + b, nil
}
