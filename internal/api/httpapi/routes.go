package httpapi

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/counterd/counterd/internal/auth"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/glob"
	"github.com/counterd/counterd/internal/httpjson"
)

// mutate runs a single-op mutation route: validate the path id and write
// options, decode the body into req (nil: no body), build the op, apply it
// and answer with the encoding of the op named name.
func (h *Handler) mutate(w http.ResponseWriter, r *http.Request, name string, req any, build func(id string) (contract.Op, error)) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	wo, err := writeOptions(r)
	if err != nil {
		return err
	}
	if req != nil {
		if err := h.decodeBody(w, r, req); err != nil {
			return err
		}
	}
	op, err := build(id)
	if err != nil {
		return err
	}
	if err := h.checkAt(&op); err != nil {
		return err
	}
	res, err := h.eng.Apply(r.Context(), op, wo)
	if err != nil {
		return err
	}
	if res.Replayed {
		w.Header().Set("Idempotency-Replayed", "true")
	}
	writeJSON(w, http.StatusOK, resultBody(name, res))
	return nil
}

// checkAt refuses an explicit event time too far ahead of the clock
// (Options.EventMaxSkew) or outside 1900..2200.
func (h *Handler) checkAt(op *contract.Op) error {
	if op.At == 0 {
		return nil
	}
	return engine.CheckEventTime(op.At, time.Now(), h.opts.EventMaxSkew)
}

func (h *Handler) increment(w http.ResponseWriter, r *http.Request) error {
	var q incrRequest
	return h.mutate(w, r, "increment", &q, func(id string) (contract.Op, error) { return q.op(id, false) })
}

func (h *Handler) decrement(w http.ResponseWriter, r *http.Request) error {
	var q incrRequest
	return h.mutate(w, r, "decrement", &q, func(id string) (contract.Op, error) { return q.op(id, true) })
}

func (h *Handler) set(w http.ResponseWriter, r *http.Request) error {
	var q setRequest
	return h.mutate(w, r, "set", &q, q.op)
}

func (h *Handler) delete(w http.ResponseWriter, r *http.Request) error {
	return h.mutate(w, r, "delete", nil, func(id string) (contract.Op, error) {
		return contract.Op{Type: contract.OpDelete, ID: id}, nil
	})
}

func (h *Handler) expire(w http.ResponseWriter, r *http.Request) error {
	var q ttlRequest
	return h.mutate(w, r, "expire", &q, func(id string) (contract.Op, error) { return q.op(id, 1) })
}

func (h *Handler) persist(w http.ResponseWriter, r *http.Request) error {
	return h.mutate(w, r, "persist", nil, func(id string) (contract.Op, error) {
		return contract.Op{Type: contract.OpExpire, ID: id, TTL: 0}, nil
	})
}

func (h *Handler) pfadd(w http.ResponseWriter, r *http.Request) error {
	var q pfaddRequest
	return h.mutate(w, r, "pfadd", &q, q.op)
}

func (h *Handler) pfmerge(w http.ResponseWriter, r *http.Request) error {
	var q pfmergeRequest
	return h.mutate(w, r, "pfmerge", &q, q.op)
}

func (h *Handler) hincr(w http.ResponseWriter, r *http.Request) error {
	var q hincrRequest
	return h.mutate(w, r, "hincr", &q, q.op)
}

func (h *Handler) hdel(w http.ResponseWriter, r *http.Request) error {
	field := r.PathValue("field")
	return h.mutate(w, r, "hdel", nil, func(id string) (contract.Op, error) {
		q := hdelRequest{Field: &field}
		return q.op(id)
	})
}

