package ctxwait

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestSleep(t *testing.T) {
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("after the duration: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	began := time.Now()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("a done context: %v, want context.Canceled", err)
	}
	if el := time.Since(began); el > time.Minute {
		t.Fatalf("a done context waited %v", el)
	}
}
