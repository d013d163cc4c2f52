package resp

import (
	"context"
	"github.com/counterd/counterd/internal/shed"
	"strings"

	"github.com/counterd/counterd/internal/auth"
)

// Replies of authentication and authorization, worded like Redis's.
const (
	errNoAuth      = "NOAUTH Authentication required."
	errHelloNoAuth = "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time"
	errWrongPass   = "WRONGPASS invalid username-password pair or user is disabled."
	errNoPermKey   = "NOPERM No permissions to access a key"
)

func errNoPermCmd(name string) string {
	return "NOPERM this user has no permissions to run the '" + name + "' command"
}

// authState is a connection's login: the digest of its token, resolved to
// a principal again whenever the tokens file is reloaded, so a removed
// token stops working on open connections too.
type authState struct {
	ok     bool // a token was accepted
	user   string
	token  string // sent along with checks forwarded to another node
	digest auth.Digest
	gen    uint64
	p      *auth.Principal
}

// principal returns the connection's user, or nil if it has not
// authenticated or its token was removed by a reload.
func (c *client) principal(store *auth.Store) *auth.Principal {
	if !c.auth.ok {
		return nil
	}
	if g := store.Gen(); g != c.auth.gen {
		p, err := store.Resolve(c.auth.user, c.auth.digest)
		if err != nil {
			c.auth = authState{}
			return nil
		}
		c.auth.p, c.auth.gen = p, g
	}
	return c.auth.p
}

// authContext returns ctx with the connection's credentials.
func (c *client) authContext(ctx context.Context) context.Context {
	return auth.WithToken(auth.NewContext(ctx, c.auth.p), c.auth.token)
}

// login checks user and token and, if they match, makes them the
// connection's; a failed attempt leaves the current login, as in Redis.
func (s *Server) login(c *client, user, token []byte) bool {
	store := s.opts.Auth
	gen := store.Gen()
	d := auth.Hash(token)
	p, err := store.Resolve(string(user), d)
	if err != nil || len(token) == 0 {
		store.Failed("resp", auth.ReasonBadToken)
		return false
	}
	c.auth = authState{ok: true, user: string(user), token: string(token), digest: d, gen: gen, p: p}
	return true
}

// cmdAuthTokens is AUTH with --auth: AUTH token, or AUTH user token.
func cmdAuthTokens(s *Server, c *client, args [][]byte) {
	var ok bool
	switch len(args) {
	case 2:
		ok = s.login(c, nil, args[1])
	case 3:
		ok = s.login(c, args[1], args[2])
	default:
		c.writeError(errSyntax)
		return
	}
	if !ok {
		c.writeError(errWrongPass)
		return
	}
	c.writeOK()
}

// helloAuth runs HELLO's AUTH option; false means an error was written.
// Without --auth every user is accepted ("nopass").
func (s *Server) helloAuth(c *client, user, token []byte) bool {
	if s.opts.Auth == nil {
		return true
	}
	if !s.login(c, user, token) {
		c.writeError(errWrongPass)
		return false
	}
	return true
}

// helloAuthed refuses HELLO from a connection that is not authenticated
// (after its AUTH option, if any); false means an error was written.
func (s *Server) helloAuthed(c *client) bool {
	if s.opts.Auth == nil || c.principal(s.opts.Auth) != nil {
		return true
	}
	s.opts.Auth.Failed("resp", auth.ReasonNoToken)
	c.writeError(errHelloNoAuth)
	return false
}

// authorize checks cmd against the connection's user: the command's
// permission, then every key it names. false means an error was written.
func (s *Server) authorize(c *client, cmd *command, args [][]byte) bool {
	e := s.accessError(c, cmd, args)
	if e == "" {
		return true
	}
	s.opts.Auth.Failed("resp", authFailureReason(e))
	c.writeError(e)
	return false
}

// authFailureReason is the auth-failure metric's reason for a refusal.
func authFailureReason(e string) string {
	if strings.HasPrefix(e, "NOAUTH") {
		return auth.ReasonNoToken
	}
	return auth.ReasonForbidden
}

// accessError is the reply refusing cmd to the connection's user, or ""
// when it may run.
func (s *Server) accessError(c *client, cmd *command, args [][]byte) string {
	a, ok := commandAccess[cmd.name]
	need := a.need
	if a.sub != nil {
		need = a.sub(args)
	}
	if ok && need.Perm == auth.Public {
		return ""
	}
	p := c.principal(s.opts.Auth)
	if p == nil {
		return errNoAuth
	}
	if !ok || !p.Allows(need) {
		return errNoPermCmd(cmd.name)
	}
	if need.All {
		return ""
	}
	if a.pattern != nil {
		if !p.CanPattern(need.Perm, a.pattern(args)) {
			return errNoPermKey
		}
		return ""
	}
	if cmd.first <= 0 {
		return ""
	}
	last := cmd.last
	if last < 0 {
		last += len(args)
	}
	for i := cmd.first; i <= last && i < len(args); i += cmd.step {
		perm := need.Perm
		if a.sourcesRead && i > cmd.first {
			perm = auth.Read
		}
		if k := i - cmd.first; k < len(a.keyPerms) {
			perm = a.keyPerms[k]
		}
		if !p.Can(perm, str(args[i])) {
			return errNoPermKey
		}
	}
	return ""
}

// execDenials checks the queued commands again at EXEC: the tokens file
// may have been reloaded (SIGHUP) since they were queued. It returns nil
// when every command may still run, else each command's refusal ("" for
// the ones that may). Like Redis, EXEC then answers the refused commands
// with their -NOPERM (or -NOAUTH) inside its reply and runs the others.
func (s *Server) execDenials(c *client, queue []queued) []string {
	if s.opts.Auth == nil {
		return nil
	}
	var denied []string
	for i, q := range queue {
		e := s.accessError(c, q.cmd, q.args)
		if e == "" {
			continue
		}
		if denied == nil {
			denied = make([]string, len(queue))
		}
		denied[i] = e
		s.opts.Auth.Failed("resp", authFailureReason(e))
	}
	return denied
}

// admissionKey is the client c's commands are admitted as (Options.
// Admission): its user once it has authenticated (with Options.Auth),
// so that a user's connections from many addresses share one queue and
// users behind one address do not; else its address.
func (s *Server) admissionKey(c *client) shed.Key {
	if s.opts.Auth != nil {
		if p := c.principal(s.opts.Auth); p != nil {
			return shed.UserKey(p.User)
		}
	}
	return shed.ClientKey(c.key)
}
