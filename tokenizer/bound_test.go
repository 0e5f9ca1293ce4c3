package tokenizer

import (
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// Inputs that defeat BPE implementations: long runs without a pre-token
// boundary, and texts that exercise every backtracking path of the split
// patterns. Each is n bytes, or a little less, and deterministic.
var pathological = []struct {
	name string
	gen  func(n int) string
}{
	{"single word of a", func(n int) string { return strings.Repeat("a", n) }},
	{"8000-byte words of a", func(n int) string { return splitWords(strings.Repeat("a", n), 8000) }},
	{"random letters", func(n int) string { return randomLetters(n, 1) }},
	{"8000-byte words of random letters", func(n int) string { return splitWords(randomLetters(n, 2), 8000) }},
	{"random unicode", func(n int) string { return randomUnicode(n, 1) }},
	{"abc", func(n int) string { return strings.Repeat("abc", n/3) }},
	{"emoji", func(n int) string { return strings.Repeat("😀", n/4) }},
	{"spaces", func(n int) string { return strings.Repeat(" ", n) }},
	{"space newline", func(n int) string { return strings.Repeat(" \n", n/2) }},
	{"nbsp", func(n int) string { return strings.Repeat("\u00a0", n/2) }},
	{"digits", func(n int) string { return strings.Repeat("1234567890", n/10) }},
	{"dashes", func(n int) string { return strings.Repeat("-", n) }},
	{"combining marks", func(n int) string { return strings.Repeat("\u0301", n/2) }},
	{"upper case", func(n int) string { return strings.Repeat("A", n) }},
	{"lo then upper case", func(n int) string { return strings.Repeat("ª"+strings.Repeat("A", 997)+"!", n/1000) }},
	{"contractions", func(n int) string { return strings.Repeat("'s", n/2) }},
}

// splitWords cuts s into words of n bytes separated by spaces.
func splitWords(s string, n int) string {
	var b strings.Builder
	for len(s) > n {
		b.WriteString(s[:n-1])
		b.WriteByte(' ')
		s = s[n:]
	}
	b.WriteString(s)
	return b.String()
}

func randomLetters(n int, seed int64) string {
	rng := rand.New(rand.NewSource(seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + rng.Intn(26))
	}
	return string(b)
}

// randomUnicode returns about n bytes of runes drawn uniformly from all
// of Unicode (mostly 4-byte, unassigned or private-use runes).
func randomUnicode(n int, seed int64) string {
	rng := rand.New(rand.NewSource(seed))
	var b strings.Builder
	b.Grow(n)
	for b.Len() < n-utf8.UTFMax {
		if r := rune(rng.Intn(utf8.MaxRune + 1)); utf8.ValidRune(r) {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// maxCostPerByte bounds the work Encode does per input byte: runes the
// pre-tokenizer examines plus rank look-ups and tournament steps. The
// worst input found, random letters, needs 7.2 with cl100k_base and 7.5
// with o200k_base (a merge looks up both neighbouring pairs and walks the
// merged pair's leaf to the root of an 8 KiB chunk's tree, 7 steps, and
// one or two steps more from the other rewritten leaves).
const maxCostPerByte = 8

// TestEncodeCostIsLinear is the regression test of issue 12: one long
// "word" made tokenization quadratic (64 KiB of "a" took 1.6 s, 2 MiB pinned
// a core for minutes). It counts work, not time, from 4 KiB to 2 MiB: the
// cost per byte stays under maxCostPerByte and does not grow with the size.
func TestEncodeCostIsLinear(t *testing.T) {
	sizes := []int{4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 2 << 20}
	if testing.Short() || raceEnabled {
		sizes = sizes[:4]
	}
	for _, encoding := range Encodings {
		e, err := loadEncoding(encoding)
		require.NoError(t, err)
		for _, p := range pathological {
			t.Run(encoding+"/"+p.name, func(t *testing.T) {
				var first float64
				for _, n := range sizes {
					text := p.gen(n)
					ids, cost := e.encodeCost(text, maxPieceBytes)
					perByte := float64(cost) / float64(len(text))
					require.LessOrEqual(t, perByte, float64(maxCostPerByte), "%d bytes", n)
					if first == 0 {
						first = perByte
						require.Equal(t, text, e.decode(ids))
					}
					require.LessOrEqual(t, perByte, 1.25*first+0.1, "%d bytes: cost per byte grows with the size", n)
				}
			})
		}
	}
}

// TestLongPieceCountIsClose: a piece longer than maxPieceBytes is merged
// in chunks (see appendPiece). Its tokens still decode to the piece and
// their count is within one per cut of exact BPE over the whole piece.
func TestLongPieceCountIsClose(t *testing.T) {
	n := 1 << 20
	if testing.Short() || raceEnabled {
		n = 64 << 10
	}
	long := []string{"single word of a", "random letters", "abc", "emoji", "spaces", "dashes", "upper case"}
	for _, encoding := range Encodings {
		e, err := loadEncoding(encoding)
		require.NoError(t, err)
		for _, p := range pathological {
			if !slices.Contains(long, p.name) {
				continue
			}
			t.Run(encoding+"/"+p.name, func(t *testing.T) {
				text := p.gen(n)
				chunked, _ := e.encodeCost(text, maxPieceBytes)
				exact, _ := e.encodeCost(text, len(text))
				require.Equal(t, text, e.decode(chunked))
				cuts := len(text) / maxPieceBytes
				diff := len(chunked) - len(exact)
				require.LessOrEqual(t, max(diff, -diff), cuts, "chunked %d tokens, exact %d", len(chunked), len(exact))
				t.Logf("%d bytes: exact %d tokens, chunked %+d", len(text), len(exact), diff)
			})
		}
	}
}

// TestLongPieceSharedPrefix: the tokens of a chunk depend only on its
// bytes, so two texts that share a long piece's first chunks share their
// tokens, and their block hashes, as they would with exact BPE.
func TestLongPieceSharedPrefix(t *testing.T) {
	tok := newTestTokenizer(t, Config{Encoding: "cl100k_base"})
	long := randomLetters(3*maxPieceBytes+100, 4)
	prefix := tok.Encode(long[:2*maxPieceBytes])
	for i, text := range []string{long, long[:2*maxPieceBytes] + "qqqqqqqq", long[:2*maxPieceBytes+5] + " and more words"} {
		require.Equal(t, prefix, tok.Encode(text)[:len(prefix)], fmt.Sprintf("text %d", i))
	}
}