func (h *Handler) batch(w http.ResponseWriter, r *http.Request) error {
	wo, err := writeOptions(r)
	if err != nil {
		return err
	}
	var q batchRequest
	if err := h.decodeBody(w, r, &q); err != nil {
		return err
	}
	if q.Ops == nil {
		return invalidArgf("ops: missing")
	}
	raws := *q.Ops
	if len(raws) > h.opts.MaxBatch {
		return fmt.Errorf("%w: %d ops, at most %d", contract.ErrBatchTooLarge, len(raws), h.opts.MaxBatch)
	}
	ops := make([]contract.Op, len(raws))
	names := make([]string, len(raws))
	for i, raw := range raws {
		ops[i], names[i], err = decodeBatchOp(raw)
		if err == nil {
			err = h.checkAt(&ops[i])
		}
		if err != nil {
			return &httpjson.IndexError{Index: i, Err: err}
		}
	}
	results, err := h.eng.ApplyBatch(r.Context(), ops, wo)
	if err != nil {
		return err
	}
	out := batchAnswer{Results: make([]any, 0, len(results)), Status: "ok"}
	for i, res := range results {
		if res.Replayed {
			w.Header().Set("Idempotency-Replayed", "true")
		}
		name := "increment"
		if i < len(names) {
			name = names[i]
		}
		out.Results = append(out.Results, resultBody(name, res))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	scope, err := readScope(r)
	if err != nil {
		return err
	}
	if scope == "global" {
		if h.opts.Global == nil {
			return invalidArgf("scope=global needs --peer-regions (this node knows no other region)")
		}
		body, err := h.opts.Global(r.Context(), id)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, body)
		return nil
	}
	v, err := h.eng.Get(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, viewBody(id, v))
	return nil
}

// readScope reads ?scope=local|region|global of a read (default local;
// local and region answer the same: this region's value).
func readScope(r *http.Request) (string, error) {
	if r.URL.RawQuery == "" {
		return "local", nil
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return "", invalidArgf("query: %v", err)
	}
	switch s := q.Get("scope"); s {
	case "", "local":
		return "local", nil
	case "region", "global":
		return s, nil
	default:
		return "", invalidArgf("scope must be local, region or global, not %q", truncate(s, 64))
	}
}

func (h *Handler) ttl(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	ttl, hasTTL, exists, err := h.eng.TTL(r.Context(), id)
	if err != nil {
		return err
	}
	ms := ttl.Milliseconds()
	switch {
	case !exists:
		ms = -2
	case !hasTTL:
		ms = -1
	case ms < 0:
		ms = 0
	}
	writeJSON(w, http.StatusOK, ttlAnswer{ID: id, TTLMs: ms})
	return nil
}

func (h *Handler) pfcount(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	n, stdErr, err := h.eng.PFCount(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, pfcountAnswer{ID: id, Value: n, StdError: stdErr})
	return nil
}

// pfcountRequest is the body of POST /pfcount.
type pfcountRequest struct {
	IDs *[]string `json:"ids"`
}

func (h *Handler) pfcountUnion(w http.ResponseWriter, r *http.Request) error {
	var q pfcountRequest
	if err := h.decodeBody(w, r, &q); err != nil {
		return err
	}
	if q.IDs == nil || len(*q.IDs) == 0 {
		return invalidArgf("ids: missing or empty")
	}
	if len(*q.IDs) > h.opts.MaxBatch {
		return fmt.Errorf("%w: %d ids, at most %d", contract.ErrBatchTooLarge, len(*q.IDs), h.opts.MaxBatch)
	}
	for i, id := range *q.IDs {
		if err := contract.ValidateID(id); err != nil {
			return fmt.Errorf("ids[%d]: %w", i, err)
		}
	}
	n, stdErr, err := h.eng.PFCount(r.Context(), *q.IDs...)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, pfcountAnswer{Value: n, StdError: stdErr})
	return nil
}

// viewOf reads the counter named in the path, which must be of kind k if
// it exists.
func (h *Handler) viewOf(r *http.Request, k contract.Kind) (string, contract.View, error) {
	id, err := pathID(r)
	if err != nil {
		return "", contract.View{}, err
	}
	v, err := h.eng.Get(r.Context(), id)
	if err != nil {
		return "", contract.View{}, err
	}
	if v.Exists && v.Kind != k {
		return "", contract.View{}, fmt.Errorf("%w: %q is a %s, not a %s", contract.ErrWrongKind, id, v.Kind, k)
	}
	return id, v, nil
}

func (h *Handler) fields(w http.ResponseWriter, r *http.Request) error {
	id, v, err := h.viewOf(r, contract.KindHash)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, fieldsAnswer{ID: id, Fields: fieldMap(v.Fields)})
	return nil
}

