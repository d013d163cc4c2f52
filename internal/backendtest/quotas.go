package backendtest

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/quota"
)

// quotaCases check quotas (internal/quota) through Setup.Quotas: a write
// that would pass max_keys or max_hash_fields fails with
// contract.ErrQuotaExceeded and changes nothing; deletes and expiry give
// room back; a reload keeps the counts. Each case installs quotas over
// its own ids and removes them when it ends.
func quotaCases() []tcase {
	return []tcase{
		{"max_keys", func(e *env) {
			pat := e.useQuotas("namespaces:\n  %q: {max_keys: 3}\n", e.id("q:*"))
			e.apply(add(e.id("q:a"), contract.KindNone, 1))
			e.apply(pfadd(e.id("q:b"), "x"))
			e.apply(hadd(e.id("q:c"), fd("f", 1)))
			d := e.id("q:d")
			for _, op := range []contract.Op{
				add(d, contract.KindNone, 1), add(d, contract.KindPN, 1), set(d, 5), pfadd(d, "x"), hadd(d, fd("f", 1)),
				{Type: contract.OpHSet, ID: d, Fields: []counter.FieldDelta{fd("f", 1)}},
				{Type: contract.OpPFMerge, ID: d, Sources: []string{e.id("q:b")}},
			} {
				_, err := e.b.Apply(e.ctx, op, contract.WriteOptions{})
				e.wantQuotaErr(fmt.Sprintf("%v of a 4th key", op.Type), err, pat, "max_keys", 3)
				e.wantMissing(d)
			}
			e.wantValue(e.id("q:a"), contract.KindCounter, 1)
			e.apply(add(e.id("q:a"), contract.KindNone, 1)) // existing keys take adds
			e.wantValue(e.id("q:a"), contract.KindCounter, 2)
			e.apply(add(e.id("other"), contract.KindNone, 1)) // not under the quota
			e.wantUsage(pat, "", 3)
		}},
		{"batch over max_keys", func(e *env) {
			pat := e.useQuotas("namespaces:\n  %q: {max_keys: 2}\n", e.id("q:*"))
			e.apply(add(e.id("q:a"), contract.KindNone, 1))
			_, err := e.b.ApplyBatch(e.ctx, []contract.Op{add(e.id("q:a"), contract.KindNone, 1), add(e.id("q:b"), contract.KindNone, 1), add(e.id("q:c"), contract.KindNone, 1)}, contract.WriteOptions{})
			e.wantQuotaErr("batch creating two keys", err, pat, "max_keys", 2)
			if e.caps.Batches == contract.BatchAtomic {
				e.wantMissing(e.id("q:c"))
				e.wantMissing(e.id("q:b"))
				e.wantValue(e.id("q:a"), contract.KindCounter, 1)
				e.wantUsage(pat, "", 1)
				return
			}
			// Batches that are not atomic: the ops of different owners
			// (a cluster) are not ordered, so which new key is refused
			// is not fixed; at most one of them exists, and it is
			// counted.
			created := int64(0)
			for _, id := range []string{e.id("q:b"), e.id("q:c")} {
				if e.get(id).Exists {
					created++
				}
			}
			if created > 1 {
				e.t.Errorf("both new keys exist: the batch passed max_keys 2")
			}
			e.wantUsage(pat, "", 1+created)
		}},
		{"delete gives room back", func(e *env) {
			pat := e.useQuotas("namespaces:\n  %q: {max_keys: 2}\n", e.id("q:*"))
			e.apply(add(e.id("q:a"), contract.KindNone, 1))
			e.apply(hadd(e.id("q:b"), fd("f", 1)))
			_, err := e.b.Apply(e.ctx, add(e.id("q:c"), contract.KindNone, 1), contract.WriteOptions{})
			e.wantQuotaErr("3rd key", err, pat, "max_keys", 2)
			e.apply(contract.Op{Type: contract.OpDelete, ID: e.id("q:a")})
			e.apply(add(e.id("q:c"), contract.KindNone, 1))
			// A hash whose last field goes is deleted, like Redis.
			e.apply(contract.Op{Type: contract.OpHDel, ID: e.id("q:b"), Names: []string{"f"}})
			e.apply(pfadd(e.id("q:d"), "x"))
			e.wantUsage(pat, "", 2)
		}},
		{"expiry gives room back", func(e *env) {
			pat := e.useQuotas("namespaces:\n  %q: {max_keys: 1}\n", e.id("q:*"))
			e.apply(contract.Op{Type: contract.OpSet, ID: e.id("q:a"), Value: 1, TTL: time.Second})
			_, err := e.b.Apply(e.ctx, add(e.id("q:b"), contract.KindNone, 1), contract.WriteOptions{})
			e.wantQuotaErr("2nd key", err, pat, "max_keys", 1)
			// The backend's clock passes the TTL too (a tiered node writes
			// the expiry behind at its clock), as in "expiry".
			e.s.Clock.Advance(2 * time.Second)
			// Room returns once the backend has removed the expired key:
			// within QuotaExpiryBound (docs/security.md, "Quotas").
			deadline := time.Now().Add(e.s.QuotaExpiryBound + 2*time.Second)
			for {
				_, err = e.b.Apply(e.ctx, add(e.id("q:b"), contract.KindNone, 1), contract.WriteOptions{})
				if err == nil || !errors.Is(err, contract.ErrQuotaExceeded) || time.Now().After(deadline) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if err != nil {
				e.t.Fatalf("a key after the only one expired: %v", err)
			}
			e.wantUsage(pat, "", 1)
		}},
		{"max_hash_fields", func(e *env) {
			pat := e.useQuotas("namespaces:\n  %q: {max_hash_fields: 3}\n", e.id("h:*"))
			h := e.id("h:1")
			e.apply(hadd(h, fd("a", 1), fd("b", 1)))
			e.apply(contract.Op{Type: contract.OpHSet, ID: h, Fields: []counter.FieldDelta{fd("c", 1)}})
			before := e.snap(h)
			for _, op := range []contract.Op{
				hadd(h, fd("a", 1), fd("d", 1)),
				{Type: contract.OpHSet, ID: h, Fields: []counter.FieldDelta{fd("d", 1)}},
			} {
				_, err := e.b.Apply(e.ctx, op, contract.WriteOptions{})
				e.wantQuotaErr(fmt.Sprintf("%v of a 4th field", op.Type), err, pat, "max_hash_fields", 3)
			}
			e.unchanged(h, before)
			_, err := e.b.Apply(e.ctx, hadd(e.id("h:2"), fd("a", 1), fd("b", 1), fd("c", 1), fd("d", 1)), contract.WriteOptions{})
			e.wantQuotaErr("a new hash of 4 fields", err, pat, "max_hash_fields", 3)
			e.wantMissing(e.id("h:2"))
			e.apply(hadd(h, fd("a", 1), fd("b", 1), fd("c", 1))) // existing fields
			e.apply(contract.Op{Type: contract.OpHDel, ID: h, Names: []string{"a"}})
			e.apply(hadd(h, fd("d", 1)))
		}},
		{"default per namespace", func(e *env) {
			// Ids of the form <prefix>nsN:x are in namespace <prefix>nsN.
			e.useQuotas("namespaces:\n  %q: {max_keys: 5}\ndefault: {max_keys: 2}\n", e.id("big:*"))
			for _, n := range []string{"ns1:a", "ns1:b", "ns2:a", "ns2:b", "big:a", "big:b", "big:c"} {
				e.apply(add(e.id(n), contract.KindNone, 1))
			}
			for _, n := range []string{"ns1:c", "ns2:c"} {
				_, err := e.b.Apply(e.ctx, add(e.id(n), contract.KindNone, 1), contract.WriteOptions{})
				e.wantQuotaErr(n, err, quota.DefaultName, "max_keys", 2)
				e.wantMissing(e.id(n))
			}
			e.wantUsage(quota.DefaultName, e.id("ns1"), 2)
			e.wantUsage(e.id("big:*"), "", 3)
		}},
		{"reload keeps counts", func(e *env) {
			pat := e.useQuotas("namespaces:\n  %q: {max_keys: 3}\n", e.id("q:*"))
			for _, n := range []string{"q:1", "q:2", "q:3"} {
				e.apply(add(e.id(n), contract.KindNone, 1))
			}
			e.useQuotas("namespaces:\n  %q: {max_keys: 4}\n", pat)
			e.wantUsage(pat, "", 3)
			e.apply(add(e.id("q:4"), contract.KindNone, 1))
			_, err := e.b.Apply(e.ctx, add(e.id("q:5"), contract.KindNone, 1), contract.WriteOptions{})
			e.wantQuotaErr("5th key after the reload", err, pat, "max_keys", 4)
			// A new, narrower quota first: the keys it matches move to it.
			narrow := e.id("q:1*")
			e.useQuotas("namespaces:\n  %q: {max_keys: 1}\n  %q: {max_keys: 4}\n", narrow, pat)
			e.wantUsage(narrow, "", 1)
			e.wantUsage(pat, "", 3)
			_, err = e.b.Apply(e.ctx, add(e.id("q:10"), contract.KindNone, 1), contract.WriteOptions{})
			e.wantQuotaErr("2nd key of the narrow quota", err, narrow, "max_keys", 1)
			e.apply(add(e.id("q:5"), contract.KindNone, 1))
		}},
	}
}

// useQuotas installs the quotas file format (with args) for the rest of
// the case and returns args[0].
func (e *env) useQuotas(format string, args ...any) string {
	e.t.Helper()
	if e.s.Quotas == nil {
		e.t.Skip("no quotas on this setup")
	}
	c, err := quota.Parse(strings.NewReader(fmt.Sprintf(format, args...)))
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.s.Quotas.SetQuotas(c); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = e.s.Quotas.SetQuotas(nil) })
	if len(args) == 0 {
		return ""
	}
	return fmt.Sprint(args[0])
}

// wantQuotaErr fails unless err is a quota refusal of quota name's limit.
func (e *env) wantQuotaErr(what string, err error, name, limit string, max int64) {
	e.t.Helper()
	if !errors.Is(err, contract.ErrQuotaExceeded) {
		e.t.Fatalf("%s: error %v, want %v", what, err, contract.ErrQuotaExceeded)
	}
	msg := quota.Message(err)
	if !strings.Contains(msg, "quota exceeded for "+name) || !strings.Contains(msg, fmt.Sprintf("(%s %d)", limit, max)) {
		e.t.Errorf("%s: message %q does not name quota %s and %s %d", what, msg, name, limit, max)
	}
}

// wantUsage fails unless quota name (namespace ns for the default)
// counts keys keys.
func (e *env) wantUsage(name, ns string, keys int64) {
	e.t.Helper()
	us, err := e.s.Quotas.Quotas(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, u := range us {
		if u.Quota == name && u.Namespace == ns {
			if u.Keys != keys {
				e.t.Errorf("quota %s %s counts %d keys, want %d", name, ns, u.Keys, keys)
			}
			return
		}
	}
	e.t.Errorf("quota %s %s not in the usage %+v", name, ns, us)
}
