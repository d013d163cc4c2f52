package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/counterd/counterd/client"
)

// TestSendEventsStreamUnavailable: the server's 503 stream_unavailable is
// ErrStreamUnavailable, and also ErrUnavailable and temporary.
func TestSendEventsStreamUnavailable(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"status":"error","error":{"code":"stream_unavailable","message":"stream: unavailable: nats:COUNTERD_EVENTS unreachable since 2026-11-29T01:00:00Z: connection refused"}}`))
	}))
	defer srv.Close()
	c, err := client.New(srv.URL, client.WithRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.SendEventsRaw(context.Background(), []byte(`[{"id":"a","type":"t","ts":1}]`))
	var ce *client.Error
	if !errors.Is(err, client.ErrStreamUnavailable) || !errors.Is(err, client.ErrUnavailable) ||
		!errors.As(err, &ce) || ce.Code != client.CodeStreamUnavailable || !ce.Temporary() {
		t.Fatalf("SendEventsRaw: %v", err)
	}
}
