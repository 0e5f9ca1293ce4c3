package kvevents

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"
)

// Hand-built msgpack, written the way msgspec encodes vLLM's and SGLang's
// structs (see the package doc), without going through this package's
// encoder. Each helper emits one msgpack item.

// mp concatenates hex strings (spaces allowed) and raw byte items.
func mp(parts ...any) []byte {
	var b bytes.Buffer
	for _, p := range parts {
		switch p := p.(type) {
		case string:
			raw, err := hex.DecodeString(strings.ReplaceAll(p, " ", ""))
			if err != nil {
				panic(err)
			}
			b.Write(raw)
		case []byte:
			b.Write(p)
		default:
			panic("mp: bad part")
		}
	}
	return b.Bytes()
}

// fixstr is a msgpack fixstr (len < 32).
func fixstr(s string) []byte {
	if len(s) >= 32 {
		panic("fixstr too long")
	}
	return append([]byte{0xa0 | byte(len(s))}, s...)
}

// bin8 is a msgpack bin 8.
func bin8(p []byte) []byte { return append([]byte{0xc4, byte(len(p))}, p...) }

// tsHex is float64 1757500000.25 as msgspec writes a Python float (0xcb).
const tsHex = "cb 41da305498100000"

// bigHash is 15760518052499183552 (> 2^63, as vLLM's int hashes often are):
// uint64 0xcf.
const bigHashHex = "cf dab89baa7b5857c0"

const bigHash = 15760518052499183552

// vllmMapIntHashes: vLLM after #42892, VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1,
// the shape of a batch captured from vLLM 0.26.0 (volcano-sh/kthena#1535):
// KVEventBatch(ts, [BlockStored(block_hashes=[bigHash, 7],
// parent_block_hash=None, token_ids=[1, 2, 300, 70000], block_size=2,
// lora_id=None, medium="GPU", lora_name=None, extra_keys=[None], group_idx=0,
// kv_cache_spec_kind="full_attention")], data_parallel_rank=0).
var vllmMapIntHashes = mp(
	"93", tsHex, // [ts, events, data_parallel_rank]
	"91", // one event
	"8b", // map of 11: type + 7 fields without default + 3 set optional ones
	fixstr("type"), fixstr("BlockStored"),
	fixstr("block_hashes"), "92", bigHashHex, "07",
	fixstr("parent_block_hash"), "c0",
	fixstr("token_ids"), "94 01 02 cd012c ce00011170",
	fixstr("block_size"), "02",
	fixstr("lora_id"), "c0",
	fixstr("medium"), fixstr("GPU"),
	fixstr("lora_name"), "c0",
	fixstr("extra_keys"), "91 c0",
	fixstr("group_idx"), "00",
	fixstr("kv_cache_spec_kind"), fixstr("full_attention"),
	"00", // data_parallel_rank
)

var (
	hashAB   = bytes.Repeat([]byte{0xab}, 32) // a sha256 block hash
	parent01 = bytes.Repeat([]byte{0x01}, 32)
)

// vllmArrayBytesHashes: vLLM v0.11-v0.23 (array_like=True), default sha256
// bytes hashes: [ts, [["BlockStored", [hashAB], parent01, [1,2,3,4], 4, None,
// "GPU", None]], 0]. Trailing defaults (extra_keys...) omitted.
var vllmArrayBytesHashes = mp(
	"93", tsHex, "91",
	"98", fixstr("BlockStored"),
	"91", bin8(hashAB),
	bin8(parent01),
	"94 01 02 03 04",
	"04", "c0", fixstr("GPU"), "c0",
	"00",
)

// vllmMapRemovedCleared: map layout, a removal and a clear, no rank (the
// 2-element batch msgspec writes when data_parallel_rank is None).
var vllmMapRemovedCleared = mp(
	"92", tsHex, "92",
	"83", fixstr("type"), fixstr("BlockRemoved"), fixstr("block_hashes"), "91 05", fixstr("medium"), fixstr("GPU"),
	"81", fixstr("type"), fixstr("AllBlocksCleared"),
)

// sglangNegHash is an SGLang hash_str_to_int64 value: int64 0xd3.
const sglangNegHashHex = "d3 9efeccd506ca855f"

