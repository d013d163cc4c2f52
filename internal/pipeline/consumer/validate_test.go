package consumer

import (
	"errors"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
)

// TestValidateValidIDMatchesValidate: for an op whose id passes
// contract.ValidateID (as a rule's counter id does), the applier's check
// without the id's second validation refuses exactly what
// ValidateDefaulted refuses, with the same error, on a backend with and
// without Redis hash tags (whose ids may not start with '}').
func TestValidateValidIDMatchesValidate(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		l := contract.DefaultLimits()
		l.RedisHashTags = rapid.Bool().Draw(t, "hashtags")
		l.HLLPrecision = rapid.SampledFrom([]uint8{0, 14}).Draw(t, "lprec")
		l = l.WithDefaults()
		op := contract.Op{
			Type:         rapid.SampledFrom([]contract.OpType{contract.OpAdd, contract.OpPFAdd, contract.OpSet, contract.OpHAdd}).Draw(t, "type"),
			ID:           rapid.SampledFrom([]string{"views:p1", "}x", "{a}", "u:42:likes"}).Draw(t, "id"),
			Delta:        rapid.Int64Range(-3, 3).Draw(t, "delta"),
			TTL:          time.Duration(rapid.IntRange(-1, 2).Draw(t, "ttl")) * time.Hour,
			HLLPrecision: rapid.SampledFrom([]uint8{0, 3, 12, 14}).Draw(t, "prec"),
		}
		if rapid.Bool().Draw(t, "window") {
			op.Kind = contract.KindWindow
			op.Window = counter.WindowSpec{Granularity: time.Minute, Span: time.Duration(rapid.IntRange(0, 3).Draw(t, "span")) * time.Hour}
		}
		if op.Type == contract.OpPFAdd {
			op.Items = make([][]byte, rapid.IntRange(0, 3).Draw(t, "items"))
		}
		if contract.ValidateID(op.ID) != nil {
			t.Fatalf("generator: %q is not a valid id", op.ID)
		}
		want := op.ValidateDefaulted(&l)
		got := op.ValidateDefaultedValidID(&l)
		if (got == nil) != (want == nil) || (got != nil && got.Error() != want.Error()) {
			t.Fatalf("%+v: ValidateDefaultedValidID %v, ValidateDefaulted %v", op, got, want)
		}
	})
	// The backend's own restriction stays checked.
	l := contract.DefaultLimits().WithDefaults()
	l.RedisHashTags = true
	op := contract.Op{Type: contract.OpAdd, ID: "}x", Delta: 1}
	if err := op.ValidateDefaultedValidID(&l); !errors.Is(err, contract.ErrInvalidID) {
		t.Fatalf("id %q on a backend with Redis hash tags: %v, want ErrInvalidID", op.ID, err)
	}
}
