package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/counterd/counterd/internal/auth"
)

// setupAuth: "auth token" prints a new random token and the digest to put
// in the tokens file; "auth hash" prints the digest of a token read from
// stdin (never from the command line, where ps would show it).
func setupAuth(fs *flag.FlagSet) runFunc {
	return func(_ context.Context, e *env, args []string) error {
		switch args[0] {
		case "token":
			var b [32]byte
			if _, err := rand.Read(b[:]); err != nil {
				return err
			}
			tok := base64.RawURLEncoding.EncodeToString(b[:])
			if e.json {
				return printJSON(e.stdout, map[string]string{"token": tok, "digest": auth.Hash([]byte(tok)).String()})
			}
			fmt.Fprintf(e.stdout, "token:  %s\ndigest: %s\n", tok, auth.Hash([]byte(tok)))
			return nil
		case "hash":
			tok, err := readToken(os.Stdin)
			if err != nil {
				return err
			}
			if len(tok) < auth.MinTokenLen {
				return usagef("auth hash: a token must be at least %d characters (make one with 'counterctl auth token')", auth.MinTokenLen)
			}
			fmt.Fprintln(e.stdout, auth.Hash([]byte(tok)))
			return nil
		}
		return usagef("auth: unknown subcommand %q (token or hash)", args[0])
	}
}

// readToken reads the first line of r, without its line ending.
func readToken(r io.Reader) (string, error) {
	line, err := bufio.NewReader(io.LimitReader(r, 4096)).ReadString('\n')
	if err != nil && err != io.EOF {
		return "", err
	}
	return strings.TrimRight(line, "\r\n"), nil
}
