package resp

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/counterd/counterd/internal/auth"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/httpjson"
)

// The HTTP command box (docs/http-api.md, "Redis commands over HTTP"):
// POST /resp runs one Redis-protocol command, given as a JSON array of
// strings, through the same dispatcher as a RESP connection (lookup,
// arity, the user's grants on the command and its keys, the scripting
// gate, metrics) and answers its reply as JSON. Only the counter commands
// run there (HTTPAllowed): a request is a connection of one command, so
// connection state (MULTI, WATCH, AUTH, HELLO, CLIENT, SELECT) and scripts
// have no meaning in it.

// HTTPRoute is the command box's route, as "METHOD pattern".
const HTTPRoute = "POST /resp"

// maxHTTPReplyDepth bounds the nesting of a reply rendered as JSON.
const maxHTTPReplyDepth = 32

// HTTPAllowed reports whether the command name (any case) may run over
// HTTP: a command that reads or writes counters, outside transactions
// and scripts, or PING and ECHO.
func (s *Server) HTTPAllowed(name string) bool {
	cmd := s.cmds[string(lowerASCII([]byte(name)))]
	return cmd != nil && httpAllowed(cmd)
}

func httpAllowed(cmd *command) bool {
	switch cmd.name {
	case "ping", "echo":
		return true
	case "script":
		return false
	}
	return cmd.flags&(flagWrite|flagReadonly) != 0 && cmd.flags&flagTxControl == 0 && !isScriptCmd(cmd.name)
}

// Reply is one RESP2 reply as the command box answers it in JSON:
//
//	{"type":"status","value":"OK"}     simple string
//	{"type":"error","value":"ERR ..."} error
//	{"type":"integer","value":42}      integer (exact: 64-bit)
//	{"type":"bulk","value":"42"}       bulk string (UTF-8 text)
//	{"type":"bulk","base64":"..."}     bulk string that is not UTF-8
//	{"type":"nil"}                     null bulk string or array
//	{"type":"array","value":[...]}     array of replies
type Reply struct {
	Type   string
	Text   string // status, error, bulk
	Binary bool   // a bulk string that is not valid UTF-8
	Int    int64
	Elems  []Reply
}

// MarshalJSON writes r in the form documented on Reply.
func (r Reply) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"type":`)
	b.WriteString(strconv.Quote(r.Type))
	switch r.Type {
	case "status", "error":
		t, _ := json.Marshal(r.Text)
		b.WriteString(`,"value":`)
		b.Write(t)
	case "bulk":
		if r.Binary {
			b.WriteString(`,"base64":"`)
			b.WriteString(base64.StdEncoding.EncodeToString([]byte(r.Text)))
			b.WriteByte('"')
		} else {
			t, _ := json.Marshal(r.Text)
			b.WriteString(`,"value":`)
			b.Write(t)
		}
	case "integer":
		b.WriteString(`,"value":`)
		b.WriteString(strconv.FormatInt(r.Int, 10))
	case "array":
		b.WriteString(`,"value":[`)
		for i, e := range r.Elems {
			if i > 0 {
				b.WriteByte(',')
			}
			eb, err := e.MarshalJSON()
			if err != nil {
				return nil, err
			}
			b.Write(eb)
		}
		b.WriteByte(']')
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// errBadReply: the bytes are not one complete RESP2 reply.
var errBadReply = errors.New("resp: malformed reply")

// ParseReply reads one RESP2 reply from the start of b and returns it
// with the number of bytes it took.
func ParseReply(b []byte) (Reply, int, error) {
	return parseReply(b, 0)
}

