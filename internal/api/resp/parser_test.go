package resp

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

func testParser() *parser {
	return &parser{maxArgs: DefaultMaxArgs, maxBulk: DefaultMaxBulkLen, maxCmd: DefaultMaxCommandBytes}
}

// feedAll runs a stream through the parser in the given chunks the way a
// connection does, returning the commands (args joined by '|').
func feedAll(t *testing.T, p *parser, chunks [][]byte) []string {
	t.Helper()
	var buf []byte
	var out []string
	for _, ch := range chunks {
		buf = append(buf, ch...)
		for len(buf) > 0 {
			n, args, perr := p.parse(buf)
			if perr != "" {
				t.Fatalf("protocol error %q at %q", perr, buf[:min(len(buf), 40)])
			}
			if n == 0 {
				break
			}
			buf = buf[n:]
			if args != nil {
				parts := make([]string, len(args))
				for i, a := range args {
					parts[i] = string(a)
				}
				out = append(out, strings.Join(parts, "|"))
			}
		}
	}
	if len(buf) != 0 {
		t.Fatalf("%d bytes left over", len(buf))
	}
	return out
}

// Well-formed RESP parses the same however the stream is split.
func TestParserAnySplit(t *testing.T) {
	var b strings.Builder
	var want []string
	for i := 0; i < 200; i++ {
		n := 1 + i%5
		fmt.Fprintf(&b, "*%d\r\n", n)
		var parts []string
		for j := 0; j < n; j++ {
			arg := strings.Repeat(string(rune('a'+j)), (i*7+j*13)%40)
			if j == 2 {
				arg = "\r\n$*" + arg // payloads may contain anything
			}
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(arg), arg)
			parts = append(parts, arg)
		}
		want = append(want, strings.Join(parts, "|"))
		if i%17 == 0 {
			b.WriteString("PING  inline \"quoted \\x41\\n\" 'it\\'s'\r\n")
			want = append(want, "PING|inline|quoted A\n|it's")
			b.WriteString("*0\r\n\r\n")
		}
	}
	stream := []byte(b.String())
	wantS := strings.Join(want, "\n")
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 200; trial++ {
		var chunks [][]byte
		for rest := stream; len(rest) > 0; {
			n := 1 + rng.IntN(min(len(rest), 64))
			if trial%3 == 0 {
				n = 1
			}
			chunks = append(chunks, rest[:n])
			rest = rest[n:]
		}
		got := feedAll(t, testParser(), chunks)
		if g := strings.Join(got, "\n"); g != wantS {
			t.Fatalf("trial %d: parsed differently", trial)
		}
	}
}

func TestParserErrors(t *testing.T) {
	p := &parser{maxArgs: 10, maxBulk: 100, maxCmd: 1000}
	for in, want := range map[string]string{
		"*1\r\n$9223372036854775807\r\n":    "invalid bulk length",
		"*1\r\n$101\r\n":                    "invalid bulk length",
		"*1\r\n$-1\r\n":                     "invalid bulk length",
		"*1\r\n$1x\r\n":                     "invalid bulk length",
		"*1\r\n$1\r\nab\r\n":                "invalid bulk length",
		"*11\r\n":                           "invalid multibulk length",
		"*1x\r\n":                           "invalid multibulk length",
		"*1\n":                              "invalid multibulk length",
		"*" + strings.Repeat("1", 40):       "invalid multibulk length",
		"*1\r\n$" + strings.Repeat("1", 40): "invalid bulk length",
		"*2\r\n:1\r\n":                      "expected '$', got ':'",
		"*2\r\n\x00":                        "expected '$', got '\\x00'",
		"*10\r\n" + strings.Repeat("$99\r\n"+strings.Repeat("x", 99)+"\r\n", 10): "too big request",
		"a \"b\"c\r\n":                      "unbalanced quotes in request",
		"a 'b\r\n":                          "unbalanced quotes in request",
		strings.Repeat("x", MaxInlineLen+1): "too big inline request",
	} {
		*p = parser{maxArgs: 10, maxBulk: 100, maxCmd: 1000}
		_, _, perr := p.parse([]byte(in))
		if perr != want {
			t.Errorf("parse(%q) error %q, want %q", in[:min(len(in), 30)], perr, want)
		}
	}
}

