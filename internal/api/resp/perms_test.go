package resp

import (
	"testing"

	"github.com/counterd/counterd/internal/api/ratelimitapi"
)

// TestCommandAccessCoversTable: every command the server knows maps to
// exactly one permission, and the table names no command that does not
// exist.
func TestCommandAccessCoversTable(t *testing.T) {
	cmds := buildCommands()
	cmds[ratelimitapi.RESPCommandName] = &command{name: ratelimitapi.RESPCommandName}
	cmds[EventsCommandName] = eventsCommand(nil)       // registered with Options.Events
	cmds[ScopedGetCommandName] = scopedGetCommand(nil) // registered by New
	for name := range cmds {
		if _, ok := commandAccess[name]; !ok {
			t.Errorf("command %q has no entry in commandAccess", name)
		}
	}
	for name := range commandAccess {
		if _, ok := cmds[name]; !ok {
			t.Errorf("commandAccess names %q, which is not a command", name)
		}
	}
}
