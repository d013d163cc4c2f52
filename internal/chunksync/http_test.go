package chunksync

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/counterd/counterd/internal/contract"
)

// TestHandlerKeepsTwoCuts: the blobs of a manifest stay fetchable after
// one newer manifest was cut, and go after two.
func TestHandlerKeepsTwoCuts(t *testing.T) {
	e := openEngine(t, "n")
	srv := httptest.NewServer(NewHandler(e, Options{}))
	defer srv.Close()
	get := func(path string) (int, []byte) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	var roots []Hash
	for i := 0; i < 3; i++ {
		if _, err := e.Add(bg, "c:x", 1, contract.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		code, m := get("/admin/snapshot/manifest")
		if code != 200 {
			t.Fatalf("manifest: %d %s", code, m)
		}
		roots = append(roots, Sum(m))
		if code, b := get("/admin/snapshot/blobs/" + roots[i].String()); code != 200 || Sum(b) != roots[i] {
			t.Fatalf("blob of the new manifest: %d", code)
		}
		if i >= 1 {
			if code, _ := get("/admin/snapshot/blobs/" + roots[i-1].String()); code != 200 {
				t.Fatalf("previous manifest after one newer: %d", code)
			}
		}
	}
	if code, _ := get("/admin/snapshot/blobs/" + roots[0].String()); code != 404 {
		t.Fatalf("manifest two cuts old: %d, want 404", code)
	}
}