const sglangNegHash int64 = -6989924356318395041

func TestDecodeBatchConformance(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	tests := []struct {
		name    string
		payload []byte
		want    Batch
	}{
		{
			name:    "vllm map int hashes (vLLM after #42892)",
			payload: vllmMapIntHashes,
			want: Batch{TS: 1757500000.25, DataParallelRank: i64(0), Events: []Event{&BlockStored{
				BlockHashes: []BlockHash{HashFromUint64(bigHash), HashFromUint64(7)},
				TokenIDs:    []int{1, 2, 300, 70000}, BlockSize: 2, Medium: "GPU",
				ExtraKeys: []byte{0x91, 0xc0}, GroupIdx: i64(0), KVCacheSpecKind: "full_attention",
			}}},
		},
		{
			name:    "vllm array bytes hashes (vLLM v0.11-v0.23)",
			payload: vllmArrayBytesHashes,
			want: Batch{TS: 1757500000.25, DataParallelRank: i64(0), Events: []Event{&BlockStored{
				BlockHashes: []BlockHash{HashFromBytes(hashAB)}, ParentBlockHash: HashFromBytes(parent01), HasParent: true,
				TokenIDs: []int{1, 2, 3, 4}, BlockSize: 4, Medium: "GPU",
			}}},
		},
		{
			name:    "vllm map removed and cleared, no rank",
			payload: vllmMapRemovedCleared,
			want: Batch{TS: 1757500000.25, Events: []Event{
				&BlockRemoved{BlockHashes: []BlockHash{HashFromUint64(5)}, Medium: "GPU"}, &AllBlocksCleared{},
			}},
		},
		{
			name: "vllm v0.9 array: 6-field BlockStored, 2-field BlockRemoved, no rank",
			payload: mp("92", tsHex, "92",
				"96", fixstr("BlockStored"), "92 01 02", "c0", "92 0a 0b", "01", "c0",
				"92", fixstr("BlockRemoved"), "91 01"),
			want: Batch{TS: 1757500000.25, Events: []Event{
				&BlockStored{BlockHashes: []BlockHash{HashFromUint64(1), HashFromUint64(2)}, TokenIDs: []int{10, 11}, BlockSize: 1},
				&BlockRemoved{BlockHashes: []BlockHash{HashFromUint64(1)}},
			}},
		},
		{
			name: "vllm array with more trailing fields than known, and a 4-element batch",
			payload: mp("94", tsHex, "91",
				"9e", fixstr("BlockStored"), "91 01", "c0", "91 0a", "01", "c0", fixstr("CPU"), fixstr("my-lora"),
				"91 91 a1 78", "03", fixstr("sliding_window"), "cd 1000", fixstr("LOCAL"), fixstr("x"),
				"07", fixstr("future")),
			want: Batch{TS: 1757500000.25, DataParallelRank: i64(7), Events: []Event{&BlockStored{
				BlockHashes: []BlockHash{HashFromUint64(1)}, TokenIDs: []int{10}, BlockSize: 1, Medium: "CPU",
				LoraName: "my-lora", ExtraKeys: []byte{0x91, 0x91, 0xa1, 0x78}, GroupIdx: i64(3),
				KVCacheSpecKind: "sliding_window", KVCacheSpecSlidingWindow: i64(4096),
			}}},
		},
		{
			name: "vllm map with unknown keys and reordered type",
			payload: mp("93", tsHex, "91",
				"87", fixstr("block_hashes"), "91 01", fixstr("future_field"), "82 a1 61 91 c0 a1 62 c3",
				fixstr("token_ids"), "91 05", fixstr("type"), fixstr("BlockStored"),
				fixstr("block_size"), "01", fixstr("session_id"), fixstr("sess-1"), fixstr("event_version"), "02",
				"01"),
			want: Batch{TS: 1757500000.25, DataParallelRank: i64(1), Events: []Event{&BlockStored{
				BlockHashes: []BlockHash{HashFromUint64(1)}, TokenIDs: []int{5}, BlockSize: 1, SessionID: "sess-1", EventVersion: 2,
			}}},
		},
		{
			name: "vllm batch as a map (EventBatch without array_like)",
			payload: mp("83", fixstr("ts"), tsHex, fixstr("events"), "91 81", fixstr("type"), fixstr("AllBlocksCleared"),
				fixstr("data_parallel_rank"), "02"),
			want: Batch{TS: 1757500000.25, DataParallelRank: i64(2), Events: []Event{&AllBlocksCleared{}}},
		},
		{
			name: "sglang early array: int64 hashes, no medium",
			payload: mp("93", tsHex, "92",
				"96", fixstr("BlockStored"), "91", sglangNegHashHex, "2a", "92 01 02", "02", "c0",
				"92", fixstr("BlockRemoved"), "91", sglangNegHashHex,
				"00"),
			want: Batch{TS: 1757500000.25, DataParallelRank: i64(0), Events: []Event{
				&BlockStored{BlockHashes: []BlockHash{HashFromInt64(sglangNegHash)}, ParentBlockHash: HashFromUint64(42), HasParent: true,
					TokenIDs: []int{1, 2}, BlockSize: 2},
				&BlockRemoved{BlockHashes: []BlockHash{HashFromInt64(sglangNegHash)}},
			}},
		},
		{
			name: "sglang array without omit_defaults: medium always, metadata cache_salt, null rank",
			payload: mp("93", tsHex, "93",
				"98", fixstr("BlockStored"), "91 01", "c0", "92 01 02", "02", "c0", fixstr("CPU_PINNED"),
				"81", fixstr("cache_salt"), fixstr("tenant-a"),
				"93", fixstr("BlockRemoved"), "91 01", "c0",
				"91", fixstr("AllBlocksCleared"),
				"c0"),
			want: Batch{TS: 1757500000.25, Events: []Event{
				&BlockStored{BlockHashes: []BlockHash{HashFromUint64(1)}, TokenIDs: []int{1, 2}, BlockSize: 2,
					Medium: "CPU_PINNED", CacheSalt: "tenant-a"},
				&BlockRemoved{BlockHashes: []BlockHash{HashFromUint64(1)}},
				&AllBlocksCleared{},
			}},
		},
		{
			name: "sglang map (after #37482): cache_salt and session_id, medium omitted when None",
			payload: mp("93", tsHex, "92",
				"88", fixstr("type"), fixstr("BlockStored"), fixstr("block_hashes"), "91 7b",
				fixstr("parent_block_hash"), "c0", fixstr("token_ids"), "92 01 02",
				fixstr("block_size"), "02", fixstr("lora_id"), "c0", fixstr("cache_salt"), fixstr("tenant-a"),
				fixstr("session_id"), fixstr("s1"),
				"82", fixstr("type"), fixstr("BlockRemoved"), fixstr("block_hashes"), "91 7b",
				"03"),
			want: Batch{TS: 1757500000.25, DataParallelRank: i64(3), Events: []Event{
				&BlockStored{BlockHashes: []BlockHash{HashFromUint64(123)}, TokenIDs: []int{1, 2}, BlockSize: 2,
					CacheSalt: "tenant-a", SessionID: "s1"},
				&BlockRemoved{BlockHashes: []BlockHash{HashFromUint64(123)}},
			}},
		},
		{
			name: "sglang bigram token pairs keep the token",
			payload: mp("92", tsHex, "91",
				"97", fixstr("BlockStored"), "91 01", "c0", "92 92 05 06 92 06 07", "02", "c0", fixstr("GPU")),
			want: Batch{TS: 1757500000.25, Events: []Event{
				&BlockStored{BlockHashes: []BlockHash{HashFromUint64(1)}, TokenIDs: []int{5, 6}, BlockSize: 2, Medium: "GPU"},
			}},
		},
		{
			name:    "events without hashes are dropped",
			payload: mp("92", tsHex, "92", "92", fixstr("BlockRemoved"), "90", "91", fixstr("AllBlocksCleared")),
			want:    Batch{TS: 1757500000.25, Events: []Event{&AllBlocksCleared{}}},
		},
		{
			name:    "heartbeat: empty events",
			payload: mp("93", tsHex, "90", "00"),
			want:    Batch{TS: 1757500000.25, DataParallelRank: i64(0), Events: []Event{}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeBatch(tc.payload)
			if err != nil {
				t.Fatalf("DecodeBatch: %v", err)
			}
			assertBatch(t, tc.want, got)
		})
	}
}