func (h *Handler) hget(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	field := r.PathValue("field")
	if field == "" {
		return invalidArgf("field: empty name")
	}
	val, ok, err := h.eng.HGet(r.Context(), id, field)
	if ok && errors.Is(err, contract.ErrNotInteger) { // a float field: its text is in the view
		v, err := h.eng.Get(r.Context(), id)
		if err != nil {
			return err
		}
		for _, f := range v.Fields {
			if f.Name == field {
				_, fv := fieldValue(f)
				writeJSON(w, http.StatusOK, hgetAnswer{ID: id, Field: field, Value: fv, Exists: true})
				return nil
			}
		}
		writeJSON(w, http.StatusOK, hgetAnswer{ID: id, Field: field, Value: int64(0), Exists: false})
		return nil
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, hgetAnswer{ID: id, Field: field, Value: val, Exists: ok})
	return nil
}

func (h *Handler) window(w http.ResponseWriter, r *http.Request) error {
	id, v, err := h.viewOf(r, contract.KindWindow)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, windowBody(id, v))
	return nil
}

func (h *Handler) aggregate(w http.ResponseWriter, r *http.Request) error {
	seg := r.PathValue("id")
	prefix, ok := strings.CutSuffix(seg, "*")
	if !ok {
		return invalidArgf("aggregate: the id segment must end with *, got %q", truncate(seg, 64))
	}
	if prefix != "" {
		if err := contract.ValidateID(prefix); err != nil {
			return err
		}
	}
	scope, err := readScope(r)
	if err != nil {
		return err
	}
	if scope == "global" {
		if h.opts.GlobalAggregate == nil {
			return invalidArgf("scope=global needs --peer-regions (this node knows no other region)")
		}
		body, err := h.opts.GlobalAggregate(r.Context(), prefix)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, body)
		return nil
	}
	var report bool
	switch o := r.URL.Query().Get("overflow"); o {
	case "", "error":
	case "report":
		report = true
	default:
		return invalidArgf("overflow: %q is not error or report", truncate(o, 40))
	}
	a, err := engine.AggregateOverflow(r.Context(), h.eng, prefix)
	if oe := (*engine.OverflowError)(nil); report && errors.As(err, &oe) {
		writeJSON(w, http.StatusOK, httpjson.OverflowDetail{Prefix: oe.Prefix, Count: oe.Count, Sum: oe.Sum.String(), Overflow: true})
		return nil
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, aggregateAnswer{Prefix: prefix, Value: a.Value, Count: a.Count})
	return nil
}

// Listing limits of GET /counters.
const (
	defaultListLimit = 100
	maxListLimit     = 10000
)

