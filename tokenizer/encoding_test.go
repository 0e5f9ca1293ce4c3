package tokenizer

import (
	"math/rand"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMergeLargeMatchesMergeSmall checks the tournament merge against
// tiktoken's original algorithm on pieces that exercise ties (repeats),
// sweeps of equal ranks interrupted by lower ones, and random bytes.
func TestMergeLargeMatchesMergeSmall(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	from := func(alphabet []string, n int) string {
		var b strings.Builder
		for b.Len() < n {
			b.WriteString(alphabet[rng.Intn(len(alphabet))])
		}
		return b.String()
	}
	gens := map[string]func(n int) string{
		"one letter":     func(n int) string { return strings.Repeat("a", n) },
		"two letters":    func(n int) string { return from([]string{"a", "b"}, n) },
		"runs":           func(n int) string { return from([]string{"aaaa", "aaaaaaa", "b", "ab", "e"}, n) },
		"letters":        func(n int) string { return from(strings.Split("abcdefghijklmnopqrstuvwxyz", ""), n) },
		"words":          func(n int) string { return from([]string{"the", "ing", "tion", "er", "s", "q", "x"}, n) },
		"spaces":         func(n int) string { return from([]string{" ", "  ", "\n", "\t"}, n) },
		"multibyte":      func(n int) string { return from([]string{"é", "中", "😀", "ʰ", "\u0301"}, n) },
		"random bytes":   func(n int) string { return from([]string{"\x00", "\x7f", "\x80", "\xc3", "\xff", "a"}, n) },
		"punctuation":    func(n int) string { return from([]string{"-", "=", "*", ".", "!", "?"}, n) },
		"one repetition": func(n int) string { return strings.Repeat("ab", n/4) + "c" + strings.Repeat("ab", n/4) },
	}
	for _, encoding := range Encodings {
		e, err := loadEncoding(encoding)
		require.NoError(t, err)
		for name, gen := range gens {
			t.Run(encoding+"/"+name, func(t *testing.T) {
				m := getMerger(e, maxPieceBytes, maxPieceBytes)
				defer putMerger(m)
				for _, n := range []int{2, 3, 5, 17, 99, 100, 101, 255, 256, 257, 1000, 1024} {
					for range 4 {
						piece := gen(n)
						require.Equal(t, m.mergeSmall(nil, piece), m.mergeLarge(nil, piece), "piece %q", piece)
					}
				}
			})
		}
	}
}

// TestMergeLargeMatchesMergeSmallRandomVocabularies does the same with
// random vocabularies over four letters, whose ranks, unlike those of a
// trained BPE, often rank a token below its own parts: then a merge can
// make a pair that ranks below the merge itself, which a sweep must not
// skip.
func TestMergeLargeMatchesMergeSmallRandomVocabularies(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	word := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = "abcd"[rng.Intn(4)]
		}
		return string(b)
	}
	for v := range 200 {
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
		m := &merger{enc: &encoding{ranks: newRankTable(tokens)}, maxPiece: maxPieceBytes}
		for range 10 {
			piece := word(2 + rng.Intn(300))
			require.Equal(t, m.mergeSmall(nil, piece), m.mergeLarge(nil, piece), "vocabulary %d %q, piece %q", v, tokens[256:], piece)
		}
	}
}

func TestDecode(t *testing.T) {
	cases := []struct {
		name, encoding string
		ids            []int
		want           string
	}{
		{"cl100k special", "cl100k_base", []int{15339, 100257, 1917, 100276}, "hello<|endoftext|> world<|endofprompt|>"},
		{"o200k special", "o200k_base", []int{24912, 199999}, "hello<|endoftext|>"},
		{"unknown ids decode to nothing", "cl100k_base", []int{-1, 15339, 100256, 100261, 1 << 30}, "hello"},
		{"a rune split over two tokens", "cl100k_base", []int{76460, 222}, "😀"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tok := newTestTokenizer(t, Config{Encoding: tc.encoding})
			require.Equal(t, tc.want, tok.Decode(tc.ids))
		})
	}
}

// TestEncodeDecodeRoundTrip: tokens decode to the text, with each invalid
// UTF-8 byte replaced by U+FFFD as []rune does.
func TestEncodeDecodeRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewSource(9))
	for _, encoding := range Encodings {
		tok := newTestTokenizer(t, Config{Encoding: encoding})
		for i := range 200 {
			text := randomText(rng, 1+rng.Intn(300))
			require.Equal(t, string([]rune(text)), tok.Decode(tok.Encode(text)), "text %d: %q", i, text)
		}
	}
}
