package auth

import (
	"context"
	"strings"
)

type ctxKey struct{}

// credential is what an authenticated request carries in its context: the
// principal, and the bearer token so that a request forwarded to another
// node (rate-limit checks in a cluster) is authorized there as the same
// user.
type credential struct {
	p     *Principal
	token string
}

// NewContext returns ctx carrying the principal p authenticated by token.
func NewContext(ctx context.Context, p *Principal, token string) context.Context {
	return context.WithValue(ctx, ctxKey{}, credential{p, token})
}

// FromContext returns the principal of ctx, or nil.
func FromContext(ctx context.Context) *Principal {
	c, _ := ctx.Value(ctxKey{}).(credential)
	return c.p
}

// TokenFromContext returns the bearer token of ctx, or "".
func TokenFromContext(ctx context.Context) string {
	c, _ := ctx.Value(ctxKey{}).(credential)
	return c.token
}

// BearerToken extracts the token of an "Authorization: Bearer <token>"
// value (HTTP header or gRPC metadata); "" if there is none.
func BearerToken(h string) string {
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(tok)
}
