package httploop

import "bytes"

// Parse status: what the bytes at the start of a connection's buffer are.
type parseStatus uint8

const (
	// needMore: the head is not complete yet (or its body is not).
	needMore parseStatus = iota
	// parsed: a complete request the loop may serve (head and body).
	parsed
	// handOver: a request the loop does not frame itself (anything not
	// plain HTTP/1.1 with a Content-Length body, and anything malformed:
	// net/http then answers it, 400s included, exactly as without the
	// loop).
	handOver
)

// maxHeaders is the most header lines the loop frames; more: hand over.
const maxHeaders = 32

// maxHead is the longest head the loop waits for; longer: hand over
// (net/http answers 431 past its own limit).
const maxHead = 8 << 10

// field is one header line, slices of the request's bytes.
type field struct{ name, value []byte }

// head is a parsed request: slices of the connection's buffer, valid
// until the buffer is reused. Parsing allocates nothing.
type head struct {
	method, target []byte
	path, query    []byte
	host           []byte
	fields         [maxHeaders]field
	nfields        int
	contentLength  int64 // -1: none
	close          bool  // Connection: close
	headLen        int   // bytes of the head, up to and including the blank line
	total          int   // headLen + body
}

// body returns the request's body within b (the bytes parse saw).
func (h *head) body(b []byte) []byte { return b[h.headLen:h.total] }

// parse frames the request at the start of b into h. maxBody bounds the
// body the loop buffers: a larger Content-Length is handed over.
//
// It accepts a strict subset of HTTP/1.1 (RFC 9112): request line
// "METHOD SP origin-form SP HTTP/1.1", header names of token characters
// followed at once by a colon, values without control characters other
// than tab, exactly one Host, at most one Content-Length of digits, no
// Transfer-Encoding, Expect or Upgrade, no obsolete line folding, lines
// ending in CRLF. Everything else is handed over: net/http then does
// what it does without the loop.
func parse(b []byte, maxBody int64, h *head) parseStatus {
	end := bytes.Index(b, crlfcrlf)
	if end < 0 {
		if len(b) > maxHead {
			return handOver
		}
		// A bare LF line ending would never complete here: net/http
		// accepts those, so look for them once the buffer is not tiny.
		if bytes.IndexByte(b, '\n') >= 0 && bytes.Contains(b, lflf) {
			return handOver
		}
		return needMore
	}
	if end+4 > maxHead {
		return handOver
	}
	*h = head{contentLength: -1}
	hb := b[:end+2] // every line ends in \r\n
	nl := bytes.Index(hb, crlf)
	line := hb[:nl]
	sp1 := bytes.IndexByte(line, ' ')
	if sp1 <= 0 {
		return handOver
	}
	rest := line[sp1+1:]
	sp2 := bytes.IndexByte(rest, ' ')
	if sp2 <= 0 || !bytes.Equal(rest[sp2+1:], http11) {
		return handOver
	}
	h.method, h.target = line[:sp1], rest[:sp2]
	for _, c := range h.method {
		if !isToken(c) {
			return handOver
		}
	}
	if !cleanTarget(h.target) {
		return handOver
	}
	h.path = h.target
	if q := bytes.IndexByte(h.target, '?'); q >= 0 {
		h.path, h.query = h.target[:q], h.target[q+1:]
	}
	hosts, conns := 0, 0
	for rest := hb[nl+2:]; len(rest) > 0; {
		i := bytes.Index(rest, crlf)
		ln := rest[:i]
		rest = rest[i+2:]
		colon := bytes.IndexByte(ln, ':')
		if colon <= 0 {
			return handOver
		}
		name, val := ln[:colon], trimOWS(ln[colon+1:])
		for _, c := range name {
			if !isToken(c) {
				return handOver
			}
		}
		for _, c := range val {
			if (c < ' ' && c != '\t') || c == 0x7f {
				return handOver
			}
		}
		switch {
		case bytes.EqualFold(name, hdrHost):
			hosts++
			h.host = val
			if len(val) == 0 {
				return handOver
			}
			for _, c := range val {
				if !validHostByte(c) {
					return handOver // net/http: 400 malformed Host header
				}
			}
			continue // net/http takes Host out of the header map
		case bytes.EqualFold(name, hdrContentLength):
			if h.contentLength >= 0 || len(val) == 0 || len(val) > 12 {
				return handOver
			}
			n := int64(0)
			for _, d := range val {
				if d < '0' || d > '9' {
					return handOver
				}
				n = n*10 + int64(d-'0')
			}
			h.contentLength = n
		case bytes.EqualFold(name, hdrTransferEncoding), bytes.EqualFold(name, hdrExpect), bytes.EqualFold(name, hdrUpgrade):
			return handOver
		case bytes.EqualFold(name, hdrConnection):
			if conns++; conns > 1 {
				return handOver // net/http's server reads the first only
			}
			if hasToken(val, tokClose) {
				h.close = true
			}
		}
		if h.nfields == maxHeaders {
			return handOver
		}
		h.fields[h.nfields] = field{name, val}
		h.nfields++
	}
	if hosts != 1 {
		return handOver
	}
	h.headLen = end + 4
	cl := max(h.contentLength, 0)
	if cl > maxBody {
		return handOver
	}
	h.total = h.headLen + int(cl)
	if len(b) < h.total {
		return needMore
	}
	return parsed
}

