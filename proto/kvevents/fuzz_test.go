package kvevents

import "testing"

// FuzzDecodeBatch checks that DecodeBatch never panics, and that whatever it
// accepts re-encodes and decodes again.
func FuzzDecodeBatch(f *testing.F) {
	for _, seed := range [][]byte{vllmMapIntHashes, vllmArrayBytesHashes, vllmMapRemovedCleared,
		mp("92", tsHex, "90"), mp("91"), nil} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		b, err := DecodeBatch(payload)
		if err != nil {
			if !isMalformed(err) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		for _, layout := range []Layout{LayoutMap, LayoutArray} {
			p, err := EncodeBatch(b, layout)
			if err != nil {
				t.Fatalf("EncodeBatch(%s) of a decoded batch: %v", layout, err)
			}
			if _, err := DecodeBatch(p); err != nil {
				t.Fatalf("DecodeBatch(EncodeBatch(%s)): %v", layout, err)
			}
		}
	})
}
