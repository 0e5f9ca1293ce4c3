package kvevents

import (
	"crypto/sha256"
	"encoding/binary"
	"testing"
)

// bench32 returns a 32-block BlockStored batch of 16-token blocks (one
// request's prefill), with int or sha256 bytes hashes.
func bench32(bytesHashes bool) []byte {
	ev := &BlockStored{BlockSize: 16, Medium: "GPU", ParentBlockHash: HashFromUint64(1 << 63), HasParent: true}
	for i := 0; i < 32; i++ {
		if bytesHashes {
			sum := sha256.Sum256(binary.BigEndian.AppendUint64(nil, uint64(i)))
			ev.BlockHashes = append(ev.BlockHashes, HashFromBytes(sum[:]))
		} else {
			ev.BlockHashes = append(ev.BlockHashes, HashFromUint64(uint64(i)*0x9e3779b97f4a7c15))
		}
		for j := 0; j < 16; j++ {
			ev.TokenIDs = append(ev.TokenIDs, 1000+i*16+j*997)
		}
	}
	rank := int64(0)
	p, err := EncodeBatch(Batch{TS: 1757500000.25, Events: []Event{ev}, DataParallelRank: &rank}, LayoutMap)
	if err != nil {
		panic(err)
	}
	return p
}

func BenchmarkDecodeBatch32Blocks(b *testing.B) {
	for _, tc := range []struct {
		name  string
		bytes bool
	}{{"int-hashes", false}, {"sha256-hashes", true}} {
		p := bench32(tc.bytes)
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(p)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecodeBatch(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkEncodeBatch32Blocks(b *testing.B) {
	batch, err := DecodeBatch(bench32(false))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeBatch(batch, LayoutMap); err != nil {
			b.Fatal(err)
		}
	}
}
