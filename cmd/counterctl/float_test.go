package main

import (
	"net/http"
	"strings"
	"testing"
)

// TestGetFloat: get prints a float counter's exact text.
func TestGetFloat(t *testing.T) {
	addr := startServer(t)
	for _, d := range []string{"0.1", "0.2"} {
		resp, err := http.Post(addr+"/counters/price/increment", "application/json", strings.NewReader(`{"kind":"float","delta":`+d+`}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("increment: %s", resp.Status)
		}
	}
	wantMatch(t, ok(t, addr, "get", "price"), `^price  0\.3  \(float, version 2, `)
}
