package resp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/counterd/counterd/internal/auth"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/httpjson"
)

// writeReply writes r back as RESP2 (the inverse of ParseReply).
func writeReply(c *client, r Reply) {
	switch r.Type {
	case "status":
		c.writeStatus(r.Text)
	case "error":
		c.writeError(r.Text)
	case "integer":
		c.writeInt(r.Int)
	case "bulk":
		c.writeBulkString(r.Text)
	case "nil":
		c.writeNull()
	case "array":
		c.writeArray(len(r.Elems))
		for _, e := range r.Elems {
			writeReply(c, e)
		}
	}
}

// TestParseReplyRoundTrip: any reply the client's writers produce parses
// back to a Reply that writes the same bytes, taking all of them; every
// strict prefix of it is refused.
func TestParseReplyRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := &client{proto: 2}
		writeRandomReply(t, in, 0)
		if rapid.Bool().Draw(t, "wide") { // 64-bit integers and nesting
			in.out = in.out[:0]
			in.writeArray(2)
			in.writeInt(rapid.Int64().Draw(t, "int64"))
			in.writeArray(1)
			in.writeBulk([]byte(rapid.String().Draw(t, "nested")))
		}
		r, n, err := ParseReply(in.out)
		if err != nil || n != len(in.out) {
			t.Fatalf("ParseReply(%q) = %v, %d, %v", in.out, r, n, err)
		}
		out := &client{proto: 2}
		writeReply(out, r)
		if !bytes.Equal(out.out, in.out) {
			t.Fatalf("round trip of %q gave %q", in.out, out.out)
		}
		if _, err := json.Marshal(r); err != nil {
			t.Fatalf("marshal %v: %v", r, err)
		}
		cut := rapid.IntRange(0, len(in.out)-1).Draw(t, "cut")
		if _, _, err := ParseReply(in.out[:cut]); !errors.Is(err, errBadReply) {
			t.Fatalf("ParseReply of the prefix %q: %v, want errBadReply", in.out[:cut], err)
		}
	})
}

// FuzzParseReply: arbitrary bytes never panic, and what parses is a
// reply that writes back (canonically) to bytes that parse to it again,
// all of them taken.
func FuzzParseReply(f *testing.F) {
	for _, s := range []string{"+OK\r\n", "-ERR x\r\n", ":-5\r\n", "$3\r\nabc\r\n", "$-1\r\n", "*2\r\n:1\r\n*-1\r\n", "*9999999\r\n", "$5\r\nab\r\n", ":+1\r\n", "*00\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, n, err := ParseReply(b)
		if err != nil {
			if !errors.Is(err, errBadReply) {
				t.Fatalf("ParseReply(%q): untyped error %v", b, err)
			}
			return
		}
		if n <= 0 || n > len(b) {
			t.Fatalf("ParseReply(%q) took %d bytes", b, n)
		}
		out := &client{proto: 2}
		writeReply(out, r)
		again, m, err := ParseReply(out.out)
		if err != nil || m != len(out.out) || !reflect.DeepEqual(again, r) {
			t.Fatalf("ParseReply(%q) = %v, which writes %q, which parses to %v, %d, %v", b, r, out.out, again, m, err)
		}
	})
}

