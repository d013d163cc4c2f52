package tiered_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/testutil/pgtest"
	"github.com/counterd/counterd/internal/testutil/redistest"
	"github.com/counterd/counterd/internal/tiered"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// env is one tiered backend over a Redis tier and a fresh database.
type env struct {
	rd  *redistest.Server  // a private single Redis; nil on a cluster
	cl  *redistest.Cluster // the shared Redis Cluster; nil on a single Redis
	dsn string
	b   *tiered.Backend
}

// setup says where an env's Redis tier lives: a private single server per
// env (the zero setup), or a Redis Cluster shared by the cases of
// TestTiered/cluster.
type setup struct{ cl *redistest.Cluster }

// newEnv opens a backend on a private single Redis; tweak adjusts the
// options (may be nil).
func newEnv(t *testing.T, tweak func(*tiered.Options)) *env {
	t.Helper()
	return setup{}.env(t, tweak)
}

// env opens a backend on the setup's Redis tier.
func (s setup) env(t *testing.T, tweak func(*tiered.Options)) *env {
	t.Helper()
	e := &env{cl: s.cl, dsn: pgtest.DSN(t)}
	if s.cl == nil {
		e.rd = redistest.New(t)
	}
	e.b = e.open(t, tweak)
	return e
}

func (e *env) redisURL() string {
	if e.cl != nil {
		return e.cl.URL()
	}
	return e.rd.URL
}

// flushRedis empties the Redis tier (every master of a cluster).
func (e *env) flushRedis(t *testing.T) {
	t.Helper()
	if e.cl != nil {
		e.cl.FlushAll(t)
	} else {
		e.rd.FlushAll(t)
	}
}

func (e *env) open(t *testing.T, tweak func(*tiered.Options)) *tiered.Backend {
	t.Helper()
	o := tiered.Options{RedisURL: e.redisURL(), PostgresDSN: e.dsn, FlushInterval: 50 * time.Millisecond, NodeID: "t"}
	o.Postgres.MaintenanceInterval = -1
	if tweak != nil {
		tweak(&o)
	}
	b, err := tiered.Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// tieredCases run on a single Redis and on a Redis Cluster (TestTiered).
var tieredCases = []struct {
	name string
	fn   func(*testing.T, setup)
}{
	{"EveryKind", testEveryKind},
	{"CacheMissRestoresFromPostgres", testCacheMissRestoresFromPostgres},
	{"FloatsRestoreFromPostgres", testFloatsRestoreFromPostgres},
	{"FlushRetryAfterLostAckAppliesOnce", testFlushRetryAfterLostAckAppliesOnce},
	{"Idempotency", testIdempotency},
	{"IdempotencySurvivesRedisLoss", testIdempotencySurvivesRedisLoss},
	{"BatchUndoesAddsOnFailure", testBatchUndoesAddsOnFailure},
	{"SyncWaitsForCommit", testSyncWaitsForCommit},
	{"ScanLenAggregateFlushAll", testScanLenAggregateFlushAll},
	{"PFCountMergeAcrossSlots", testPFCountMergeAcrossSlots},
	{"SeriesFromPostgres", testSeriesFromPostgres},
	{"SnapshotAndValueAt", testSnapshotAndValueAt},
	{"CancelledWritesStayConsistent", testCancelledWritesStayConsistent},
	{"HTTPEveryKind", testHTTPEveryKind},
	{"RESPEveryKind", testRESPEveryKind},
	{"RESPScripts", testRESPScripts},
	{"ScriptLocksTwoNodes", testScriptLocksTwoNodes},
	{"ScriptLockOfCrashedHolder", testScriptLockOfCrashedHolder},
	{"ReadWriteLocksTwoNodes", testReadWriteLocksTwoNodes},
	{"ReadWriteCommandsLock", testReadWriteCommandsLock},
	{"UniquesTiered", testUniquesTiered},
	{"UniquesDeletedWithCounter", testUniquesDeletedWithCounter},
	{"QuotasTwoNodesAlternate", testQuotasTwoNodesAlternate},
	{"QuotasConcurrentCreates", testQuotasConcurrentCreates},
	{"QuotaRecountClosesCrashWindow", testQuotaRecountClosesCrashWindow},
	{"QuotaHashFieldsAcrossNodes", testQuotaHashFieldsAcrossNodes},
	{"JournalReplaysAfterCrash", testJournalReplaysAfterCrash},
	{"JournalPlainReplaysAfterCrash", testJournalPlainReplaysAfterCrash},
	{"JournalReplayKeepsLives", testJournalReplayKeepsLives},
	{"JournalReplayAfterFlushAll", testJournalReplayAfterFlushAll},
}

// TestTiered runs tieredCases on a private single Redis per case and on
// one 3-master Redis Cluster (flushed between cases).
func TestTiered(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		for _, c := range tieredCases {
			t.Run(c.name, func(t *testing.T) { c.fn(t, setup{}) })
		}
	})
	t.Run("cluster", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts a Redis Cluster; the single-Redis cases ran")
		}
		cl := redistest.NewCluster(t)
		for _, c := range tieredCases {
			t.Run(c.name, func(t *testing.T) {
				cl.FlushAll(t)
				c.fn(t, setup{cl: cl})
			})
		}
	})
}