func parseReply(b []byte, depth int) (Reply, int, error) {
	if depth > maxHTTPReplyDepth {
		return Reply{}, 0, fmt.Errorf("%w: nested deeper than %d", errBadReply, maxHTTPReplyDepth)
	}
	end := bytes.Index(b, []byte("\r\n"))
	if len(b) < 3 || end < 1 {
		return Reply{}, 0, fmt.Errorf("%w: no complete line", errBadReply)
	}
	line, next := b[1:end], end+2
	if bytes.IndexAny(line, "\r\n") >= 0 {
		return Reply{}, 0, fmt.Errorf("%w: CR or LF inside a line", errBadReply)
	}
	switch b[0] {
	case '+':
		return Reply{Type: "status", Text: string(line)}, next, nil
	case '-':
		return Reply{Type: "error", Text: string(line)}, next, nil
	case ':':
		n, err := strconv.ParseInt(string(line), 10, 64)
		if err != nil {
			return Reply{}, 0, fmt.Errorf("%w: integer %q", errBadReply, line)
		}
		return Reply{Type: "integer", Int: n}, next, nil
	case '$':
		l, err := strconv.Atoi(string(line))
		if err != nil || l < -1 {
			return Reply{}, 0, fmt.Errorf("%w: bulk length %q", errBadReply, line)
		}
		if l == -1 {
			return Reply{Type: "nil"}, next, nil
		}
		if len(b)-next < l+2 || b[next+l] != '\r' || b[next+l+1] != '\n' {
			return Reply{}, 0, fmt.Errorf("%w: bulk string shorter than %d bytes", errBadReply, l)
		}
		text := string(b[next : next+l])
		return Reply{Type: "bulk", Text: text, Binary: !utf8.ValidString(text)}, next + l + 2, nil
	case '*':
		l, err := strconv.Atoi(string(line))
		if err != nil || l < -1 {
			return Reply{}, 0, fmt.Errorf("%w: array length %q", errBadReply, line)
		}
		if l == -1 {
			return Reply{Type: "nil"}, next, nil
		}
		if l > len(b) { // each element takes at least one byte
			return Reply{}, 0, fmt.Errorf("%w: array of %d in %d bytes", errBadReply, l, len(b))
		}
		r := Reply{Type: "array", Elems: make([]Reply, 0, l)}
		for range l {
			e, m, err := parseReply(b[next:], depth+1)
			if err != nil {
				return Reply{}, 0, err
			}
			r.Elems = append(r.Elems, e)
			next += m
		}
		return r, next, nil
	}
	return Reply{}, 0, fmt.Errorf("%w: type byte %q", errBadReply, b[0])
}

