package tokenizer

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func seq(n, start int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = start + i
	}
	return out
}

func TestBlockHashesFullBlocksOnly(t *testing.T) {
	cases := []struct {
		name       string
		tokens     int
		blockSize  int
		wantBlocks int
	}{
		{"empty", 0, 4, 0},
		{"partial only", 3, 4, 0},
		{"exact", 8, 4, 2},
		{"trailing partial", 10, 4, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Len(t, BlockHashes(seq(tc.tokens, 0), tc.blockSize), tc.wantBlocks)
		})
	}
}

func TestBlockHashesAreChained(t *testing.T) {
	a := seq(12, 0)
	b := append(seq(4, 0), seq(8, 100)...) // same first block, different after
	c := append(seq(4, 50), seq(8, 4)...)  // differs only in the first block
	ha, hb, hc := BlockHashes(a, 4), BlockHashes(b, 4), BlockHashes(c, 4)
	require.Equal(t, ha[0], hb[0], "equal first blocks hash equal")
	require.NotEqual(t, ha[1], hb[1])
	require.NotEqual(t, ha[0], hc[0])
	// Blocks 1 and 2 of a and c hold the same tokens but follow a different
	// first block: chaining makes their hashes differ.
	require.NotEqual(t, ha[1], hc[1])
	require.NotEqual(t, ha[2], hc[2])
}

func TestBlockHashesDeterministicAndPositional(t *testing.T) {
	require.Equal(t, BlockHashes(seq(64, 7), 16), BlockHashes(seq(64, 7), 16))
	swapped := seq(16, 0)
	swapped[3], swapped[4] = swapped[4], swapped[3]
	require.NotEqual(t, BlockHashes(seq(16, 0), 16), BlockHashes(swapped, 16))
}

func TestExtendBlockHashesMatchesFullHashing(t *testing.T) {
	tokens := seq(1000, 3)
	full := BlockHashes(tokens, 32)
	for _, prefix := range []int{0, 31, 32, 100, 999, 1000} {
		prev := BlockHashes(tokens[:prefix], 32)
		require.Equal(t, full, ExtendBlockHashes(prev, tokens, 32), "prefix %d", prefix)
	}
	// Extending with no new full block returns prev unchanged.
	require.Equal(t, full, ExtendBlockHashes(full, tokens[:1000], 32))
}

// Regression (issue 11): prefix matching ignored vLLM's cache_salt, so two
// tenants' identical prompts matched each other's sessions though the
// engine never shares their cache.
func TestSaltedBlockHashes(t *testing.T) {
	toks := seq(100, 1)
	require.Equal(t, BlockHashes(toks, 16), SaltedBlockHashes(toks, 16, ""), "no salt: the plain hashes")
	a, b := SaltedBlockHashes(toks, 16, "tenant-a"), SaltedBlockHashes(toks, 16, "tenant-b")
	require.Len(t, a, 6)
	for i := range a {
		require.NotEqual(t, a[i], b[i], "block %d", i)
		require.NotEqual(t, a[i], BlockHashes(toks, 16)[i], "block %d", i)
	}
	require.Equal(t, a, SaltedBlockHashes(toks, 16, "tenant-a"), "deterministic")
	require.Equal(t, a, ExtendBlockHashes(SaltedBlockHashes(toks[:40], 16, "tenant-a"), toks, 16), "extension keeps the salt")
}

func TestAdapterSalt(t *testing.T) {
	require.Equal(t, "s", AdapterSalt("", "s"), "the base model keeps the salt")
	require.NotEqual(t, AdapterSalt("a", ""), AdapterSalt("b", ""))
	require.NotEqual(t, AdapterSalt("a", "s"), AdapterSalt("a", ""))
	toks := make([]int, 64)
	require.NotEqual(t, BlockHashes(toks, 32), SaltedBlockHashes(toks, 32, AdapterSalt("a", "")))
}
