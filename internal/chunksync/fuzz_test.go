package chunksync

import (
	"errors"
	"reflect"
	"testing"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
)

func fuzzSeedChunk() []byte {
	states := syntheticStates(3)
	states = append(states, engine.State{ID: "page_views:z", Kind: contract.KindPN, Version: 7, Deleted: true, ExpiresAt: -1})
	return EncodeChunk(nil, states)
}

// FuzzDecodeChunk: any bytes either decode into sorted, valid-id states
// that encode and decode back to the same states, or fail with ErrCorrupt;
// never a panic or an allocation beyond the input's size.
func FuzzDecodeChunk(f *testing.F) {
	f.Add(fuzzSeedChunk())
	f.Add([]byte(magicChunk))
	f.Add([]byte(magicChunk + "\xff\xff\xff\xff\x0f"))
	f.Add(EncodeChunk(nil, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		states, err := DecodeChunk(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		for i := range states {
			if err := contract.ValidateID(states[i].ID); err != nil {
				t.Fatalf("decoded invalid id: %v", err)
			}
			if i > 0 && states[i].ID <= states[i-1].ID {
				t.Fatalf("decoded unsorted ids %q, %q", states[i-1].ID, states[i].ID)
			}
		}
		again, err := DecodeChunk(EncodeChunk(nil, states))
		if err != nil {
			t.Fatalf("re-encoded chunk does not decode: %v", err)
		}
		if len(states) == 0 && len(again) == 0 {
			return
		}
		for i := range again { // nil and empty Data are the same state
			if len(again[i].Data) == 0 {
				again[i].Data, states[i].Data = nil, nil
			}
		}
		if !reflect.DeepEqual(states, again) {
			t.Fatalf("round trip changed states:\n%+v\n%+v", states, again)
		}
	})
}

// FuzzDecodeRefs: manifests and ranges decode into refs that encode and
// decode back to the same refs, or fail with ErrCorrupt.
func FuzzDecodeRefs(f *testing.F) {
	s, err := Build(syntheticStates(500), Options{ChunkKeys: 8, RangeChunks: 4})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(s.ManifestBlob())
	rb, _ := s.Blob(s.Ranges[0].Hash)
	f.Add(rb)
	f.Add([]byte(magicManifest + "\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, magic := range []string{magicManifest, magicRange} {
			refs, err := decodeRefs(b, magic)
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("error %v does not wrap ErrCorrupt", err)
				}
				continue
			}
			again, err := decodeRefs(encodeRefs(nil, magic, refs), magic)
			if err != nil {
				t.Fatalf("re-encoded refs do not decode: %v", err)
			}
			if !reflect.DeepEqual(refs, again) {
				t.Fatalf("round trip changed refs:\n%+v\n%+v", refs, again)
			}
		}
	})
}
