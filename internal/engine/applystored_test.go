package engine

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
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
		e = reopenAfterPowerLoss(t, e, fs, cfg)
		var v int64
		if _, ok, err := e.Export("x"); err != nil {
			t.Fatal(err)
		} else if ok {
			v = mustGet(t, e, "x").Value
		}
		seen := map[int64]bool{}
		if err := e.StoredRecords(0, func(r StoredRecord) {
			k, err := strconv.ParseInt(strings.TrimPrefix(r.Key, "rec-"), 10, 64)
			if err != nil || string(r.Data) != r.Key {
				t.Errorf("stored record %q = %q", r.Key, r.Data)
			}
			seen[k] = true
		}); err != nil {
			t.Fatal(err)
		}
		e.Close()
		for k := int64(1); k <= v; k++ {
			if !seen[k] {
				t.Fatalf("round %d: value %d on disk but record rec-%d missing", round, v, k)
			}
		}
		if int64(len(seen)) != v {
			t.Fatalf("round %d: %d records on disk for value %d", round, len(seen), v)
		}
		if v <= int64(50*(round+1)) {
			t.Fatalf("round %d: value %d on disk, below the synced apply %d", round, v, 50*(round+1)+1)
		}
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
