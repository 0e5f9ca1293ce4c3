package tokenizer

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEncodeGolden pins the token ids of real text: prose, multilingual
// text, Markdown with code, a typical chat and invalid UTF-8, in both
// encodings. The values were computed with tiktoken-go v0.1.8, which duet
// used before it encoded with its own bounded BPE (issue 12), so block
// hashes of real text, and with them routing, are unchanged. Each row has
// the token count, HashTokens of the ids and the last chained hash of
// 4-token blocks.
func TestEncodeGolden(t *testing.T) {
	texts := fixtureTexts(t)
	cases := []struct {
		encoding, text string
		count          int
		hash, block    uint64
	}{
		{"cl100k_base", "invalid utf-8", 17, 0xacabcddf598dc6cf, 0xbfb687fee429ee50},
		{"cl100k_base", "markdown and code", 563, 0xd2c5ad15512a7dbf, 0x4703a1dd097a7852},
		{"cl100k_base", "multilingual", 1348, 0xa5aeac5ed072ab82, 0x975a6ea57a361c80},
		{"cl100k_base", "opticks prose", 12118, 0x07f026459094a8f7, 0x70337b359de616c2},
		{"cl100k_base", "synthetic chat", 8687, 0xdc4ed3870bd814e6, 0x182299fa978bbe1d},
		{"cl100k_base", "typical chat", 1893, 0xea4c8be22550a51d, 0x2b0e89db4aa8f23a},
		{"o200k_base", "invalid utf-8", 15, 0xd8ac72cf19757974, 0xfaaa25d572ea01c4},
		{"o200k_base", "markdown and code", 564, 0xa6bf6bf627f02d61, 0x596ffa7f69f8726c},
		{"o200k_base", "multilingual", 1008, 0x6622e946267b0064, 0xa8fbc6ff14569a87},
		{"o200k_base", "opticks prose", 12035, 0x18c82bd2d22863d5, 0xf304e5ba7337aa3c},
		{"o200k_base", "synthetic chat", 8687, 0x1f6903bb981c97f9, 0x0c914b3ab35731c7},
		{"o200k_base", "typical chat", 1553, 0x0c51f1d1eb0064ca, 0x7c78cbef516cfc2d},
	}
	for _, tc := range cases {
		t.Run(tc.encoding+"/"+tc.text, func(t *testing.T) {
			tok := newTestTokenizer(t, Config{Encoding: tc.encoding, MessageCacheSize: 64})
			text, ok := texts[tc.text]
			require.True(t, ok, "no fixture %q", tc.text)
			ids := tok.Encode(text)
			require.Len(t, ids, tc.count)
			require.Equal(t, tc.hash, HashTokens(ids), "token ids changed")
			hashes := BlockHashes(ids, 4)
			require.Equal(t, tc.block, hashes[len(hashes)-1], "block hashes changed")
			if tc.text == "typical chat" {
				require.Equal(t, ids, encodeChat(t, tok, fixtureChat(t)))
			}
		})
	}
}
