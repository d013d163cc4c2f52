package postgres

import (
	"context"
	"testing"

	"github.com/counterd/counterd/internal/testutil/pgtest"
)

func TestSketchesMerge(t *testing.T) {
	t.Parallel()
	s := openStore(t, pgtest.DSN(t), Options{})
	ctx := context.Background()
	a := SketchID{ID: "u", Precision: 14, Unit: 'd', Level: 0, Index: 20000}
	b := SketchID{ID: "u", Precision: 14, Unit: 'd', Level: 3, Index: 2500}
	concat := func(old, add []byte) ([]byte, error) { return append(append([]byte(nil), old...), add...), nil }
	if err := s.MergeSketches(ctx, map[SketchID][]byte{a: []byte("x"), b: []byte("y")}, concat); err != nil {
		t.Fatal(err)
	}
	if err := s.MergeSketches(ctx, map[SketchID][]byte{a: []byte("z")}, concat); err != nil {
		t.Fatal(err)
	}
	got, err := s.Sketches(ctx, []SketchID{a, b, {ID: "u", Precision: 14, Unit: 'h', Index: 1}})
	if err != nil || len(got) != 2 || string(got[a]) != "xz" || string(got[b]) != "y" {
		t.Fatalf("sketches = %v %v", got, err)
	}
	if err := s.DeleteSketches(ctx, "u"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Sketches(ctx, []SketchID{a, b}); err != nil || len(got) != 0 {
		t.Fatalf("after delete: %v %v", got, err)
	}
}
