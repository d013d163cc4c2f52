package engine

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
)

// TestApplyStoredCrashTogether: the records ApplyStored's callback returns
// reach disk in the flush that writes the ops' effects (a cluster owner's
// op and its dedupe marks). Each apply adds 1 to x and stores
// "rec-<value>"; the disk loses power at an arbitrary point. After
// reopening, x's value v must come with exactly rec-1..rec-v.
func TestApplyStoredCrashTogether(t *testing.T) {
	for round := 0; round < 3; round++ {
		fs := strictMemDir(t, "/data")
		cfg := DefaultConfig()
		cfg.Dir, cfg.FS, cfg.NodeID = "/data", fs, "a"
		cfg.FlushInterval = time.Millisecond
		e, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for ; n < 200*(round+1); n++ {
			wo := contract.WriteOptions{Durability: contract.Async}
			if n == 50*(round+1) {
				wo.Durability = contract.Sync
			}
			if n%10 == 0 {
				time.Sleep(200 * time.Microsecond) // let flushes interleave
			}
			res, err := e.ApplyStored(bg, []contract.Op{{Type: contract.OpAdd, ID: "x", Kind: contract.KindCounter, Delta: 1}}, wo,
				func(res []contract.Result) ([]StoredRecord, error) {
					key := fmt.Sprintf("rec-%d", res[0].Value)
					return []StoredRecord{{Key: key, Created: time.Now().UnixNano(), Data: []byte(key)}}, nil
				})
			if err != nil || res[0].Value != int64(n+1) {
				t.Fatalf("apply %d: %+v, %v", n, res, err)
			}
			if n == 100*(round+1) {
				fs.SetIgnoreSyncs(true) // power loss: nothing from here on is durable
			}
		}
		reopenAndCheckRecords(t, e, fs, cfg, round)
	}
}

// TestApplyStoredErrors: a bad op stores nothing and names its index; a
// callback's error is returned and its records are not stored.
func TestApplyStoredErrors(t *testing.T) {
	e := openMem(t)
	called := false
	_, err := e.ApplyStored(bg, []contract.Op{{Type: contract.OpAdd, ID: "", Delta: 1}}, contract.WriteOptions{}, func([]contract.Result) ([]StoredRecord, error) {
		called = true
		return nil, nil
	})
	var be *contract.BatchError
	if !errors.As(err, &be) || be.Index != 0 || called {
		t.Fatalf("bad op: %v (callback called: %v)", err, called)
	}
	boom := errors.New("boom")
	_, err = e.ApplyStored(bg, []contract.Op{{Type: contract.OpAdd, ID: "y", Delta: 1}}, contract.WriteOptions{Durability: contract.Sync}, func([]contract.Result) ([]StoredRecord, error) {
		return []StoredRecord{{Key: "r", Data: []byte("r")}}, boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("callback error: %v", err)
	}
	if _, err := e.MergeRecords(bg, nil, contract.WriteOptions{Durability: contract.Sync}, nil); err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := e.StoredRecords(0, func(StoredRecord) { n++ }); err != nil || n != 0 {
		t.Fatalf("%d records stored after a failed callback (%v)", n, err)
	}
}