func TestSplitArgs(t *testing.T) {
	for in, want := range map[string]string{
		"":                     "",
		"  a  b\tc ":           "a,b,c",
		`set "a b" 'c d'`:      "set,a b,c d",
		`foo"bar baz" x`:       "foobar baz,x",
		`"\x41\x4a\xzz\n\\\""`: "AJxzz\n\\\"",
		`'a\'b' ""`:            "a'b,",
	} {
		args, ok := splitArgs([]byte(in), nil)
		if !ok {
			t.Errorf("splitArgs(%q) failed", in)
			continue
		}
		parts := make([]string, len(args))
		for i, a := range args {
			parts[i] = string(a)
		}
		if got := strings.Join(parts, ","); got != want {
			t.Errorf("splitArgs(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseInt(t *testing.T) {
	ok := map[string]int64{"0": 0, "1": 1, "-1": -1, "9223372036854775807": 1<<63 - 1, "-9223372036854775808": -1 << 63, "120": 120}
	for s, want := range ok {
		if got, k := parseInt([]byte(s)); !k || got != want {
			t.Errorf("parseInt(%q) = %d, %v", s, got, k)
		}
	}
	for _, s := range []string{"", "-", "+1", " 1", "1 ", "01", "-0", "1.5", "9223372036854775808", "-9223372036854775809", "99999999999999999999", "1e3", "0x10"} {
		if _, k := parseInt([]byte(s)); k {
			t.Errorf("parseInt(%q) accepted", s)
		}
	}
}

func TestHotPathDoesNotAllocate(t *testing.T) {
	s := &Server{cmds: buildCommands()}
	c := &client{}
	name := []byte("InCrBy")
	if n := testing.AllocsPerRun(100, func() {
		if s.lookup(c, name) == nil {
			t.Fatal("lookup failed")
		}
	}); n != 0 {
		t.Fatalf("lookup allocates %v times", n)
	}
	p := testParser()
	in := []byte("*3\r\n$6\r\nINCRBY\r\n$3\r\nkey\r\n$2\r\n10\r\n")
	p.parse(in)
	if n := testing.AllocsPerRun(100, func() {
		if n, args, _ := p.parse(in); n != len(in) || len(args) != 3 {
			t.Fatal("parse failed")
		}
	}); n != 0 {
		t.Fatalf("parse allocates %v times", n)
	}
	c.out = make([]byte, 0, 1024)
	if n := testing.AllocsPerRun(100, func() {
		c.out = c.out[:0]
		c.writeInt(12345)
		c.writeBulkInt(-7)
		c.writeNull()
	}); n != 0 {
		t.Fatalf("reply writers allocate %v times", n)
	}
}

// parseStream parses in, delivered in chunks of the given size (0: all at
// once), and describes every command and the final error.
func parseStream(in []byte, chunk int) string {
	p := &parser{maxArgs: 64, maxBulk: 512, maxCmd: 4096}
	var out strings.Builder
	var buf []byte
	for len(in) > 0 || len(buf) > 0 {
		n := len(in)
		if chunk > 0 {
			n = min(chunk, len(in))
		}
		buf = append(buf, in[:n]...)
		in = in[n:]
		for len(buf) > 0 {
			m, args, perr := p.parse(buf)
			if perr != "" {
				fmt.Fprintf(&out, "error %q\n", perr)
				return out.String()
			}
			if m == 0 {
				break
			}
			if m > len(buf) {
				panic("consumed more than given")
			}
			buf = buf[m:]
			fmt.Fprintf(&out, "%q\n", args)
		}
		if n == 0 {
			break // no more input and the rest is incomplete
		}
	}
	fmt.Fprintf(&out, "incomplete %d\n", len(buf))
	return out.String()
}

// FuzzParser checks that the parser never panics and that the commands it
// finds do not depend on how the input is split into reads.
func FuzzParser(f *testing.F) {
	for _, s := range []string{
		"*1\r\n$4\r\nPING\r\n",
		"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\n1\r\nPING\r\n",
		"*2\r\n$4\r\nECHO\r\n$5\r\nab",
		"SET \"a\\x41\" 'b\\'c'\r\n",
		"*0\r\n*-1\r\n\r\n",
		"*1\r\n$-1\r\n",
		"*99\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		whole := parseStream(in, 0)
		for _, chunk := range []int{1, 3, 17} {
			if got := parseStream(in, chunk); got != whole {
				t.Fatalf("split in %d-byte reads:\n%s\nwhole:\n%s", chunk, got, whole)
			}
		}
	})
}
