package ui

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEmbeddedFilesCurrent: the embedded gz/ holds exactly the files of
// static/ (the source), each with the same content; run go generate
// ./internal/ui after editing static/.
func TestEmbeddedFilesCurrent(t *testing.T) {
	got, err := files()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	err = filepath.WalkDir("static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(strings.TrimPrefix(p, "static"+string(filepath.Separator)))
		want[name] = true
		if e, ok := got[name]; !ok {
			t.Errorf("%s is not embedded: run go generate ./internal/ui", name)
		} else if !bytes.Equal(e, b) {
			t.Errorf("embedded %s differs from static/%s: run go generate ./internal/ui", name, name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name := range got {
		if !want[name] {
			t.Errorf("embedded %s has no source in static/: run go generate ./internal/ui", name)
		}
	}
	if len(want) < 5 || !want["index.html"] {
		t.Fatalf("static/ holds %d files: the comparison compares nothing", len(want))
	}
}