func apply(t *testing.T, b *tiered.Backend, op contract.Op) contract.Result {
	t.Helper()
	r, err := b.Apply(context.Background(), op, contract.WriteOptions{})
	if err != nil {
		t.Fatalf("apply %+v: %v", op, err)
	}
	return r
}

func view(t *testing.T, b *tiered.Backend, id string) contract.View {
	t.Helper()
	v, err := b.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return v
}

func add(id string, k contract.Kind, d int64) contract.Op {
	return contract.Op{Type: contract.OpAdd, ID: id, Kind: k, Delta: d}
}

// allKinds writes one counter of every kind and returns their ids.
func allKinds(t *testing.T, b *tiered.Backend) {
	t.Helper()
	apply(t, b, add("c", contract.KindNone, 5))
	apply(t, b, add("c", contract.KindCounter, -2))
	for i := 0; i < 10; i++ {
		apply(t, b, add("sh", contract.KindSharded, 1))
	}
	apply(t, b, add("pn", contract.KindPN, 7))
	apply(t, b, add("pn", contract.KindPN, -10))
	apply(t, b, contract.Op{Type: contract.OpAdd, ID: "w", Kind: contract.KindWindow, Delta: 4,
		Window: counter.WindowSpec{Granularity: time.Second, Span: time.Minute}})
	apply(t, b, contract.Op{Type: contract.OpPFAdd, ID: "u", Items: [][]byte{[]byte("a"), []byte("b"), []byte("a")}})
	apply(t, b, contract.Op{Type: contract.OpHAdd, ID: "h", Fields: []counter.FieldDelta{{Name: "likes", Delta: 2}, {Name: "views", Delta: 9}}})
}

// checkKinds checks what allKinds wrote (withWindow: the window too, which
// lives in Redis only).
func checkKinds(t *testing.T, b *tiered.Backend, withWindow bool) {
	t.Helper()
	want := map[string]struct {
		kind contract.Kind
		val  int64
	}{"c": {contract.KindCounter, 3}, "sh": {contract.KindSharded, 10}, "pn": {contract.KindPN, -3}, "u": {contract.KindHLL, 2}}
	if withWindow {
		want["w"] = struct {
			kind contract.Kind
			val  int64
		}{contract.KindWindow, 4}
	}
	for id, w := range want {
		if v := view(t, b, id); !v.Exists || v.Kind != w.kind || v.Value != w.val {
			t.Errorf("%s = %+v, want %s %d", id, v, w.kind, w.val)
		}
	}
	if v, ok, err := b.HGet(context.Background(), "h", "views"); err != nil || !ok || v != 9 {
		t.Errorf("HGet h views = %d %v %v", v, ok, err)
	}
}

func isUnavailable(err error) bool {
	return errors.Is(err, tiered.ErrUnavailable) && errors.Is(err, contract.ErrUnavailable)
}
