package tracing

import (
	"bufio"
	"errors"
	"net"
	"net/http"
)

// HTTPHandler traces every request next serves: a server span named
// "HTTP <method>", child of the request's W3C traceparent if it carries
// one. On a nil *Tracer it returns next itself.
func HTTPHandler(t *Tracer, next http.Handler) http.Handler {
	if t == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := ContextWithRemote(r.Context(), Extract(r.Header.Get))
		ctx, span := t.Start(ctx, spanName(r.Method), KindServer)
		if !span.Recording() {
			next.ServeHTTP(w, r.WithContext(ctx))
			return
		}
		span.SetString("http.request.method", r.Method)
		span.SetString("url.path", r.URL.Path)
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		defer func() {
			span.SetInt("http.response.status_code", int64(sw.code))
			if sw.code >= 500 {
				span.Fail(http.StatusText(sw.code))
			}
			span.End()
		}()
		next.ServeHTTP(sw, r.WithContext(ctx))
	})
}

// statusWriter records the status code written.
type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote && code >= 200 {
		w.code, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush passes on to the wrapped writer (streamed answers).
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack passes on to the wrapped writer.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if h, ok := w.ResponseWriter.(http.Hijacker); ok {
		return h.Hijack()
	}
	return nil, nil, errors.New("tracing: the response writer cannot be hijacked")
}

// spanName is "HTTP <method>", without allocating for the usual methods.
func spanName(method string) string {
	switch method {
	case http.MethodGet:
		return "HTTP GET"
	case http.MethodPost:
		return "HTTP POST"
	case http.MethodPut:
		return "HTTP PUT"
	case http.MethodDelete:
		return "HTTP DELETE"
	case http.MethodPatch:
		return "HTTP PATCH"
	case http.MethodHead:
		return "HTTP HEAD"
	case http.MethodOptions:
		return "HTTP OPTIONS"
	}
	return "HTTP " + method
}