func (h *Handler) list(w http.ResponseWriter, r *http.Request) error {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return invalidArgf("query: %v", err)
	}
	prefix, match := q.Get("prefix"), q.Get("match")
	var cursor uint64
	scan := q.Has("cursor") // scan order, paged by a numeric cursor
	if s := q.Get("cursor"); s != "" {
		if cursor, err = strconv.ParseUint(s, 10, 64); err != nil {
			return invalidArgf("cursor: %q is not an unsigned integer", truncate(s, 40))
		}
	}
	after := q.Get("after")
	if scan && after != "" {
		return invalidArgf("after pages the sorted listing, cursor the scan: give one of them")
	}
	if len(after) > contract.MaxIDLen {
		return invalidArgf("after: longer than %d bytes", contract.MaxIDLen)
	}
	limit := defaultListLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxListLimit {
			return invalidArgf("limit: %q is not in 1..%d", truncate(s, 40), maxListLimit)
		}
		limit = n
	}
	pattern, keep := listPattern(prefix, match)
	if !scan {
		ids, more, err := engine.ListSorted(r.Context(), h.eng, pattern, keep, after, limit)
		if err != nil {
			return err
		}
		out := sortedListAnswer{IDs: ids}
		if more {
			out.Next = ids[len(ids)-1]
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	}
	ids, next, err := h.eng.Scan(r.Context(), cursor, pattern, limit)
	if err != nil {
		return err
	}
	out := listAnswer{IDs: make([]string, 0, len(ids)), Cursor: next}
	for _, id := range ids {
		if keep(id) {
			out.IDs = append(out.IDs, id)
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// whoami answers who the request's token belongs to and what it may do
// (the console shows the user and offers only the edits the grants
// allow): the user and grants with --auth, or, without --auth, no user
// and admin on every id; with ?id=, the highest permission on that id.
func (h *Handler) whoami(w http.ResponseWriter, r *http.Request) error {
	out := whoamiAnswer{Grants: []grantJSON{{Pattern: "*", Perm: auth.Admin.String()}}}
	p := auth.FromContext(r.Context())
	if p != nil {
		out.Auth, out.User, out.Grants = true, p.User, []grantJSON{}
		for _, g := range p.Grants() {
			out.Grants = append(out.Grants, grantJSON{Pattern: g.Pattern, Perm: g.Perm.String()})
		}
	}
	if id := r.URL.Query().Get("id"); r.URL.Query().Has("id") {
		perm := auth.Admin
		if p != nil {
			perm = p.PermOn(id)
		}
		s := "none"
		if perm != auth.Public {
			s = perm.String()
		}
		out.ID, out.Perm = &id, &s
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// capabilities answers where the backend differs from the embedded engine
// (contract.Capabilities; docs/http-api.md, "Capabilities").
func (h *Handler) capabilities(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, h.eng.Capabilities())
	return nil
}

func (h *Handler) healthz(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, statusAnswer{Status: "ok"})
	return nil
}

func (h *Handler) readyz(w http.ResponseWriter, r *http.Request) error {
	if err := h.ready(); err != nil {
		if sw, ok := w.(*statusWriter); ok {
			sw.err = err
		}
		code := httpjson.CodeUnavailable
		if errors.Is(err, contract.ErrInsufficientStorage) {
			code = httpjson.CodeInsufficientStorage // read-only: full or failing disk
		}
		writeJSON(w, http.StatusServiceUnavailable, httpjson.Body{
			Status: "error",
			Error:  httpjson.Detail{Code: code, Message: err.Error()},
		})
		return nil
	}
	writeJSON(w, http.StatusOK, statusAnswer{Status: "ok"})
	return nil
}

func (h *Handler) serveMetrics(w http.ResponseWriter, r *http.Request) error {
	h.metrics.http.ServeHTTP(w, r)
	return nil
}

//go:generate go run ./httpref/cmd/httpref -o ../../../docs/http-reference.md openapi.json

// The document is embedded gzip-compressed (openapi.json.gz, written by
// go generate from openapi.json, the source): 156 KB of JSON is 20 KB in
// the release binary. TestOpenAPIGzipCurrent fails when the two differ.
//
//go:generate sh -c "gzip -9 -n -c openapi.json > openapi.json.gz"
//go:embed openapi.json.gz
var openapiGzip []byte

var openapiJSON = gunzip(openapiGzip)

// gunzip decompresses an embedded document; it panics on a corrupt one,
// which TestOpenAPIGzipCurrent rules out.
func gunzip(b []byte) []byte {
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		panic("httpapi: embedded openapi.json.gz: " + err.Error())
	}
	out, err := io.ReadAll(r)
	if err != nil {
		panic("httpapi: embedded openapi.json.gz: " + err.Error())
	}
	return out
}

func (h *Handler) openapi(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, err := w.Write(openapiJSON)
	if err != nil {
		h.log.Debug("writing openapi.json", slog.Any("err", err))
	}
	return nil
}

// globEscape escapes the Redis glob metacharacters of s.
// listPattern is the Redis glob GET /counters scans with, and the filter
// of the ids it returns, for the ids that start with prefix and match
// match ("" for either: no condition). The scan pattern is the narrower
// condition: the prefix as "prefix*" (escaped) when match's literal start
// is a prefix of it (match="*" with prefix="nsA:" scans "nsA:*"), else
// match. The backend checks permissions on the scan pattern, so a token
// that may read the namespace nsA:* may list prefix=nsA: whatever the
// match. Either way the ids kept are exactly those meeting both.
func listPattern(prefix, match string) (pattern string, keep func(id string) bool) {
	switch {
	case prefix == "":
		return match, func(string) bool { return true }
	case match == "":
		return globEscape(prefix) + "*", func(string) bool { return true }
	}
	if lit := globLiteral(match); len(lit) < len(prefix) && strings.HasPrefix(prefix, lit) {
		return globEscape(prefix) + "*", func(id string) bool { return glob.Match(match, id) }
	}
	return match, func(id string) bool { return strings.HasPrefix(id, prefix) }
}

// globLiteral is the start of a Redis glob before its first wildcard or
// escape: every id it matches starts with it.
func globLiteral(pattern string) string {
	if i := strings.IndexAny(pattern, `*?[\`); i >= 0 {
		return pattern[:i]
	}
	return pattern
}

func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
