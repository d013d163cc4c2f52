package resp

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/counterd/counterd/internal/api/ratelimitapi"
)

// TestDocsNameEveryCommand: docs/resp.md names every command the server
// registers (RL.CHECK included), so the command list cannot drift from
// the table.
func TestDocsNameEveryCommand(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/resp.md")
	if err != nil {
		t.Fatal(err)
	}
	names := []string{ratelimitapi.RESPCommandName}
	for name := range buildCommands() {
		names = append(names, name)
	}
	for _, name := range names {
		re := regexp.MustCompile(`(^|[^A-Z.])` + regexp.QuoteMeta(strings.ToUpper(name)) + `($|[^A-Z])`)
		if !re.Match(doc) {
			t.Errorf("docs/resp.md does not name %s", strings.ToUpper(name))
		}
	}
}
