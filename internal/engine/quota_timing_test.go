package engine

import (
	"github.com/counterd/counterd/internal/contract"
	"strconv"
	"testing"
)

// quotaBenchFile has as many patterns as a small deployment, the
// matching one last, and a default.
const quotaBenchFile = "namespaces:\n  \"a:*\": {max_keys: 1000000000}\n  \"b:*\": {max_keys: 1000000000}\n  \"k:*\": {max_keys: 1000000000, max_hash_fields: 1000}\ndefault: {max_keys: 1000000000}\n"

// BenchmarkQuotaAdd compares adds to existing counters (the path quotas
// must not slow down) and key creations (the path that pays), without and
// with quotas.
func BenchmarkQuotaAdd(b *testing.B) {
	for _, q := range []bool{false, true} {
		name := "none"
		if q {
			name = "quotas"
		}
		open := func(b *testing.B) *Engine {
			return openMem(b, func(c *Config) {
				if q {
					c.Quotas = quotaConfig(b, quotaBenchFile)
				}
			})
		}
		b.Run("existing/"+name, func(b *testing.B) {
			e := open(b)
			ids := make([]string, 1024)
			for i := range ids {
				ids[i] = "k:" + strconv.Itoa(i)
				if _, err := e.Add(bg, ids[i], 1, contract.WriteOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if _, err := e.Apply(bg, contract.Op{Type: contract.OpAdd, ID: ids[i&1023], Delta: 1}, contract.WriteOptions{}); err != nil {
						b.Error(err)
						return
					}
					i++
				}
			})
		})
		b.Run("create/"+name, func(b *testing.B) {
			e := open(b)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if _, err := e.Apply(bg, contract.Op{Type: contract.OpAdd, ID: "k:" + strconv.Itoa(i), Delta: 1}, contract.WriteOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
