package server

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/auth"
)

// lockedBuffer is a bytes.Buffer safe for the logger's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestTokensFileNeverLogsTokens: a tokens file with a plaintext token
// written where a digest (or a list, or a level) belongs is refused at
// start and on every SIGHUP reload, and neither the start's error nor the
// log (text and JSON handlers, debug level) holds any part of the token:
// no four consecutive bytes of it (it is upper-case letters, which no log
// line spells four in a row). The log names the user, the entry and its
// line instead. The previous tokens stay in force.
func TestTokensFileNeverLogsTokens(t *testing.T) {
	const secret = "QWERTYUIOPASDFGHJKLZXCVBNMQWERTYUIOP"
	good := auth.Hash([]byte("good-token-0123456789")).String()
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	write := func(src string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	leaks := func(s string) bool {
		for i := 0; i+4 <= len(secret); i++ {
			if strings.Contains(s, secret[i:i+4]) {
				return true
			}
		}
		return false
	}
	bad := []string{
		fmt.Sprintf("users:\n  ingest:\n    tokens:\n      - %s\n      - %s\n    grants: {\"x:*\": write}\n", good, secret),
		fmt.Sprintf("users:\n  ingest:\n    tokens: %s\n", secret),
		fmt.Sprintf("users:\n  ingest:\n    tokens: [%s]\n    grants: {\"x:*\": %s}\n", good, secret),
		fmt.Sprintf("users:\n  ingest:\n    tokens: [%s]\n    %s: 1\n", good, secret),
		fmt.Sprintf("users:\n  ingest:\n    tokens: [\"sha256:%s\"]\n", (secret + secret)[:64]),
		fmt.Sprintf("users:\n  ingest: %s\n", secret),
	}
	var logs lockedBuffer
	opts := &slog.HandlerOptions{Level: slog.LevelDebug}
	log := slog.New(slog.NewTextHandler(&logs, opts))
	jlog := slog.New(slog.NewJSONHandler(&logs, opts))
	cfg := DefaultConfig()
	cfg.Auth = path

	// At start: the error that stops it.
	for _, src := range bad {
		write(src)
		if _, _, err := openAuth(cfg, log); err == nil {
			t.Fatalf("started with\n%s", src)
		} else if leaks(err.Error()) {
			t.Fatalf("the start's error quotes the token: %v", err)
		}
	}

	// On reload.
	for i, l := range []*slog.Logger{log, jlog} {
		write(fmt.Sprintf("users:\n  ingest:\n    tokens: [%s]\n    grants: {\"x:*\": write}\n", good))
		store, stop, err := openAuth(cfg, l)
		if err != nil {
			t.Fatal(err)
		}
		for j, src := range bad {
			write(src)
			before := strings.Count(logs.String(), "tokens file reload failed")
			if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for strings.Count(logs.String(), "tokens file reload failed") == before {
				if time.Now().After(deadline) {
					t.Fatalf("logger %d, file %d: no 'tokens file reload failed' line after SIGHUP", i, j)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		if _, err := store.Authenticate("", []byte("good-token-0123456789")); err != nil || store.Gen() != 1 {
			t.Fatalf("the previous tokens must stay in force: %v, generation %d", err, store.Gen())
		}
		stop()
	}
	out := logs.String()
	if leaks(out) {
		t.Fatalf("the log quotes part of the token:\n%s", out)
	}
	for _, want := range []string{`user \"ingest\", token 2, line 5`, "counterctl auth hash"} {
		if !strings.Contains(out, want) {
			t.Errorf("the log does not say %s:\n%s", want, out)
		}
	}
}
