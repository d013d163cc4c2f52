package engine

import (
	"bytes"
	"github.com/counterd/counterd/internal/contract"
	"testing"
)

// FuzzDecodeEntry: a stored value that is not what encodeEntry wrote must be
// refused with an error, never a panic; one that decodes re-encodes to the
// same bytes.
func FuzzDecodeEntry(f *testing.F) {
	for _, op := range []contract.Op{
		{Type: contract.OpAdd, ID: "c", Delta: 42},
		{Type: contract.OpAdd, ID: "s", Kind: contract.KindSharded, Delta: 7},
		{Type: contract.OpAdd, ID: "p", Kind: contract.KindPN, Delta: -3},
		{Type: contract.OpPFAdd, ID: "u", Items: [][]byte{[]byte("a")}},
		{Type: contract.OpAdd, ID: "w", Kind: contract.KindWindow, Delta: 2},
	} {
		e := openMem(f)
		if _, err := e.Apply(bg, op, contract.WriteOptions{}); err != nil {
			f.Fatal(err)
		}
		r, _, _ := e.acquire(op.ID, false)
		b, err := encodeEntry(nil, r.e)
		r.e.unlock()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{entryFormat, byte(contract.KindHash), 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var en stored
		if err := decodeEntry(b, &en); err != nil {
			return
		}
		out, err := encodeStored(nil, &en)
		if err != nil {
			t.Fatalf("decoded entry does not encode: %v", err)
		}
		var again stored
		if err := decodeEntry(out, &again); err != nil {
			t.Fatalf("re-encoded entry does not decode: %v", err)
		}
		out2, _ := encodeStored(nil, &again)
		if !bytes.Equal(out, out2) {
			t.Fatalf("encoding not stable: %x vs %x", out, out2)
		}
	})
}