// cleanTarget reports whether a request target is an origin-form path
// the loop routes as net/http's ServeMux would without redirecting or
// unescaping: it starts with '/', has no percent escapes, no empty, "."
// or ".." segments, and only characters RFC 3986 allows unescaped.
func cleanTarget(t []byte) bool {
	if len(t) == 0 || t[0] != '/' {
		return false
	}
	inPath, segStart := true, 1
	for i := 1; i <= len(t); i++ {
		if i < len(t) {
			c := t[i]
			if !isURIChar(c) {
				return false
			}
			if c == '?' && inPath {
				if !cleanSegment(t[segStart:i]) {
					return false
				}
				inPath = false
				continue
			}
			if !inPath || c != '/' {
				if c == '%' && inPath {
					return false
				}
				continue
			}
		} else if !inPath {
			break
		}
		if !cleanSegment(t[segStart:i]) {
			return false
		}
		segStart = i + 1
	}
	return true
}

// cleanSegment: a path segment ServeMux leaves as it is.
func cleanSegment(s []byte) bool {
	return len(s) > 0 && !(len(s) == 1 && s[0] == '.') && !(len(s) == 2 && s[0] == '.' && s[1] == '.')
}

// isURIChar: unreserved, sub-delims, ':', '@', '/', '?', '%' (RFC 3986).
func isURIChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '-', '.', '_', '~', '!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=', ':', '@', '/', '?', '%':
		return true
	}
	return false
}

// validHostByte: the bytes net/http accepts in Host (httpguts.ValidHostHeader).
func validHostByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '!', '$', '%', '&', '(', ')', '*', '+', ',', ';', '=', ':', '[', ']', '\'', '.', '_', '~', '-':
		return true
	}
	return false
}

// isToken: RFC 9110 tchar.
func isToken(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

func trimOWS(v []byte) []byte {
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	return v
}

// hasToken reports whether the comma-separated list v holds tok
// (ASCII case-insensitively).
func hasToken(v, tok []byte) bool {
	for len(v) > 0 {
		e := v
		if i := bytes.IndexByte(v, ','); i >= 0 {
			e, v = v[:i], v[i+1:]
		} else {
			v = nil
		}
		if bytes.EqualFold(trimOWS(e), tok) {
			return true
		}
	}
	return false
}

var (
	crlf, crlfcrlf, lflf = []byte("\r\n"), []byte("\r\n\r\n"), []byte("\n\n")
	http11               = []byte("HTTP/1.1")
	hdrHost              = []byte("Host")
	hdrContentLength     = []byte("Content-Length")
	hdrTransferEncoding  = []byte("Transfer-Encoding")
	hdrExpect            = []byte("Expect")
	hdrUpgrade           = []byte("Upgrade")
	hdrConnection        = []byte("Connection")
	tokClose             = []byte("close")
)