func TestDecodeBatchRejects(t *testing.T) {
	tests := []struct {
		name    string
		payload []byte
		want    string
	}{
		{"empty", nil, "truncated"},
		{"not an array", mp("05"), "want an array"},
		{"one-element batch", mp("91", tsHex), "want at least 2"},
		{"unknown tag", mp("92", tsHex, "91 91", fixstr("BlockMoved")), `unknown event tag "BlockMoved"`},
		{"map without type", mp("92", tsHex, "91 81", fixstr("block_hashes"), "91 01"), "no type key"},
		{"stored missing tokens", mp("92", tsHex, "91 83", fixstr("type"), fixstr("BlockStored"),
			fixstr("block_hashes"), "91 01", fixstr("block_size"), "01"), "missing"},
		{"short array event", mp("92", tsHex, "91 93", fixstr("BlockStored"), "91 01 c0"), "want at least 5"},
		{"string hash", mp("92", tsHex, "91 92", fixstr("BlockRemoved"), "91", fixstr("x")), "want an integer"},
		{"negative token", mp("92", tsHex, "91 95", fixstr("BlockStored"), "91 01 c0 91 ff 01"), "out of range"},
		{"trailing bytes", append(append([]byte{}, vllmMapRemovedCleared...), 0x00), "trailing"},
		{"truncated", vllmMapIntHashes[:len(vllmMapIntHashes)-5], "truncated"},
		{"huge array length", mp("92", tsHex, "dd ffffffff"), "exceed the limit"},
		{"length beyond input", mp("92", tsHex, "dc 0100"), "truncated"},
		{"deep nesting in an unknown field", mp("92", tsHex, "91 82", fixstr("type"), fixstr("AllBlocksCleared"),
			fixstr("x"), bytes.Repeat([]byte{0x91}, 100), "c0"), "nested deeper"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeBatch(tc.payload)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("DecodeBatch error = %v, want it to contain %q", err, tc.want)
			}
			if !isMalformed(err) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
		})
	}
}

