package engine

import (
	"bytes"
	"testing"
)

// FuzzDecodeEntry: a stored value that is not what encodeEntry wrote must be
// refused with an error, never a panic; one that decodes re-encodes to the
// same bytes.
func FuzzDecodeEntry(f *testing.F) {
	for _, op := range []Op{
		{Type: OpAdd, ID: "c", Delta: 42},
		{Type: OpAdd, ID: "s", Kind: KindSharded, Delta: 7},
		{Type: OpAdd, ID: "p", Kind: KindPN, Delta: -3},
		{Type: OpPFAdd, ID: "u", Items: [][]byte{[]byte("a")}},
		{Type: OpAdd, ID: "w", Kind: KindWindow, Delta: 2},
	} {
		e := openMem(f)
		if _, err := e.Apply(bg, op, WriteOptions{}); err != nil {
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
	f.Add([]byte{entryFormat, byte(KindHash), 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var en entry
		if err := decodeEntry(b, &en); err != nil {
			return
		}
		out, err := encodeEntry(nil, &en)
		if err != nil {
			t.Fatalf("decoded entry does not encode: %v", err)
		}
		var again entry
		if err := decodeEntry(out, &again); err != nil {
			t.Fatalf("re-encoded entry does not decode: %v", err)
		}
		out2, _ := encodeEntry(nil, &again)
		if !bytes.Equal(out, out2) {
			t.Fatalf("encoding not stable: %x vs %x", out, out2)
		}
	})
}

// FuzzGlob checks Glob against a slow recursive reference matcher.
func FuzzGlob(f *testing.F) {
	for _, s := range [][2]string{{"*", "x"}, {"a?c", "abc"}, {"a[b-d]*", "acz"}, {`\*`, "*"}, {"[^a]", "b"}, {"**a*", "bba"}, {"[", "["}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, s string) {
		if len(pattern) > 64 || len(s) > 64 {
			return
		}
		if got, want := Glob(pattern, []byte(s)), globRef(pattern, s); got != want {
			t.Fatalf("Glob(%q, %q) = %v, reference says %v", pattern, s, got, want)
		}
	})
}

// globRef is the definition of Glob written as plain recursion.
func globRef(p, s string) bool {
	if p == "" {
		return s == ""
	}
	switch p[0] {
	case '*':
		for i := 0; i <= len(s); i++ {
			if globRef(p[1:], s[i:]) {
				return true
			}
		}
		return false
	case '?':
		return s != "" && globRef(p[1:], s[1:])
	case '[':
		if s == "" {
			return false
		}
		ok, next := matchClass(p, 0, s[0])
		return next > 0 && ok && globRef(p[next:], s[1:])
	case '\\':
		if len(p) > 1 {
			return s != "" && s[0] == p[1] && globRef(p[2:], s[1:])
		}
	}
	return s != "" && s[0] == p[0] && globRef(p[1:], s[1:])
}
