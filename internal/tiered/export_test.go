package tiered

import (
	"context"

	"github.com/counterd/counterd/internal/idem"
)

// MaxRegisters exposes maxRegisters to the tests.
var MaxRegisters = maxRegisters

// FixClaim makes every idempotency claim c until the returned func runs.
func FixClaim(c string) (restore func()) {
	old := idem.NewClaim
	idem.NewClaim = func() string { return c }
	return func() { idem.NewClaim = old }
}

// IdemLookups is how many won claims b checked in the durable tier.
func IdemLookups(b *Backend) uint64 { return b.idemLookups.Load() }

// PassMarkers sets every slot's idempotency marker to a time passed, as
// one retention after a loss: won claims no longer ask PostgreSQL.
func PassMarkers(ctx context.Context, b *Backend) error {
	p := b.rs.Client().Pipeline()
	for s := range slots {
		p.Set(ctx, markPrefix+"{"+slotTag(s)+"}", 0, 0)
	}
	_, err := p.Exec(ctx)
	return err
}

// NoTrim makes b leave the journal entries of committed batches (as a
// crash between the commit and the trim would).
func NoTrim(b *Backend, on bool) { b.noTrim.Store(on) }

// Journal returns every slot's journal: key -> write id -> entry.
func Journal(ctx context.Context, b *Backend) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	for s := range slots {
		k := journalPrefix + "{" + slotTag(s) + "}"
		m, err := b.rs.Client().HGetAll(ctx, k).Result()
		if err != nil {
			return nil, err
		}
		if len(m) > 0 {
			out[k] = m
		}
	}
	return out, nil
}

// RestoreJournal writes entries (as Journal returned them) back.
func RestoreJournal(ctx context.Context, b *Backend, j map[string]map[string]string) error {
	p := b.rs.Client().Pipeline()
	for k, m := range j {
		for w, v := range m {
			p.HSet(ctx, k, w, v)
		}
	}
	_, err := p.Exec(ctx)
	return err
}

// RecoverDead runs one recovery round of b's journal loop (a full sweep
// when sweep is set).
func RecoverDead(ctx context.Context, b *Backend, sweep bool) error { return b.recoverDead(ctx, sweep) }

// AfterAddScript makes f run after every add's Redis script, before its
// delta is handed to the write-behind, until the returned func runs.
func AfterAddScript(f func(id string)) (restore func()) {
	afterAddScript = f
	return func() { afterAddScript = nil }
}

// JournalReplays is how many journaled writes b replayed.
func JournalReplays(b *Backend) uint64 { return b.journalReplays.Load() }
