package redisstore_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/counterd/counterd/internal/testutil/redistest"
)

// target is the Redis a test runs on: a private single server, or the
// 3-master Redis Cluster that TestStore shares between its subtests.
type target struct {
	url string
	rdb redis.UniversalClient // direct access, routed by key on a cluster
	srv *redistest.Server     // nil on a cluster
	cl  *redistest.Cluster    // nil on a single server
}

// storeCases run on both setups (TestStore). They take the target and
// must not assume a fresh one beyond an empty keyspace.
var storeCases = []struct {
	name string
	fn   func(*testing.T, *target)
}{
	{"Counter", testCounter},
	{"SetVersionAndTTL", testSetVersionAndTTL},
	{"Sharded", testSharded},
	{"Window", testWindow},
	{"Hash", testHash},
	{"HLL", testHLL},
	{"PFMergeAndCountAcrossIDs", testPFMergeAndCountAcrossIDs},
	{"PFUnionProperty", testPFUnionProperty},
	{"FlushCounters", testFlushCounters},
	{"URLForms", testURLForms},
	{"WrongKindLeavesDataUnchanged", testWrongKindLeavesDataUnchanged},
	{"OverflowLeavesDataUnchanged", testOverflowLeavesDataUnchanged},
	{"ScriptsSurviveScriptFlush", testScriptsSurviveScriptFlush},
	{"ConcurrentAddsSumExactly", testConcurrentAddsSumExactly},
	{"PipelinedAdds", testPipelinedAdds},
	{"SketchRegisters", testSketchRegisters},
	{"ReadThrough", testReadThrough},
	{"Tombstones", testTombstones},
	{"FillDoesNotOverwrite", testFillDoesNotOverwrite},
	{"ScriptLocks", testScriptLocks},
}

// TestStore runs storeCases on a single Redis (a private server per case)
// and on one Redis Cluster of 3 masters (flushed between cases).
func TestStore(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		for _, c := range storeCases {
			t.Run(c.name, func(t *testing.T) { c.fn(t, single(t)) })
		}
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.NewCluster(t)
		for _, c := range storeCases {
			t.Run(c.name, func(t *testing.T) {
				cl.FlushAll(t)
				c.fn(t, onCluster(t, cl))
			})
		}
	})
}

func single(t *testing.T) *target {
	t.Helper()
	srv := redistest.New(t)
	opt, err := redis.ParseURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	return &target{url: srv.URL, rdb: rdb, srv: srv}
}

func onCluster(t *testing.T, cl *redistest.Cluster) *target {
	t.Helper()
	opt, err := redis.ParseClusterURL(cl.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClusterClient(opt)
	t.Cleanup(func() { rdb.Close() })
	return &target{url: cl.URL(), rdb: rdb, cl: cl}
}

// flushAll empties every server of the target.
func (tg *target) flushAll(t *testing.T) {
	t.Helper()
	if tg.cl != nil {
		tg.cl.FlushAll(t)
	} else {
		tg.srv.FlushAll(t)
	}
}

// forEachMaster calls fn with a client of every master.
func (tg *target) forEachMaster(t *testing.T, fn func(ctx context.Context, m *redis.Client) error) {
	t.Helper()
	ctx := context.Background()
	var err error
	if c, ok := tg.rdb.(*redis.ClusterClient); ok {
		err = c.ForEachMaster(ctx, fn)
	} else {
		err = fn(ctx, tg.rdb.(*redis.Client))
	}
	if err != nil {
		t.Fatal(err)
	}
}

// dbsize is the number of keys on all masters.
func (tg *target) dbsize(t *testing.T) int64 {
	t.Helper()
	var n atomic.Int64
	tg.forEachMaster(t, func(ctx context.Context, m *redis.Client) error {
		k, err := m.DBSize(ctx).Result()
		n.Add(k)
		return err
	})
	return n.Load()
}

// scriptFlush empties the script cache of every master.
func (tg *target) scriptFlush(t *testing.T) {
	t.Helper()
	tg.forEachMaster(t, func(ctx context.Context, m *redis.Client) error { return m.ScriptFlush(ctx).Err() })
}