func TestEncodeBatchMatchesVLLMBytes(t *testing.T) {
	tests := []struct {
		name    string
		payload []byte
		layout  Layout
	}{
		{"map int hashes", vllmMapIntHashes, LayoutMap},
		{"array bytes hashes", vllmArrayBytesHashes, LayoutArray},
		{"map removed and cleared", vllmMapRemovedCleared, LayoutMap},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := DecodeBatch(tc.payload)
			if err != nil {
				t.Fatal(err)
			}
			got, err := EncodeBatch(b, tc.layout)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tc.payload) {
				t.Fatalf("EncodeBatch:\n got %x\nwant %x", got, tc.payload)
			}
		})
	}
}

func TestEncodeBatchRoundTripsBothLayouts(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	in := Batch{TS: 12.5, DataParallelRank: i64(1), Events: []Event{
		&BlockStored{BlockHashes: []BlockHash{HashFromUint64(1 << 63), HashFromBytes([]byte("abc"))},
			ParentBlockHash: HashFromUint64(9), HasParent: true, TokenIDs: []int{1, 2, 3, 4}, BlockSize: 2,
			LoraID: i64(4), Medium: "CPU", LoraName: "l", GroupIdx: i64(1), KVCacheSpecKind: "sliding_window",
			KVCacheSpecSlidingWindow: i64(128)},
		&BlockRemoved{BlockHashes: []BlockHash{HashFromUint64(1)}, Medium: "GPU", GroupIdx: i64(2)},
		&AllBlocksCleared{},
	}}
	for _, layout := range []Layout{LayoutMap, LayoutArray} {
		t.Run(layout.String(), func(t *testing.T) {
			p, err := EncodeBatch(in, layout)
			if err != nil {
				t.Fatal(err)
			}
			out, err := DecodeBatch(p)
			if err != nil {
				t.Fatal(err)
			}
			assertBatch(t, in, out)
		})
	}
}