// ParseCommandJSON reads the command box's request body: a JSON array of
// one or more strings, the command name first. Bad bodies are
// httpjson.ErrInvalidJSON or contract.ErrInvalidArgument.
func ParseCommandJSON(body []byte, maxArgs, maxArgLen int) ([]string, error) {
	body = httpjson.TrimSpace(body)
	if len(body) == 0 || body[0] != '[' {
		if len(body) > 0 && json.Valid(body) {
			return nil, fmt.Errorf("%w: body must be a JSON array of strings, the command and its arguments", contract.ErrInvalidArgument)
		}
		return nil, fmt.Errorf("%w: body is not a JSON array", httpjson.ErrInvalidJSON)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	var args []string
	if err := dec.Decode(&args); err != nil {
		return nil, httpjson.DecodeError(err)
	}
	if rest := httpjson.TrimSpace(body[dec.InputOffset():]); len(rest) > 0 {
		return nil, fmt.Errorf("%w: trailing data after the JSON array", httpjson.ErrInvalidJSON)
	}
	switch {
	case len(args) == 0:
		return nil, fmt.Errorf("%w: empty command: the array holds the command name and its arguments", contract.ErrInvalidArgument)
	case args[0] == "":
		return nil, fmt.Errorf("%w: empty command name", contract.ErrInvalidArgument)
	case maxArgs > 0 && len(args) > maxArgs:
		return nil, fmt.Errorf("%w: %d arguments, at most %d", contract.ErrInvalidArgument, len(args), maxArgs)
	}
	for i, a := range args {
		if maxArgLen > 0 && len(a) > maxArgLen {
			return nil, fmt.Errorf("%w: argument %d is %d bytes, at most %d", contract.ErrInvalidArgument, i, len(a), maxArgLen)
		}
	}
	return args, nil
}

// Exec runs one command for the user p (nil without Options.Auth) as a
// fresh RESP2 connection of one command would, through the dispatcher
// every connection uses, and returns its reply. token is p's token, sent
// along with checks forwarded to another node; addr is the client's
// address (CLIENT-style logs). A command HTTPAllowed refuses is answered
// with an error reply, as is a user-less call with Options.Auth.
// Admission is the caller's: the HTTP front end admitted the request.
func (s *Server) Exec(ctx context.Context, p *auth.Principal, token, addr string, args []string) Reply {
	c := &client{
		s: s, id: s.nextID.Add(1), addr: addr, created: time.Now(), proto: 2,
		scratch: make([]byte, 0, 32), ctx: ctx,
		// Not on a loop, but admitted already: the dispatcher must not
		// take a second admission slot for it (see dispatch).
		onLoop: true,
	}
	if s.opts.Auth != nil && p != nil {
		// The digest lets principal() resolve the user again after a
		// reload of the tokens file, as for a connection.
		c.auth = authState{ok: true, user: p.User, token: token, digest: auth.Hash([]byte(token)), gen: s.opts.Auth.Gen(), p: p}
	}
	bargs := make([][]byte, len(args))
	for i, a := range args {
		bargs[i] = []byte(a)
	}
	if cmd := s.cmds[string(lowerASCII([]byte(args[0])))]; cmd != nil && !httpAllowed(cmd) {
		return Reply{Type: "error", Text: "ERR '" + cmd.name + "' is not available over HTTP: only counter commands run there (a request is a connection of one command); use a Redis client on the RESP port"}
	}
	c.tstart = nanotime()
	s.exec(c, bargs)
	s.totalCmds.Add(c.ncmds)
	r, n, err := ParseReply(c.out)
	if err != nil || n != len(c.out) {
		s.log.Error("resp: command over HTTP wrote a malformed reply", "cmd", string(truncate(bargs[0], 64)), "err", err, "len", len(c.out), "read", n, "stack", string(debug.Stack()))
		return Reply{Type: "error", Text: "ERR internal error"}
	}
	return r
}

// HTTPOptions configure HTTPHandler.
type HTTPOptions struct {
	// MaxBodyBytes bounds the request body (the HTTP API's --max-body).
	MaxBodyBytes int64
}

// HTTPHandler serves HTTPRoute: the body's command runs through Exec for
// the request's user (auth.FromContext, set by the server's
// authentication) and the answer is {"reply": Reply}, HTTP 200 whatever
// the command answered, errors included. A body that is not a command is
// answered 400 with the API's error body.
func (s *Server) HTTPHandler(opts HTTPOptions) http.Handler {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 1 << 20
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			httpjson.WriteError(w, fmt.Errorf("%w: %s runs a command sent with POST", httpjson.ErrMethodNotAllowed, r.URL.Path))
			return
		}
		body, err := httpjson.ReadBody(w, r, opts.MaxBodyBytes)
		if err != nil {
			httpjson.WriteError(w, err)
			return
		}
		args, err := ParseCommandJSON(body, s.opts.MaxArgs, s.opts.MaxBulkLen)
		if err != nil {
			httpjson.WriteError(w, err)
			return
		}
		p := auth.FromContext(r.Context())
		if s.opts.Auth != nil && p == nil {
			httpjson.WriteError(w, auth.ErrUnauthenticated)
			return
		}
		reply := s.Exec(r.Context(), p, auth.TokenFromContext(r.Context()), r.RemoteAddr, args)
		_ = httpjson.WriteJSON(w, http.StatusOK, struct {
			Reply Reply `json:"reply"`
		}{reply})
	})
}
