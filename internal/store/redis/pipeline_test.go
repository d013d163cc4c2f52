package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/counterd/counterd/internal/counter"
	redisstore "github.com/counterd/counterd/internal/store/redis"
)

// TestPipelinedAdds: concurrent Adds sharing round trips sum exactly, keep
// kind checks per add, and survive SCRIPT FLUSH (NOSCRIPT is retried).
func testPipelinedAdds(t *testing.T, tg *target) {
	s := open(t, tg.url, redisstore.Options{Pipeline: 16, PipelineConns: 2})
	ctx := context.Background()
	if _, _, err := s.HAdd(ctx, "h", []counter.FieldDelta{{Name: "f", Delta: 1}}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				if i == 100 && g == 0 {
					tg.forEachMaster(t, func(ctx context.Context, m *redis.Client) error { return m.ScriptFlush(ctx).Err() })
				}
				kind := redisstore.KindCounter
				if i%2 == 1 {
					kind = redisstore.KindSharded
				}
				if _, _, err := s.Add(ctx, fmt.Sprintf("%s%d", kind, i%4), kind, 1, redisstore.AddOptions{}); err != nil {
					t.Error(err)
					return
				}
				if _, _, err := s.Add(ctx, "h", redisstore.KindAuto, 1, redisstore.AddOptions{}); err == nil {
					t.Error("add to a hash accepted")
					return
				}
			}
		}()
	}
	wg.Wait()
	for i := 0; i < 4; i++ {
		kind := redisstore.KindCounter
		if i%2 == 1 {
			kind = redisstore.KindSharded
		}
		if rec := get(t, s, fmt.Sprintf("%s%d", kind, i)); rec.Value != 16*50 {
			t.Errorf("%s%d = %d, want %d", kind, i, rec.Value, 16*50)
		}
	}
}