// FuzzParseCommandJSON: the body parser accepts exactly the JSON arrays of
// one or more strings with a non-empty first one, as encoding/json reads
// them, and refuses everything else with a typed error.
func FuzzParseCommandJSON(f *testing.F) {
	for _, s := range []string{`["INCR","a"]`, `[]`, `[""]`, `["GET", 1]`, `{"a":1}`, `["a"] x`, `["\u00e9"]`, ` ["PING"] `, `[`, `null`, `"x"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		args, err := ParseCommandJSON(b, 8, 16)
		var want []string
		jerr := json.Unmarshal(b, &want)
		ok := jerr == nil && bytes.HasPrefix(httpjson.TrimSpace(b), []byte("[")) && len(want) > 0 && want[0] != "" && len(want) <= 8
		for _, a := range want {
			ok = ok && len(a) <= 16
		}
		if ok != (err == nil) {
			t.Fatalf("ParseCommandJSON(%q) = %q, %v; encoding/json: %q, %v", b, args, err, want, jerr)
		}
		if err != nil {
			if !errors.Is(err, httpjson.ErrInvalidJSON) && !errors.Is(err, contract.ErrInvalidArgument) {
				t.Fatalf("ParseCommandJSON(%q): untyped error %v", b, err)
			}
			return
		}
		if !reflect.DeepEqual(args, want) {
			t.Fatalf("ParseCommandJSON(%q) = %q, want %q", b, args, want)
		}
	})
}

// TestHTTPAllowed: the counter commands run over HTTP; connection state,
// transactions and scripts do not.
func TestHTTPAllowed(t *testing.T) {
	s := New(nil, Options{})
	defer s.Close()
	for _, name := range []string{"INCR", "incrby", "GET", "SET", "MGET", "DEL", "EXPIRE", "TTL", "TYPE", "PFADD", "PFCOUNT", "HINCRBY", "HGETALL", "SCAN", "KEYS", "EXISTS", "PING", "ECHO", "DBSIZE"} {
		if !s.HTTPAllowed(name) {
			t.Errorf("%s refused over HTTP", name)
		}
	}
	for _, name := range []string{"MULTI", "EXEC", "WATCH", "DISCARD", "AUTH", "HELLO", "CLIENT", "SELECT", "QUIT", "RESET", "EVAL", "EVALSHA", "EVAL_RO", "SCRIPT", "CONFIG", "nosuch"} {
		if s.HTTPAllowed(name) {
			t.Errorf("%s allowed over HTTP", name)
		}
	}
}

// TestHTTPExec: POST /resp runs commands through the dispatcher with the
// user's grants: a writer of ns:* increments its counters and reads them
// back exactly at 2^63-1, is refused another namespace's key and a
// command it has no grant for, exactly as on a RESP connection; bad
// bodies get the API's typed errors.
func TestHTTPExec(t *testing.T) {
	cfg := engine.DefaultConfig()
	cfg.InMemory, cfg.NodeID = true, "test"
	eng, err := engine.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	const tok = "writer-token-0123456789"
	table, err := auth.Parse(strings.NewReader(fmt.Sprintf("users:\n  w:\n    tokens: [%s]\n    grants: {\"ns:*\": write}\n", auth.Hash([]byte(tok)))))
	if err != nil {
		t.Fatal(err)
	}
	store := auth.NewStore(table)
	s := New(engine.Local(eng), Options{Auth: store})
	defer s.Close()
	p, err := store.Authenticate("", []byte(tok))
	if err != nil {
		t.Fatal(err)
	}
	h := s.HTTPHandler(HTTPOptions{})
	do := func(p *auth.Principal, method, body string) (int, string) {
		req := httptest.NewRequest(method, "/resp", strings.NewReader(body))
		ctx := context.Background()
		if p != nil {
			ctx = auth.WithToken(auth.NewContext(ctx, p), tok)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req.WithContext(ctx))
		return rec.Code, strings.TrimSpace(rec.Body.String())
	}
	cases := []struct{ body, want string }{
		{`["INCRBY","ns:a","5"]`, `{"reply":{"type":"integer","value":5}}`},
		{`["set","ns:a","9223372036854775807"]`, `{"reply":{"type":"status","value":"OK"}}`},
		{`["GET","ns:a"]`, `{"reply":{"type":"bulk","value":"9223372036854775807"}}`},
		{`["INCR","ns:a"]`, `{"reply":{"type":"error","value":"ERR increment or decrement would overflow"}}`},
		{`["MGET","ns:a","ns:none"]`, `{"reply":{"type":"array","value":[{"type":"bulk","value":"9223372036854775807"},{"type":"nil"}]}}`},
		{`["INCR","other:a"]`, `{"reply":{"type":"error","value":"` + errNoPermKey + `"}}`},
		{`["DEL","ns:a"]`, `{"reply":{"type":"error","value":"` + errNoPermCmd("del") + `"}}`},
		{`["NOSUCH","x"]`, `{"reply":{"type":"error","value":"ERR unknown command 'NOSUCH', with args beginning with: 'x' "}}`},
		{`["GET"]`, `{"reply":{"type":"error","value":"ERR wrong number of arguments for 'get' command"}}`},
		{`["MULTI"]`, `{"reply":{"type":"error","value":"ERR 'multi' is not available over HTTP: only counter commands run there (a request is a connection of one command); use a Redis client on the RESP port"}}`},
		{`["PING"]`, `{"reply":{"type":"status","value":"PONG"}}`},
	}
	for _, c := range cases {
		code, got := do(p, "POST", c.body)
		if code != 200 || got != c.want {
			t.Errorf("POST /resp %s: %d %s\nwant 200 %s", c.body, code, got, c.want)
		}
	}
	// The same commands on a RESP connection of the same user answer the
	// same (the one dispatcher).
	for _, body := range []string{`["GET","ns:a"]`, `["INCR","other:a"]`, `["DEL","ns:a"]`} {
		var args []string
		_ = json.Unmarshal([]byte(body), &args)
		c := &client{s: s, proto: 2, scratch: make([]byte, 0, 32), ctx: context.Background(), onLoop: true}
		s.login(c, nil, []byte(tok))
		bargs := make([][]byte, len(args))
		for i, a := range args {
			bargs[i] = []byte(a)
		}
		s.exec(c, bargs)
		want, _, _ := ParseReply(c.out)
		if got := s.Exec(context.Background(), p, tok, "", args); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: HTTP %v, RESP %v", body, got, want)
		}
	}
	for _, c := range []struct {
		method, body string
		status       int
		code         string
	}{
		{"POST", `[]`, 400, httpjson.CodeInvalidArgument},
		{"POST", `[""]`, 400, httpjson.CodeInvalidArgument},
		{"POST", `["GET", 1]`, 400, httpjson.CodeInvalidArgument},
		{"POST", `{"cmd":"GET"}`, 400, httpjson.CodeInvalidArgument},
		{"POST", `["GET"`, 400, httpjson.CodeInvalidJSON},
		{"POST", `["GET"] []`, 400, httpjson.CodeInvalidJSON},
		{"GET", ``, 405, httpjson.CodeMethodNotAllowed},
	} {
		code, got := do(p, c.method, c.body)
		if code != c.status || !strings.Contains(got, `"code":"`+c.code+`"`) {
			t.Errorf("%s /resp %s: %d %s, want %d %s", c.method, c.body, code, got, c.status, c.code)
		}
	}
	if code, got := do(nil, "POST", `["PING"]`); code != http.StatusUnauthorized {
		t.Errorf("without a user: %d %s", code, got)
	}
	// Integers past 2^53 in a reply stay exact in the JSON.
	r := Reply{Type: "integer", Int: -9223372036854775808}
	if b, _ := json.Marshal(r); string(b) != `{"type":"integer","value":-9223372036854775808}` {
		t.Errorf("marshal: %s", b)
	}
	if b, _ := json.Marshal(Reply{Type: "bulk", Text: "\xff", Binary: true}); string(b) != `{"type":"bulk","base64":"/w=="}` {
		t.Errorf("binary bulk: %s", b)
	}
}
