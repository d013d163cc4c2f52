package server

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/counterd/counterd/internal/api/httpapi"
	"github.com/counterd/counterd/internal/api/resp"
	"github.com/counterd/counterd/internal/auth"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
)

// BenchmarkHTTPIncrement runs POST /counters/{id}/increment through the
// HTTP handler chain as Run builds it, over an in-memory engine, without
// and with --auth (a tokens file of 51 users): the cost of authentication
// and the per-id check on the hot path, without the network's noise.
func BenchmarkHTTPIncrement(b *testing.B) {
	tab, token := benchTokens(b)
	cfg := engine.DefaultConfig()
	cfg.InMemory = true
	cfg.NodeID = "bench"
	cfg.Logger = slog.New(slog.DiscardHandler)
	eng, err := engine.Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close()
	rs := resp.New(engine.Local(eng), resp.Options{}) // its script gate, as routes takes it
	defer rs.Close()
	for _, mode := range []string{"open", "auth"} {
		b.Run(mode, func(b *testing.B) {
			var store *auth.Store
			if mode == "auth" {
				store = auth.NewStore(tab)
			}
			h := withAuth(store, httpapi.New(guardBackend(store, rs.GateWrites(engine.Local(eng))), httpapi.Options{Logger: slog.New(slog.DiscardHandler), Authorize: routeAuthorizer(store)}))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				r := httptest.NewRequest("POST", fmt.Sprintf("/counters/bench:%d/increment", i%100), strings.NewReader(`{"delta":1}`))
				r.Header.Set("Content-Type", "application/json")
				if store != nil {
					r.Header.Set("Authorization", "Bearer "+token)
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusOK {
					b.Fatalf("%d %s", w.Code, w.Body)
				}
			}
		})
	}
}

// benchTokens is a tokens file of 51 users, the bench user's grants last.
func benchTokens(b *testing.B) (*auth.Table, string) {
	const token = "bench-token-0123456789abcdefghij"
	var file strings.Builder
	file.WriteString("users:\n")
	for i := range 50 {
		fmt.Fprintf(&file, "  user%d:\n    tokens: [%q]\n    grants: {\"ns%d:*\": write, \"shared:*\": read}\n", i, auth.Hash(fmt.Appendf(nil, "filler-%d-0123456789", i)), i)
	}
	fmt.Fprintf(&file, "  bench:\n    tokens: [%q]\n    grants: {\"other:*\": read, \"bench:*\": write}\n", auth.Hash([]byte(token)))
	tab, err := auth.Parse(strings.NewReader(file.String()))
	if err != nil {
		b.Fatal(err)
	}
	return tab, token
}

// BenchmarkAuthOnly is what --auth adds to one increment, alone: the
// middleware (SHA-256 of the token or a cache hit, lookup, context), the
// route's permission and the guarded backend's per-id check, around a
// handler that does nothing.
func BenchmarkAuthOnly(b *testing.B) {
	tab, token := benchTokens(b)
	store := auth.NewStore(tab)
	h := withAuth(store, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := authorizeRoute(r, "POST /counters/{id}/increment"); err != nil {
			b.Fatal(err)
		}
		if err := checkOp(r.Context(), contract.Op{Type: contract.OpAdd, ID: "bench:1"}); err != nil {
			b.Fatal(err)
		}
	}))
	r := httptest.NewRequest("POST", "/counters/bench:1/increment", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(w, r)
	}
}
