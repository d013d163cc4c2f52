package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// drainRegion pages through the region changes from cur with limit ids a
// page until none is left, folding each row into seen (the last row read
// of each id), and returns the cursor.
func drainRegion(t *testing.T, s *Store, cur RegionCursor, limit int, seen map[string]RegionRow) RegionCursor {
	t.Helper()
	for {
		rows, more, err := s.RegionChanges(ctxT(t, 10*time.Second), cur, limit)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.Seq < cur.Seq || r.Seq == cur.Seq && r.ID <= cur.ID {
				t.Fatalf("row %s@%d at or before the cursor %+v", r.ID, r.Seq, cur)
			}
			cur = RegionCursor{Seq: r.Seq, ID: r.ID}
			seen[r.ID] = r
		}
		if !more {
			return cur
		}
	}
}

// TestRegionChangesCursorMissesNothing: batches from several writers
// commit concurrently (adds, deletes, re-creates) while a reader pages
// through the record of changes, a few ids a page; once the writers
// stop and the reader drained the rest, the last row it read of every id
// is the id's committed state: a live counter with its value and version,
// or a deleted one. A change committed after the reader moved past its
// sequence number would be missed (and leave a stale row here).
func TestRegionChangesCursorMissesNothing(t *testing.T) {
	s := newStore(t, Options{MaxConns: 8})
	ctx := ctxT(t, 2*time.Minute)
	ids := make([]string, 12)
	for i := range ids {
		ids[i] = fmt.Sprintf("rc:%d", i)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				b := Batch{ID: fmt.Sprintf("w%d-%d", w, n)}
				for range 1 + rng.IntN(4) {
					b.Deltas = append(b.Deltas, Delta{CounterID: ids[rng.IntN(len(ids))], Delta: 1 + rng.Int64N(5)})
				}
				if rng.IntN(5) == 0 {
					b.Deletes = []string{ids[rng.IntN(len(ids))]}
				}
				// A failed batch is retried as the aggregator does (deletes
				// and adds lock their rows in two passes: two batches may
				// deadlock, and PostgreSQL aborts one).
				for try := 0; ; try++ {
					_, err := s.Apply(ctx, b)
					var pgErr *pgconn.PgError
					if err == nil {
						break
					}
					if !errors.As(err, &pgErr) || pgErr.Code != "40P01" || try == 10 {
						errs <- err
						return
					}
				}
			}
		}()
	}
	seen := map[string]RegionRow{}
	var cur RegionCursor
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		cur = drainRegion(t, s, cur, 3, seen)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	drainRegion(t, s, cur, 3, seen)

	for _, id := range ids {
		rec, live, err := s.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := seen[id]
		if !ok {
			if live {
				t.Fatalf("%s: live (%d) but never read", id, rec.Value)
			}
			continue
		}
		if got.Live != live || live && (got.Value != rec.Value || got.Version != rec.Version) {
			t.Fatalf("%s: read live=%v value %d version %d; committed live=%v value %d version %d",
				id, got.Live, got.Value, got.Version, live, rec.Value, rec.Version)
		}
		var base int64
		if err := s.Pool().QueryRow(ctx, `SELECT base FROM region_changes WHERE counter_id = $1`, id).Scan(&base); err != nil || base != got.Base {
			t.Fatalf("%s: read base %d, stored %d (%v)", id, got.Base, base, err)
		}
	}
}

// TestRegionChangesCommitInSequenceOrder: a transaction holding the
// region change sequence keeps a batch from committing until it ends, so
// the batch's sequence number is higher and a reader that has seen it has
// seen the earlier one too.
func TestRegionChangesCommitInSequenceOrder(t *testing.T) {
	s := newStore(t, Options{})
	ctx := ctxT(t, time.Minute)
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if err := noteRegionChanges(ctx, tx, []string{"first"}, nil); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Apply(ctx, Batch{ID: "second", Deltas: []Delta{{CounterID: "second", Delta: 1}}})
		done <- err
	}()
	// The batch waits for the sequence's row lock.
	for {
		var waiting int
		if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE 'UPDATE region_change_seq%'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting == 1 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the batch committed while an earlier sequence number was open: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if rows, _, err := s.RegionChanges(ctx, RegionCursor{}, 10); err != nil || len(rows) != 0 {
		t.Fatalf("changes visible before any commit: %+v %v", rows, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	rows, more, err := s.RegionChanges(ctx, RegionCursor{}, 10)
	if err != nil || more || len(rows) != 2 || rows[0].ID != "first" || rows[1].ID != "second" || rows[0].Seq >= rows[1].Seq {
		t.Fatalf("changes: %+v more=%v %v", rows, more, err)
	}
	if rows[0].Live || !rows[1].Live || rows[1].Value != 1 {
		t.Fatalf("first is no counter, second is 1: %+v", rows)
	}
}

// TestRegionChangesDeleteBase: a counter deleted and created again keeps
// the versions of its earlier life in its base, and a truncate (FLUSHALL)
// records every counter as deleted.
func TestRegionChangesDeleteBase(t *testing.T) {
	s := newStore(t, Options{})
	ctx := ctxT(t, time.Minute)
	apply := func(b Batch) {
		t.Helper()
		if _, err := s.Apply(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	apply(Batch{ID: "1", Deltas: []Delta{{CounterID: "x", Delta: 5}}, Versions: []Version{{ID: "x", Version: 7}}})
	apply(Batch{ID: "2", Deletes: []string{"x"}, Deltas: []Delta{{CounterID: "x", Delta: 2}}})
	row, ok, err := s.RegionExport(ctx, "x")
	if err != nil || !ok || row.Base != 7 || row.Version != 1 || row.Value != 2 {
		t.Fatalf("after delete and re-create: %+v %v %v", row, ok, err)
	}
	apply(Batch{ID: "3", Deltas: []Delta{{CounterID: "y", Delta: 1}}})
	if err := s.Truncate(ctx); err != nil {
		t.Fatal(err)
	}
	rows, _, err := s.RegionChanges(ctx, RegionCursor{}, 10)
	if err != nil || len(rows) != 2 {
		t.Fatalf("after truncate: %+v %v", rows, err)
	}
	for _, r := range rows {
		if r.Live || r.Base < 1 || r.ID == "x" && r.Base != 8 {
			t.Fatalf("after truncate: %+v", rows)
		}
	}
	n := 0
	if err := s.RegionExportAll(ctx, func(RegionRow) error { n++; return nil }); err != nil || n != 0 {
		t.Fatalf("export after truncate: %d %v", n, err)
	}
}
