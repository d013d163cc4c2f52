package auth

import (
	"context"
	"strings"
)

type (
	principalKey struct{}
	tokenKey     struct{}
)

// NewContext returns ctx carrying the authenticated principal p.
func NewContext(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the principal of ctx, or nil.
func FromContext(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

// WithToken returns ctx carrying the bearer token that authenticated it,
// for requests forwarded to another node (rate-limit checks in a
// cluster), which authorizes them again as the same user. Only front ends
// that may forward add it: it costs an allocation.
func WithToken(ctx context.Context, token string) context.Context {
	return context.WithValue(ctx, tokenKey{}, token)
}

// TokenFromContext returns the bearer token of ctx, or "".
func TokenFromContext(ctx context.Context) string {
	t, _ := ctx.Value(tokenKey{}).(string)
	return t
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
