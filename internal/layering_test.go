// Package internal holds only this test: the layering of the packages under
// it (docs/architecture.md, "Layers").
package internal

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/counterd/counterd"

// layers are the import rules: a package under Forbidden may be imported
// only by the packages under one of Allowed (and by itself). The front ends
// (internal/api) and the server that composes them sit on top: everything
// below answers HTTP through internal/httpjson, never through the API.
var layers = []struct {
	Forbidden string
	Allowed   []string
}{
	{"internal/api", []string{"internal/api", "internal/server", "cmd"}},
	{"internal/server", []string{"internal/server", "cmd"}},
}

// under reports whether the slash path p is dir or below it.
func under(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

// violation is one import that breaks a layer rule.
type violation struct{ File, Imports, Allowed string }

// checkLayers parses the imports of every non-test Go file of the module
// at root, whatever its build tags, and returns the imports that break a
// rule and the number of packages (directories) it read. Nested modules,
// testdata and hidden directories are skipped, as the go command does.
func checkLayers(root string) ([]violation, int, error) {
	var out []violation
	dirs := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			if rel != "." {
				if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
					return filepath.SkipDir // another module
				}
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		dir := path.Dir(rel)
		dirs[dir] = true
		for _, imp := range f.Imports {
			ip, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return err
			}
			target, ok := strings.CutPrefix(ip, module+"/")
			if !ok {
				continue
			}
			for _, l := range layers {
				if !under(target, l.Forbidden) {
					continue
				}
				allowed := false
				for _, a := range l.Allowed {
					allowed = allowed || under(dir, a)
				}
				if !allowed {
					out = append(out, violation{File: rel, Imports: ip, Allowed: strings.Join(l.Allowed, ", ")})
				}
			}
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].File < out[j].File })
	return out, len(dirs), err
}

// TestLayering fails if a package below internal/api and internal/server
// imports the front ends (or the server): lower packages answer HTTP
// through internal/httpjson. Tests may import the front ends to drive a
// package end to end, so _test.go files are not checked.
func TestLayering(t *testing.T) {
	vs, n, err := checkLayers("..")
	if err != nil {
		t.Fatal(err)
	}
	if n < 20 {
		t.Fatalf("read %d packages of the module; expected the whole tree", n)
	}
	for _, v := range vs {
		t.Errorf("%s imports %s, which only packages under %s may import (lower packages answer HTTP through internal/httpjson)", v.File, v.Imports, v.Allowed)
	}
}

// TestCheckLayers proves the check finds what it must: a lower package
// importing the API, also behind a build tag, and nothing in an allowed
// package, a test file, testdata or a nested module.
func TestCheckLayers(t *testing.T) {
	root := t.TempDir()
	write := func(rel, src string) {
		p := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	api := `import _ "` + module + `/internal/api/httpapi"` + "\n"
	write("go.mod", "module "+module+"\n")
	write("internal/api/resp/resp.go", "package resp\n"+api)
	write("internal/server/server.go", "package server\n"+api)
	write("cmd/counterd/main.go", "package main\n"+api+`import _ "`+module+`/internal/server"`+"\n")
	write("internal/chunksync/http.go", "package chunksync\n"+api)
	write("internal/region/linux.go", "//go:build linux && !linux\n\npackage region\n"+api)
	write("internal/engine/engine.go", "package engine\nimport _ \""+module+"/internal/server\"\n")
	write("internal/apifoo/x.go", "package apifoo\n"+api) // a sibling, not under internal/api
	write("internal/tiered/front_test.go", "package tiered\n"+api)
	write("internal/tiered/testdata/x.go", "package x\n"+api)
	write("tools/go.mod", "module tools\n")
	write("tools/x.go", "package tools\n"+api)

	vs, n, err := checkLayers(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []violation{
		{"internal/apifoo/x.go", module + "/internal/api/httpapi", "internal/api, internal/server, cmd"},
		{"internal/chunksync/http.go", module + "/internal/api/httpapi", "internal/api, internal/server, cmd"},
		{"internal/engine/engine.go", module + "/internal/server", "internal/server, cmd"},
		{"internal/region/linux.go", module + "/internal/api/httpapi", "internal/api, internal/server, cmd"},
	}
	if len(vs) != len(want) {
		t.Fatalf("violations %v, want %v", vs, want)
	}
	for i := range want {
		if vs[i] != want[i] {
			t.Errorf("violation %d: %v, want %v", i, vs[i], want[i])
		}
	}
	if n != 7 {
		t.Errorf("read %d packages, want 7", n)
	}
}
