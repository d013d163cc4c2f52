package httploop

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// exchange is a connection's reusable request and response: the loop
// runs the handler on an *http.Request it fills from the parsed head and
// a ResponseWriter that appends the answer to the connection's output,
// framed as net/http frames it (status line, the handler's headers in
// net/http's order, Date, Content-Length, a sniffed Content-Type,
// Connection: close).
type exchange struct {
	req    http.Request
	u      url.URL
	hdr    http.Header // the request's; cleared per request
	vals   [maxHeaders]string
	body   bodyReader
	w      respWriter
	ctx    context.Context
	remote string
	date   []byte // cached Date value and its second
	keys   []string
	dateAt int64
}

type bodyReader struct {
	bytes.Reader
	b []byte
}

func (*bodyReader) Close() error { return nil }

// BodyBytes returns the unread rest of the body, read, without a copy:
// valid until the handler returns (handlers reading the whole body
// without keeping it, as ratelimitapi's check, use it instead of
// io.ReadAll).
func (r *bodyReader) BodyBytes() []byte {
	rest := r.b[len(r.b)-r.Len():]
	r.Reset(nil)
	return rest
}

// respWriter is the http.ResponseWriter of a request run on a loop. The
// whole answer is buffered (the routes a loop runs answer small
// bodies): Flush, Hijack and read deadlines are not offered.
type respWriter struct {
	hdr         http.Header
	status      int
	wroteHeader bool
	body        []byte
}

func (w *respWriter) Header() http.Header { return w.hdr }

func (w *respWriter) WriteHeader(code int) {
	if w.wroteHeader {
		return
	}
	if code < 100 || code > 999 {
		panic("invalid WriteHeader code " + strconv.Itoa(code))
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		return // informational answers are not sent by a loop (none of its routes send them)
	}
	w.wroteHeader, w.status = true, code
}

func (w *respWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	w.body = append(w.body, p...)
	return len(p), nil
}

func (w *respWriter) WriteString(s string) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	w.body = append(w.body, s...)
	return len(s), nil
}

func bodyAllowed(code int) bool {
	return !(code >= 100 && code <= 199) && code != http.StatusNoContent && code != http.StatusNotModified
}

// knownHeaders are canonical names the loop does not allocate.
var knownHeaders = []string{
	"Accept", "Accept-Encoding", "Authorization", "Connection", "Content-Length", "Content-Type",
	"Idempotency-Key", "Origin", "User-Agent", "X-Forwarded-For", "Forwarded", "Traceparent", "Tracestate",
	"Accept-Language", "Cache-Control", "Referer", "Cookie", "X-Request-Id",
}

func canonical(name []byte) string {
	for _, k := range knownHeaders {
		if len(k) == len(name) && bytes.EqualFold(name, []byte(k)) {
			return k
		}
	}
	return http.CanonicalHeaderKey(string(name))
}

// request fills x.req from h (body within buf) as net/http's server would.
func (x *exchange) request(h *head, buf []byte) *http.Request {
	if x.hdr == nil {
		x.hdr = make(http.Header, 8)
	} else {
		clear(x.hdr)
	}
	for i := 0; i < h.nfields; i++ {
		f := &h.fields[i]
		k := canonical(f.name)
		x.vals[i] = string(f.value)
		if old, ok := x.hdr[k]; ok {
			x.hdr[k] = append(old, x.vals[i])
		} else {
			x.hdr[k] = x.vals[i : i+1 : i+1]
		}
	}
	target := string(h.target)
	path, rawQuery := target, ""
	if q := len(h.path); q < len(target) {
		path, rawQuery = target[:q], target[q+1:]
	}
	x.u = url.URL{Path: path, RawQuery: rawQuery}
	x.req = http.Request{
		Method:     method(h.method),
		URL:        &x.u,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1, ProtoMinor: 1,
		Header:        x.hdr,
		Host:          string(h.host),
		RemoteAddr:    x.remote,
		RequestURI:    target,
		Close:         h.close,
		ContentLength: max(h.contentLength, 0),
	}
	if h.contentLength > 0 {
		x.body.b = h.body(buf)
		x.body.Reset(x.body.b)
		x.req.Body = &x.body
	} else {
		x.req.Body = http.NoBody
	}
	return x.req.WithContext(x.ctx)
}

func method(m []byte) string {
	switch string(m) {
	case "GET":
		return "GET"
	case "POST":
		return "POST"
	case "PUT":
		return "PUT"
	case "DELETE":
		return "DELETE"
	}
	return string(m)
}

