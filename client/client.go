// Package client is the Go client of counterd's HTTP API (docs/http-api.md).
//
// A Client maps each method to one HTTP request: Incr is
// POST /counters/{id}/increment, Get is GET /counters/{id}, and so on. Error
// answers come back as *Error, which wraps a sentinel such as
// ErrVersionConflict for use with errors.Is.
//
// Every mutation carries an Idempotency-Key header, generated per call unless
// one is given with WithIdempotencyKey. A request that fails with a network
// error or a 5xx answer is retried with jittered exponential backoff and the
// same key, so the server applies it at most once even when the first attempt
// was applied and only its answer was lost.
//
// For a cluster, NewCluster returns a Cluster: the same methods, each call
// sent to the node owning its id on a cached copy of the cluster's ring,
// failing over to the next replica, with a circuit breaker per node
// (docs/client.md).
package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Client talks to one counterd server (or a load balancer in front of
// several). It is safe for concurrent use by multiple goroutines; create one
// and share it. Close releases its idle connections; it is optional.
type Client struct {
	base  *url.URL // scheme and host, with any path prefix
	cfg   config
	hc    *http.Client
	owned *http.Transport // the transport New created, nil with WithHTTPClient
	cl    *clusterState   // NewCluster: picks the node of each attempt; nil otherwise
}

// New returns a Client for the server at addr, such as
// "http://127.0.0.1:8080". An addr without a scheme gets "http://". A path
// in addr is kept as a prefix of every request path.
func New(addr string, opts ...Option) (*Client, error) {
	u, err := parseAddr(addr)
	if err != nil {
		return nil, err
	}
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	switch cfg.durability {
	case "", "sync", "async":
	default:
		return nil, fmt.Errorf("client: durability must be sync or async, not %q", cfg.durability)
	}
	c := &Client{base: u, cfg: cfg, hc: cfg.httpClient}
	if c.hc == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		if t.TLSClientConfig, err = cfg.tls(); err != nil {
			return nil, err
		}
		t.MaxIdleConns = 256
		t.MaxIdleConnsPerHost = 64
		c.owned = t
		c.hc = &http.Client{Transport: t}
	}
	return c, nil
}

// ErrNoCA is returned by New when the WithCAFile file holds no PEM
// certificate.
var ErrNoCA = errors.New("client: no PEM certificate in the CA file")

// tls is the transport's TLS configuration: WithTLSConfig's plus the
// WithCAFile certificates; nil for Go's defaults.
func (cfg *config) tls() (*tls.Config, error) {
	if cfg.caFile == "" {
		return cfg.tlsConfig, nil
	}
	pem, err := os.ReadFile(cfg.caFile)
	if err != nil {
		return nil, fmt.Errorf("client: CA file: %w", err)
	}
	tc := &tls.Config{}
	if cfg.tlsConfig != nil {
		tc = cfg.tlsConfig.Clone()
	}
	if tc.RootCAs == nil {
		if tc.RootCAs, err = x509.SystemCertPool(); err != nil {
			tc.RootCAs = x509.NewCertPool()
		}
	} else {
		tc.RootCAs = tc.RootCAs.Clone()
	}
	if !tc.RootCAs.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%w: %s", ErrNoCA, cfg.caFile)
	}
	return tc, nil
}

