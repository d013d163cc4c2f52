package counter

import "testing"

// BenchmarkFloatAdd: one INCRBYFLOAT-style add of a short increment to a
// short value (parse both, add at 64 bits, format %.17Lf).
func BenchmarkFloatAdd(b *testing.B) {
	var x Float
	b.ReportAllocs()
	for b.Loop() {
		if _, err := x.Add("0.01"); err != nil {
			b.Fatal(err)
		}
	}
}
