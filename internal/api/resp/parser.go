package resp

import (
	"bytes"
)

// The RESP request parser.
//
// It parses multibulk commands ("*<n>\r\n$<len>\r\n<bytes>\r\n...") and
// inline commands (a line of space separated, optionally quoted words, as
// typed in telnet), like Redis's processMultibulkBuffer and
// processInlineBuffer, and enforces the limits (MaxArgs, MaxBulkLen,
// MaxCommandBytes, MaxInlineLen) with Redis's error wording.
//
// It is resumable: when a command is incomplete, it remembers how far it
// got (offsets relative to the command's first byte), so a long command
// arriving in many reads is parsed once, not once per read, and it knows
// how many bytes a pending bulk payload needs, so the connection can read
// them without parsing in between.
//
// Arguments are sub-slices of the connection's read buffer, which is
// write-once (see client.fill): the bytes never change once read, so the
// slices (and strings made from them without copying) stay valid for as
// long as anything refers to them.

// maxHeaderLen bounds the "*<n>\r\n" and "$<n>\r\n" lines.
const maxHeaderLen = 32

type parser struct {
	maxArgs, maxBulk, maxCmd int

	argc int   // arguments of the command in progress; 0 = header not parsed
	pos  int   // offset of the next byte to parse, from the command's start
	offs []int // start, end offset pairs of the arguments parsed so far
	need int   // bytes (from the command's start) needed before parsing again
	args [][]byte

	inline bool // the last command parsed was inline
}

// parse parses one command at the start of b. It returns the bytes the
// command took, 0 if it is incomplete; its arguments, nil for an empty
// command (a blank line, "*0"); or a protocol error (perr, without the
// "ERR Protocol error: " prefix).
//
// The returned args slice is reused by the next call.
func (p *parser) parse(b []byte) (n int, args [][]byte, perr string) {
	if p.argc == 0 {
		p.inline = b[0] != '*'
		if p.inline {
			return p.parseInline(b)
		}
		count, hl, perr := parseHeader(b, 0)
		if perr != "" || hl == 0 {
			if perr != "" {
				perr = "invalid multibulk length"
			}
			return 0, nil, perr
		}
		if count <= 0 {
			return hl, nil, "" // Redis ignores "*0" and "*-1"
		}
		if count > int64(p.maxArgs) {
			return 0, nil, "invalid multibulk length"
		}
		p.argc, p.pos, p.offs = int(count), hl, p.offs[:0]
	}
	for len(p.offs) < 2*p.argc {
		if p.pos >= len(b) || p.need > len(b) {
			return 0, nil, ""
		}
		if b[p.pos] != '$' {
			return 0, nil, "expected '$', got '" + printable(b[p.pos]) + "'"
		}
		size, hl, perr := parseHeader(b, p.pos)
		if perr != "" || size < 0 || size > int64(p.maxBulk) {
			return 0, nil, "invalid bulk length"
		}
		if hl == 0 {
			return 0, nil, "" // header incomplete
		}
		start := p.pos + hl
		end := start + int(size)
		if end+2 > p.maxCmd {
			return 0, nil, "too big request"
		}
		if end+2 > len(b) {
			p.need = end + 2
			return 0, nil, ""
		}
		if b[end] != '\r' || b[end+1] != '\n' {
			return 0, nil, "invalid bulk length"
		}
		p.offs = append(p.offs, start, end)
		p.pos, p.need = end+2, 0
	}
	args = p.args[:0]
	for i := 0; i < len(p.offs); i += 2 {
		s, e := p.offs[i], p.offs[i+1]
		args = append(args, b[s:e:e])
	}
	p.args = args
	n = p.pos
	p.argc, p.pos, p.need = 0, 0, 0
	return n, args, ""
}

// parseHeader parses the "*<n>\r\n" or "$<n>\r\n" line at b[at:]. It
// returns the number and the line's length, 0 if the line is incomplete.
func parseHeader(b []byte, at int) (int64, int, string) {
	lim := min(len(b), at+maxHeaderLen)
	i := bytes.IndexByte(b[at+1:lim], '\n')
	if i < 0 {
		if lim-at >= maxHeaderLen {
			return 0, 0, "bad header"
		}
		return 0, 0, ""
	}
	line := b[at+1 : at+1+i]
	if len(line) < 2 || line[len(line)-1] != '\r' {
		return 0, 0, "bad header"
	}
	v, ok := parseInt(line[:len(line)-1])
	if !ok {
		return 0, 0, "bad header"
	}
	return v, i + 2, ""
}

// parseInline parses an inline command line.
func (p *parser) parseInline(b []byte) (int, [][]byte, string) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		if len(b) > MaxInlineLen {
			return 0, nil, "too big inline request"
		}
		return 0, nil, ""
	}
	if i > MaxInlineLen {
		return 0, nil, "too big inline request"
	}
	line := b[:i]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	args, ok := splitArgs(line, p.args[:0])
	if !ok {
		return 0, nil, "unbalanced quotes in request"
	}
	p.args = args
	if len(args) == 0 {
		return i + 1, nil, ""
	}
	return i + 1, args, ""
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

func hexVal(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// splitArgs splits an inline command line like Redis's sdssplitargs:
// words separated by spaces; "double quotes" with \n \r \t \b \a \\ \"
// and \xHH escapes; 'single quotes' with \'. A quote may start inside a
// word (foo"bar baz" is one argument); a closing quote must be followed by
// a space or the end of the line.
func splitArgs(line []byte, out [][]byte) ([][]byte, bool) {
	i := 0
	for {
		for i < len(line) && isSpace(line[i]) {
			i++
		}
		if i == len(line) {
			return out, true
		}
		inq, insq, done := false, false, false
		cur := []byte{}
		for !done {
			switch {
			case inq:
				if i >= len(line) {
					return out, false
				}
				c := line[i]
				if c == '\\' && i+3 < len(line) && line[i+1] == 'x' {
					h, ok1 := hexVal(line[i+2])
					l, ok2 := hexVal(line[i+3])
					if ok1 && ok2 {
						cur = append(cur, h<<4|l)
						i += 3
						break
					}
				}
				if c == '\\' && i+1 < len(line) {
					i++
					switch c = line[i]; c {
					case 'n':
						c = '\n'
					case 'r':
						c = '\r'
					case 't':
						c = '\t'
					case 'b':
						c = '\b'
					case 'a':
						c = '\a'
					}
					cur = append(cur, c)
				} else if c == '"' {
					if i+1 < len(line) && !isSpace(line[i+1]) {
						return out, false
					}
					done = true
				} else {
					cur = append(cur, c)
				}
			case insq:
				if i >= len(line) {
					return out, false
				}
				c := line[i]
				if c == '\\' && i+1 < len(line) && line[i+1] == '\'' {
					i++
					cur = append(cur, '\'')
				} else if c == '\'' {
					if i+1 < len(line) && !isSpace(line[i+1]) {
						return out, false
					}
					done = true
				} else {
					cur = append(cur, c)
				}
			default:
				if i >= len(line) {
					done = true
					break
				}
				switch c := line[i]; {
				case isSpace(c):
					done = true
				case c == '"':
					inq = true
				case c == '\'':
					insq = true
				default:
					cur = append(cur, c)
				}
			}
			if i < len(line) {
				i++
			}
		}
		out = append(out, cur)
	}
}

func printable(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return string(rune(c))
	}
	const hexdig = "0123456789abcdef"
	return "\\x" + string(hexdig[c>>4]) + string(hexdig[c&15])
}
