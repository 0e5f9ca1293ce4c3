package tokenizer

import (
	"math/rand"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// checkPairTable merges piece by bytes, as mergeSmall does, and at every
// step requires the pair table to agree with the byte table on every pair
// of adjacent parts: the token they concatenate to, or none. This is what
// mergeLarge relies on, although the pair table holds only each token's
// last merge.
func checkPairTable(t *testing.T, ranks *rankTable, piece string) {
	t.Helper()
	merges := ranks.merges
	parts := make([]string, len(piece))
	for i := range piece {
		parts[i] = piece[i : i+1]
	}
	for {
		best, bestRank := -1, uint32(noRank)
		for i := 0; i+1 < len(parts); i++ {
			r := ranks.get(parts[i] + parts[i+1])
			if len(parts[i])+len(parts[i+1]) > 2 {
				got := merges.get(ranks.get(parts[i]), ranks.get(parts[i+1]))
				require.Equal(t, r, got, "piece %q: parts %q and %q", piece, parts[i], parts[i+1])
			}
			if r < bestRank {
				best, bestRank = i, r
			}
		}
		if best < 0 {
			return
		}
		parts[best] += parts[best+1]
		parts = append(parts[:best+1], parts[best+2:]...)
	}
}

func TestPairTableMeetsEveryMerge(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	from := func(alphabet []string, n int) string {
		var b strings.Builder
		for b.Len() < n {
			b.WriteString(alphabet[rng.Intn(len(alphabet))])
		}
		return b.String()
	}
	texts := []string{
		readTestdata(t, "opticks.txt")[:2000],
		readTestdata(t, "multilingual.txt"),
		readTestdata(t, "code.txt"),
	}
	for _, encoding := range Encodings {
		e, err := loadEncoding(encoding)
		require.NoError(t, err)
		t.Run(encoding, func(t *testing.T) {
			for _, text := range texts { // its words, and runs of them without spaces
				checkPairTable(t, e.ranks, strings.ReplaceAll(text[:300], " ", ""))
				for _, w := range strings.Fields(text) {
					checkPairTable(t, e.ranks, " "+w)
				}
			}
			for range 50 {
				checkPairTable(t, e.ranks, randomLetters(60, rng.Int63()))
				checkPairTable(t, e.ranks, from([]string{"a", "b", "c", "ab", "abc", "aaaa"}, 60))
				checkPairTable(t, e.ranks, from([]string{" ", "-", "=", "*", ".", "\n", "😀", "é"}, 60))
			}
		})
	}
}

// TestPairTableRandomVocabularies: the same with vocabularies whose ranks,
// unlike those of a trained BPE, often rank a token below its own parts,
// or make it unreachable by merging its bytes.
func TestPairTableRandomVocabularies(t *testing.T) {
	rng := rand.New(rand.NewSource(12))
	word := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = "abcd"[rng.Intn(4)]
		}
		return string(b)
	}
	for range 200 {
		tokens := make([]string, 256, 256+60)
		for b := range tokens {
			tokens[b] = string([]byte{byte(b)})
		}
		seen := map[string]bool{}
		for len(tokens) < cap(tokens) {
			if w := word(2 + rng.Intn(4)); !seen[w] {
				seen[w] = true
				tokens = append(tokens, w)
			}
		}
		rng.Shuffle(len(tokens)-256, func(i, j int) { tokens[256+i], tokens[256+j] = tokens[256+j], tokens[256+i] })
		ranks := newRankTable(tokens)
		for range 10 {
			checkPairTable(t, ranks, word(2+rng.Intn(40)))
		}
	}
}

// TestPairTableHoldsOneMergePerToken: the last merge of every token of 3
// bytes or more, in both encodings (each reaches itself by merging its
// bytes), and no other pair.
func TestPairTableHoldsOneMergePerToken(t *testing.T) {
	for _, encoding := range Encodings {
		e, err := loadEncoding(encoding)
		require.NoError(t, err)
		merges, want := e.ranks.merges, 0
		for id := range len(e.ranks.offs) - 1 {
			if len(e.ranks.token(id)) > 2 {
				want++
			}
		}
		got := 0
		for _, v := range merges.slots {
			if v != 0 {
				got++
			}
		}
		require.Equal(t, want, got, encoding)
	}
}

func TestParseRank(t *testing.T) {
	cases := []struct {
		in   string
		want int
		ok   bool
	}{
		{"0", 0, true},
		{"100256", 100256, true},
		{"", 0, false},
		{"-1", 0, false},
		{"12a", 0, false},
		{"1048574", 1048574, true},
		{"1048575", 0, false}, // noToken
		{"99999999999999999999999", 0, false},
	}
	for _, tc := range cases {
		got, ok := parseRank([]byte(tc.in))
		require.Equal(t, tc.ok, ok, "%q", tc.in)
		require.Equal(t, tc.want, got, "%q", tc.in)
	}
}
