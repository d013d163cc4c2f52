package httpref

import (
	"os"
	"strings"
	"testing"
)

// TestReferenceUpToDate: docs/http-reference.md is what the generator
// makes of openapi.json (run go generate ./internal/api/httpapi).
func TestReferenceUpToDate(t *testing.T) {
	spec, err := os.ReadFile("../openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	got, err := Markdown(spec)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("../../../../docs/http-reference.md")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatal("docs/http-reference.md is stale: run go generate ./internal/api/httpapi (make docs)")
	}
	for _, s := range []string{"### POST /ratelimit/check", "| 429 |", "### GET /cluster", "### POST /counters/{id}/increment", "`rate_limited`"} {
		if !strings.Contains(string(got), s) {
			t.Errorf("reference lacks %q", s)
		}
	}
}