// parseAddr normalises a server address (see New).
func parseAddr(addr string) (*url.URL, error) {
	if addr == "" {
		return nil, errors.New("client: empty address")
	}
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil {
		return nil, fmt.Errorf("client: address %q: %w", addr, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("client: address %q: scheme must be http or https", addr)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("client: address %q: no host", addr)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = strings.TrimSuffix(u.RawPath, "/")
	u.RawQuery, u.Fragment = "", ""
	return u, nil
}

// Close closes the idle connections of the transport New created. The Client
// remains usable (new connections are opened as needed). Close does nothing
// with WithHTTPClient.
func (c *Client) Close() error {
	if c.owned != nil {
		c.owned.CloseIdleConnections()
	}
	return nil
}

// Addr returns the server address the Client was created with, normalised.
func (c *Client) Addr() string { return c.base.String() }

// request is one logical call; do sends it, with retries.
type request struct {
	method string
	path   string     // escaped path below the base, starting with "/"
	query  url.Values // may be nil
	body   any        // JSON-encoded when not nil; a []byte is sent as it is
	mutate bool       // sends Idempotency-Key and durability
	once   bool       // never retried (it consumes, and has no idempotency key)
	key    string     // Cluster: route to the owner of key; default: the id in path
	opts   callOptions
}

// mutation builds a request for a mutating call with the given options.
func (c *Client) mutation(method, path string, body any, o callOptions) *request {
	return &request{method: method, path: path, body: body, mutate: true, opts: o}
}

// do sends r and decodes a 2xx answer's body into out (when not nil). It
// reports whether the answer was a replay of an earlier attempt.
func (c *Client) do(ctx context.Context, r *request, out any) (replayed bool, err error) {
	body, rawBody := r.body.([]byte)
	if r.body != nil && !rawBody {
		body, err = json.Marshal(r.body)
		if err != nil {
			return false, fmt.Errorf("client: encode %s %s: %w", r.method, r.path, err)
		}
	}
	u := *c.base
	u.RawPath = c.base.EscapedPath() + r.path
	u.Path, err = url.PathUnescape(u.RawPath)
	if err != nil {
		return false, fmt.Errorf("client: path %q: %w", r.path, err)
	}
	if len(r.query) > 0 {
		u.RawQuery = r.query.Encode()
	}
	target := u.String()

	header := http.Header{}
	header.Set("Accept", "application/json")
	if c.cfg.userAgent != "" {
		header.Set("User-Agent", c.cfg.userAgent)
	}
	if c.cfg.token != "" {
		header.Set("Authorization", "Bearer "+c.cfg.token)
	}
	if rawBody {
		header.Set("Content-Type", "application/octet-stream")
	} else if body != nil {
		header.Set("Content-Type", "application/json")
	}
	retries := c.cfg.maxRetries
	if r.mutate {
		key := r.opts.idempotencyKey
		if key == "" && c.cfg.idempotency {
			key = rand.Text()
		}
		if key != "" {
			header.Set("Idempotency-Key", key)
		} else {
			retries = 0 // a retry could apply the mutation twice
		}
		d := r.opts.durability
		if d == "" {
			d = c.cfg.durability
		}
		if d != "" {
			header.Set("Counterd-Durability", d)
		}
	}

	if r.once {
		retries = 0
	}
	var rt *route
	if c.cl != nil {
		rt = c.cl.route(r, u)
	}
	for attempt := 0; ; attempt++ {
		if rt != nil {
			t, nerr := rt.next()
			if nerr != nil {
				if err != nil { // the previous attempt's
					nerr = fmt.Errorf("%w; last attempt: %w", nerr, err)
				}
				return false, nerr
			}
			target = t
		}
		var retryAfter time.Duration
		var answer http.Header
		replayed, retryAfter, answer, err = c.attempt(ctx, r.method, target, header, body, out)
		if rt != nil {
			rt.done(ctx, answer, err)
		}
		if err == nil || attempt >= retries || !retryable(ctx, err) {
			return replayed, err
		}
		wait := c.backoff(attempt)
		if retryAfter > 0 {
			wait = min(retryAfter, c.cfg.backoffCap)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, fmt.Errorf("%w (gave up retrying: %w)", err, ctx.Err())
		case <-t.C:
		}
	}
}

// attempt sends one HTTP request. answer is the answer's header (nil
// without an answer).
func (c *Client) attempt(ctx context.Context, method, target string, header http.Header, body []byte, out any) (replayed bool, retryAfter time.Duration, answer http.Header, err error) {
	if c.cfg.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.timeout)
		defer cancel()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return false, 0, nil, fmt.Errorf("client: %s %s: %w", method, target, err)
	}
	req.Header = header.Clone()
	resp, err := c.hc.Do(req)
	if err != nil {
		return false, 0, nil, &netError{err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return false, 0, resp.Header, &netError{err: fmt.Errorf("%s %s: reading answer: %w", method, req.URL.Path, err)}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		if s := resp.Header.Get("Retry-After"); s != "" {
			if n, err := strconv.Atoi(s); err == nil && n >= 0 {
				retryAfter = time.Duration(n) * time.Second
			}
		}
		return false, retryAfter, resp.Header, decodeError(resp.StatusCode, raw)
	}
	replayed = resp.Header.Get("Idempotency-Replayed") == "true"
	if b, ok := out.(*[]byte); ok {
		*b = raw
	} else if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return replayed, 0, resp.Header, fmt.Errorf("client: %s %s: decode answer: %w", method, req.URL.Path, err)
		}
	}
	return replayed, 0, resp.Header, nil
}

// netError marks a failure to get an answer; the request may or may not have
// been applied.
type netError struct{ err error }

func (e *netError) Error() string { return "client: " + e.err.Error() }
func (e *netError) Unwrap() error { return e.err }

// retryable reports whether err is worth another attempt.
func retryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false // the caller gave up
	}
	var ae *Error
	if errors.As(err, &ae) {
		return ae.Temporary()
	}
	var ne *netError
	return errors.As(err, &ne)
}

// backoff returns the wait before retry n (from 0): random in [d/2, d] with
// d = min(base*2^n, cap).
func (c *Client) backoff(n int) time.Duration {
	d := c.cfg.backoffBase
	for i := 0; i < n && d < c.cfg.backoffCap; i++ {
		d *= 2
	}
	d = min(d, c.cfg.backoffCap)
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + mrand.N(d-half+1)
}

// decodeError turns a non-2xx answer into an *Error.
func decodeError(status int, raw []byte) error {
	var w struct {
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			Index   *int   `json:"index"`
		} `json:"error"`
		Index *int `json:"index"`
	}
	e := &Error{Status: status, Index: -1, Body: raw}
	if json.Unmarshal(raw, &w) == nil && w.Error != nil {
		e.Code, e.Message = w.Error.Code, w.Error.Message
		switch {
		case w.Error.Index != nil:
			e.Index = *w.Error.Index
		case w.Index != nil:
			e.Index = *w.Index
		}
		return e
	}
	msg := strings.TrimSpace(string(raw))
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	e.Message = msg
	return e
}

// escape escapes one path segment. "." and ".." are escaped too, or the
// server's router would treat them as relative path elements.
func escape(s string) string {
	switch s {
	case ".":
		return "%2E"
	case "..":
		return "%2E%2E"
	}
	return url.PathEscape(s)
}

// checkID catches ids that cannot be put in a path; the server validates the
// rest.
func checkID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty", ErrInvalidID)
	}
	return nil
}
