package membership

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

func TestSecretKey(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	cfg := fastConfig(t, "n1")
	cfg.SecretKey = key
	a := start(t, cfg)

	plain := fastConfig(t, "n2", a.Addr())
	if m, err := Start(plain); err == nil {
		_ = m.Shutdown()
		t.Fatal("a node without the key joined")
	}
	wrong := fastConfig(t, "n3", a.Addr())
	wrong.SecretKey = bytes.Repeat([]byte{8}, 32)
	if m, err := Start(wrong); err == nil {
		_ = m.Shutdown()
		t.Fatal("a node with another key joined")
	}
	good := fastConfig(t, "n4", a.Addr())
	good.SecretKey = key
	b := start(t, good)
	ms := []*Membership{a, b}
	eventually(t, 5*time.Second, "n1 and n4 see each other", func() bool { return allAlive(ms, "n1", "n4") })
	if slices.Contains(a.Alive(), "n2") || slices.Contains(a.Alive(), "n3") {
		t.Fatalf("keyless nodes in %v", a.Alive())
	}

	bad := fastConfig(t, "n5")
	bad.SecretKey = []byte("short")
	if err := bad.Validate(); err == nil {
		t.Fatal("5-byte key accepted")
	}
}

func TestAdmit(t *testing.T) {
	errRogue := errors.New("rogue")
	var calls atomic.Int64
	admit := func(_ context.Context, m Member) error {
		calls.Add(1)
		if m.ID == "n3" {
			return errRogue
		}
		return nil
	}
	cfg := func(id string, join ...string) Config {
		c := fastConfig(t, id, join...)
		c.Admit, c.AdmitRetry = admit, 50*time.Millisecond
		return c
	}
	a := start(t, cfg("n1"))
	b := start(t, cfg("n2", a.Addr()))
	ms := []*Membership{a, b}
	eventually(t, 5*time.Second, "n1 and n2 admit each other", func() bool { return allAlive(ms, "n1", "n2") })

	// n3 gossips fine but is never admitted; it is retried meanwhile.
	rogue := start(t, fastConfig(t, "n3", a.Addr()))
	eventually(t, 5*time.Second, "n3 hears of n1", func() bool { return slices.Contains(rogue.Alive(), "n1") })
	before := calls.Load()
	eventually(t, 5*time.Second, "n3 retried", func() bool { return calls.Load() >= before+4 })
	for _, m := range ms {
		for _, mem := range m.Members() {
			if mem.ID == "n3" {
				t.Fatalf("%s reports the unadmitted n3: %+v", m.ID(), mem)
			}
		}
	}
	// Its departure is not reported either, and admissions stop.
	_ = rogue.Shutdown()
	eventually(t, 5*time.Second, "retries stop", func() bool {
		n := calls.Load()
		time.Sleep(200 * time.Millisecond)
		return calls.Load() == n
	})
	if !allAlive(ms, "n1", "n2") || len(a.Members()) != 2 {
		t.Fatalf("members after n3 left: %v", a.Members())
	}
}