// run runs handler on the request h and appends its answer to out. It
// reports whether the connection must close after the answer, and
// whether the handler panicked (nothing is appended then: net/http
// closes the connection without an answer).
func (x *exchange) run(handler http.Handler, h *head, buf []byte, out []byte, draining bool, now time.Time) (_ []byte, closeAfter, panicked bool) {
	r := x.request(h, buf)
	w := &x.w
	if w.hdr == nil {
		w.hdr = make(http.Header, 8)
	} else {
		clear(w.hdr)
	}
	w.status, w.wroteHeader, w.body = 0, false, w.body[:0]
	if func() (p bool) {
		defer func() {
			if rec := recover(); rec != nil {
				if rec == http.ErrAbortHandler {
					p = true
					return
				}
				p = true
				panic(rec) // the loop logs it and closes the connection
			}
		}()
		handler.ServeHTTP(w, r)
		return false
	}() {
		return out, true, true
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	return x.frame(out, h, draining, now)
}

// frame appends the status line, headers and body of x.w to out, as
// net/http's chunkWriter.writeHeader does for an answer that fits its
// buffer.
func (x *exchange) frame(out []byte, h *head, draining bool, now time.Time) ([]byte, bool, bool) {
	w := &x.w
	code := w.status
	out = append(out, "HTTP/1.1 "...)
	if text := http.StatusText(code); text != "" {
		out = strconv.AppendInt(out, int64(code), 10)
		out = append(out, ' ')
		out = append(out, text...)
	} else {
		out = append(out, strconv.Itoa(code)+" status code "+strconv.Itoa(code)...)
	}
	out = append(out, "\r\n"...)
	hdr := w.hdr
	closeAfter := h.close || draining || hasTokenStr(hdr.Get("Connection"), "close")
	setCL := bodyAllowed(code) && !hasKey(hdr, "Content-Length") && hdr.Get("Transfer-Encoding") == ""
	sniff := ""
	if bodyAllowed(code) {
		if _, ok := hdr["Content-Type"]; !ok && hdr.Get("Content-Encoding") == "" && hdr.Get("Transfer-Encoding") == "" && len(w.body) > 0 {
			sniff = http.DetectContentType(w.body)
		}
	} else {
		for _, k := range suppressed(code) {
			delete(hdr, k)
		}
	}
	delConn := closeAfter && !hasTokenStr(hdr.Get("Connection"), "close")
	if delConn {
		delete(hdr, "Connection")
	}
	delete(hdr, "Transfer-Encoding") // a buffered answer has a length
	out = x.writeHeader(out, hdr)
	if !hasKey(hdr, "Date") {
		out = append(out, "Date: "...)
		out = append(out, x.dateValue(now)...)
		out = append(out, "\r\n"...)
	}
	if setCL {
		out = append(out, "Content-Length: "...)
		out = strconv.AppendInt(out, int64(len(w.body)), 10)
		out = append(out, "\r\n"...)
	}
	if sniff != "" {
		out = append(out, "Content-Type: "...)
		out = append(out, sniff...)
		out = append(out, "\r\n"...)
	}
	if delConn {
		out = append(out, "Connection: close\r\n"...)
	}
	out = append(out, "\r\n"...)
	if bodyAllowed(code) {
		out = append(out, w.body...)
	}
	return out, closeAfter, false
}

func (x *exchange) dateValue(now time.Time) []byte {
	if s := now.Unix(); s != x.dateAt || x.date == nil {
		x.dateAt = s
		x.date = now.UTC().AppendFormat(x.date[:0], http.TimeFormat)
	}
	return x.date
}

func hasKey(h http.Header, k string) bool { _, ok := h[k]; return ok }

func hasTokenStr(v, tok string) bool { return hasToken([]byte(v), []byte(tok)) }

func suppressed(code int) []string {
	if code == http.StatusNotModified {
		return []string{"Content-Type", "Content-Length", "Transfer-Encoding"}
	}
	if code == http.StatusNoContent {
		return []string{"Transfer-Encoding"}
	}
	return nil
}

// writeHeader appends hdr as net/http's Header.Write does (keys sorted,
// invalid names left out, newlines in values turned to spaces, values
// trimmed), without its allocations.
func (x *exchange) writeHeader(out []byte, hdr http.Header) []byte {
	keys := x.keys[:0]
	for k := range hdr {
		keys = append(keys, k)
	}
	for i := 1; i < len(keys); i++ { // few keys: insertion sort
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	for _, k := range keys {
		if !validFieldName(k) {
			continue
		}
		for _, v := range hdr[k] {
			if strings.ContainsAny(v, "\r\n") {
				v = strings.NewReplacer("\n", " ", "\r", " ").Replace(v)
			}
			v = strings.Trim(v, " \t\n\r")
			out = append(out, k...)
			out = append(out, ": "...)
			out = append(out, v...)
			out = append(out, "\r\n"...)
		}
	}
	clear(keys)
	x.keys = keys[:0]
	return out
}

func validFieldName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		if !isToken(k[i]) {
			return false
		}
	}
	return true
}
