package resp_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/api/resp"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
)

// TestScriptGateWrites: writes through GateWrites's backend (what the
// HTTP API writes through) do not land between a script's commands. A
// script INCRs a key and then reads it back many times, failing if the
// value moved, while another goroutine increments the key through the
// gated backend (single writes and batches) as fast as it can.
func TestScriptGateWrites(t *testing.T) {
	ts := start(t, resp.Options{})
	be := ts.srv.GateWrites(engine.Local(ts.eng))
	ctx := context.Background()
	const script = `local a = redis.call('INCR', KEYS[1])
for i = 1, 300 do
  local b = tonumber(redis.call('GET', KEYS[1]))
  if b ~= a then return redis.error_reply('interleaved: ' .. a .. ' then ' .. b .. ' at read ' .. i) end
end
return a`
	inc := contract.Op{Type: contract.OpAdd, ID: "hot", Delta: 1}
	var writes atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				var err error
				if i%2 == 0 {
					_, err = be.Apply(ctx, inc, contract.WriteOptions{})
					writes.Add(1)
				} else {
					_, err = be.ApplyBatch(ctx, []contract.Op{inc, inc}, contract.WriteOptions{})
					writes.Add(2)
				}
				if err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	rdb := newGoRedis(t, ts.addr, 2)
	const runs = 40
	var scriptErr error
	for i := 0; i < runs && scriptErr == nil; i++ {
		scriptErr = rdb.Eval(ctx, script, []string{"hot"}).Err()
	}
	close(stop)
	wg.Wait()
	close(errc)
	mustOK(t, "script", scriptErr)
	for err := range errc {
		t.Fatalf("gated write: %v", err)
	}
	if writes.Load() == 0 {
		t.Fatal("no gated write ran")
	}
	n, err := rdb.Get(ctx, "hot").Int64()
	mustOK(t, "GET", err)
	mustEqual(t, "hot", n, runs+writes.Load())
}

// TestScriptGateBusy: past the time limit, a write through GateWrites's
// backend fails with ErrScriptBusy (503 on HTTP) instead of waiting, and
// runs again once SCRIPT KILL stopped the script.
func TestScriptGateBusy(t *testing.T) {
	ts := start(t, resp.Options{LuaTimeLimit: 20 * time.Millisecond, EventLoops: -1})
	be := ts.srv.GateWrites(engine.Local(ts.eng))
	ctx := context.Background()
	loop := dialRaw(t, ts.addr)
	loop.send(cmd("EVAL", "while true do end", "0"))
	inc := contract.Op{Type: contract.OpAdd, ID: "k", Delta: 1}
	deadline := time.Now().Add(30 * time.Second)
	var err error
	for {
		_, err = be.Apply(ctx, inc, contract.WriteOptions{})
		if errors.Is(err, resp.ErrScriptBusy) || time.Now().After(deadline) {
			break
		}
	}
	if !errors.Is(err, resp.ErrScriptBusy) || !errors.Is(err, contract.ErrUnavailable) {
		t.Fatalf("write during a script past the limit: %v, want ErrScriptBusy (an ErrUnavailable)", err)
	}
	_, err = be.ApplyBatch(ctx, []contract.Op{inc}, contract.WriteOptions{})
	if !errors.Is(err, resp.ErrScriptBusy) {
		t.Fatalf("batch during a script past the limit: %v", err)
	}
	killer := dialRaw(t, ts.addr)
	if got := rawDo(killer, "SCRIPT", "KILL"); got != "+OK\r\n" {
		t.Fatalf("SCRIPT KILL = %q", got)
	}
	if got := loop.reply(); got[0] != '-' {
		t.Fatalf("killed script's reply = %q", got)
	}
	res, err := be.Apply(ctx, inc, contract.WriteOptions{})
	mustOK(t, "write after SCRIPT KILL", err)
	_ = res
}

// blockingBackend's Apply of an id in hold reports on entered and waits
// for release.
type blockingBackend struct {
	contract.Backend
	entered chan string
	release map[string]chan struct{}
}

func (b blockingBackend) Apply(ctx context.Context, op contract.Op, wo contract.WriteOptions) (contract.Result, error) {
	if ch, ok := b.release[op.ID]; ok {
		b.entered <- op.ID
		<-ch
	}
	return b.Backend.Apply(ctx, op, wo)
}

// TestScriptGateNoStarvation: a script waiting for the gate holds back
// writes that arrive after it, so overlapping writes cannot keep it out:
// w1 holds the gate, a script waits, w2 arrives; when w1 ends the script
// runs before w2. (Were the script polling for a moment with no writer,
// w2 would enter at once and the script wait for it too.) The script may
// not be waiting yet when w2 arrives (the test sleeps to let each get
// there); the test then tries again, with longer sleeps.
func TestScriptGateNoStarvation(t *testing.T) {
	ts := start(t, resp.Options{EventLoops: -1})
	ctx := context.Background()
	for attempt := 1; ; attempt++ {
		w1, w2 := make(chan struct{}), make(chan struct{})
		inner := blockingBackend{Backend: engine.Local(ts.eng), entered: make(chan string, 2),
			release: map[string]chan struct{}{"w1": w1, "w2": w2}}
		be := ts.srv.GateWrites(inner)
		var wg sync.WaitGroup
		write := func(id string) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := be.Apply(ctx, contract.Op{Type: contract.OpAdd, ID: id, Delta: 1}, contract.WriteOptions{}); err != nil {
					t.Error(err)
				}
			}()
		}
		write("w1")
		mustEqual(t, "first writer in", <-inner.entered, "w1")
		sc := dialRaw(t, ts.addr)
		sc.send(cmd("EVAL", "return redis.call('INCR', 's')", "0"))
		time.Sleep(time.Duration(attempt) * time.Millisecond) // let EVAL reach the gate
		write("w2")
		time.Sleep(time.Duration(attempt) * time.Millisecond) // and w2
		close(w1)
		// w2 holds the gate's shared side once it has entered: the
		// script ran before it, or runs after it.
		mustEqual(t, "second writer in", <-inner.entered, "w2")
		v, err := ts.eng.Get("s")
		if err != nil && !errors.Is(err, contract.ErrNotFound) {
			t.Fatal(err)
		}
		close(w2)
		mustEqual(t, "script's reply", sc.reply(), fmt.Sprintf(":%d\r\n", attempt))
		wg.Wait()
		if v.Value == int64(attempt) {
			return // the script ran first
		}
		if attempt == 20 {
			t.Fatal("in 20 attempts the second write always ran before the waiting script")
		}
	}
}

// BenchmarkGateWrites is an increment through the engine directly and
// through GateWrites's backend (what the HTTP API's writes pay when no
// script runs), from parallel goroutines.
func BenchmarkGateWrites(b *testing.B) {
	ts := start(b, resp.Options{})
	direct := contract.Backend(engine.Local(ts.eng))
	for _, bc := range []struct {
		name string
		be   contract.Backend
	}{{"direct", direct}, {"gated", ts.srv.GateWrites(direct)}} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			b.RunParallel(func(pb *testing.PB) {
				for i := 0; pb.Next(); i++ {
					op := contract.Op{Type: contract.OpAdd, ID: fmt.Sprintf("k%d", i%64), Delta: 1}
					if _, err := bc.be.Apply(ctx, op, contract.WriteOptions{}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
