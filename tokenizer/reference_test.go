package tokenizer

import (
	"math/rand"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
	"unsafe"

	tiktoken "github.com/pkoukk/tiktoken-go"
	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"
	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/tokenizer/pretok"
)

// The reference is tiktoken-go v0.1.8, which duet encoded with before:
// the regexp2 split patterns and O(n·m) merging. Encode must return its
// ids for every text whose pieces are at most maxPieceBytes long.

var (
	referenceMu sync.Mutex
	references  = map[string]*tiktoken.Tiktoken{}
)

func reference(t testing.TB, encoding string) *tiktoken.Tiktoken {
	t.Helper()
	referenceMu.Lock()
	defer referenceMu.Unlock()
	if enc, ok := references[encoding]; ok {
		return enc
	}
	tiktoken.SetBpeLoader(tiktokenloader.NewOfflineLoader())
	enc, err := tiktoken.GetEncoding(encoding)
	require.NoError(t, err)
	references[encoding] = enc
	return enc
}

// referencePieces returns the pieces tiktoken-go's split regex finds in
// text. tiktoken-go keeps the compiled regexp2 pattern in an unexported
// field, and duet does not depend on regexp2 directly, so the pattern is
// reached and run by reflection.
func referencePieces(t testing.TB, encoding, text string) []string {
	t.Helper()
	field := func(v reflect.Value, name string) reflect.Value {
		f := v.Elem().FieldByName(name)
		require.True(t, f.IsValid(), "tiktoken-go has no field %s", name)
		return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
	}
	re := field(field(reflect.ValueOf(reference(t, encoding)), "bpe"), "tlRegex")
	runes := []rune(text)
	var pieces []string
	res := re.MethodByName("FindStringMatch").Call([]reflect.Value{reflect.ValueOf(text)})
	for m := res[0]; !m.IsNil(); m = res[0] {
		require.True(t, res[1].IsNil(), "regexp2: %v", res[1])
		i, n := int(m.Elem().FieldByName("Index").Int()), int(m.Elem().FieldByName("Length").Int())
		pieces = append(pieces, string(runes[i:i+n]))
		res = re.MethodByName("FindNextMatch").Call([]reflect.Value{m})
	}
	return pieces
}

// pieces returns the pieces the pre-tokenizer finds in text.
func pieces(t testing.TB, encoding, text string) []string {
	t.Helper()
	text = string([]rune(text))
	sc := pretok.NewScanner(text)
	next := encodingSpecs[encoding].next
	var out []string
	for i := 0; i < len(text); {
		j := next(sc, i)
		require.Greater(t, j, i)
		out = append(out, text[i:j])
		i = j
	}
	return out
}

// tricky are the runes and strings that decide between the alternatives
// of the split patterns: every class they test (L split into Lu Lt Lm Lo
// Ll, M, N, \s), the contractions in both cases, runes that lowercase to
// ASCII (Kelvin sign, dotted I), \r \n and /, and invalid UTF-8.
var tricky = []string{
	"a", "z", "A", "Q", "é", "É", "ß", "ǅ", "Ǆ", "ʰ", "ª", "中", "ア", "ह", "ि", "ſ", "K", "İ", "Ω",
	"\u0301", "\u0903", "\u20dd", "0", "7", "²", "½", "Ⅻ", "١", "𝟙",
	" ", " ", "  ", "\t", "\n", "\r", "\r\n", "\v", "\f", "\u00a0", "\u0085", "\u2028", "\u3000", "\u2002",
	"'", "'s", "'S", "'t", "'re", "'RE", "'rE", "'ve", "'Ve", "'ll", "'LL", "'lL", "'m", "'M", "'d", "'D", "'x", "’",
	".", ",", "!", "?", "-", "--", "/", "//", "\"", "(", ")", "<|", "|>", "_", "#", "*",
	"😀", "👍🏽", "🇫🇷", "\ufffd", "\x00", "\x7f", "\xff", "\xc3", "\xe2\x82",
	"hello", " world", "The", " don't", "HTTP", "x86_64", "12345", "3.14", "AbC", "aBC",
}

// randomText concatenates n random tricky strings, with now and then a
// random rune from anywhere in Unicode.
func randomText(rng *rand.Rand, n int) string {
	var b strings.Builder
	for range n {
		if rng.Intn(20) == 0 {
			if r := rune(rng.Intn(utf8.MaxRune + 1)); utf8.ValidRune(r) {
				b.WriteRune(r)
			}
			continue
		}
		b.WriteString(tricky[rng.Intn(len(tricky))])
	}
	return b.String()
}

// TestPiecesMatchTiktokenGo compares the pre-tokenizer with the regex it
// replaces, piece by piece: a boundary in a different place does not
// always change the ids.
func TestPiecesMatchTiktokenGo(t *testing.T) {
	n := 2000
	if testing.Short() || raceEnabled {
		n = 300
	}
	for _, encoding := range Encodings {
		t.Run(encoding, func(t *testing.T) {
			rng := rand.New(rand.NewSource(7))
			for i := range n {
				text := randomText(rng, 1+rng.Intn(100))
				require.Equal(t, referencePieces(t, encoding, text), pieces(t, encoding, text), "text %d: %q", i, text)
			}
			for name, text := range fixtureTexts(t) {
				require.Equal(t, referencePieces(t, encoding, text), pieces(t, encoding, text), name)
			}
		})
	}
}

func TestEncodeMatchesTiktokenGo(t *testing.T) {
	n := 1000
	if testing.Short() || raceEnabled {
		n = 150
	}
	for _, encoding := range Encodings {
		t.Run(encoding, func(t *testing.T) {
			tok := newTestTokenizer(t, Config{Encoding: encoding})
			ref := reference(t, encoding)
			rng := rand.New(rand.NewSource(12))
			for i := range n {
				text := randomText(rng, 1+rng.Intn(200))
				require.Equal(t, ref.EncodeOrdinary(text), tok.Encode(text), "text %d: %q", i, text)
			}
		})
	}
}

// TestEncodeLongPiecesMatchTiktokenGo checks the merging of pieces too
// long for tiktoken's small algorithm against tiktoken-go, up to
// maxPieceBytes.
func TestEncodeLongPiecesMatchTiktokenGo(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	letters := func(alphabet string, n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[rng.Intn(len(alphabet))]
		}
		return string(b)
	}
	texts := map[string]string{
		"a":               strings.Repeat("a", 3000),
		"ab":              strings.Repeat("ab", 700),
		"abc then d":      strings.Repeat("abc", 300) + "d",
		"random letters":  letters("abcdefghijklmnopqrstuvwxyz", 2500),
		"random ACGT":     letters("ACGT", 2000),
		"random case":     letters("aAbBeEsStT", 1500),
		"dashes":          strings.Repeat("-", 1000) + "\n",
		"spaces":          strings.Repeat(" ", 5000),
		"emoji":           strings.Repeat("😀👍🏽", 200),
		"cjk":             strings.Repeat("我能吞下玻璃而不伤身体", 100),
		"max piece":       letters("xyz", maxPieceBytes),
		"almost max word": " " + strings.Repeat("e", maxPieceBytes-1),
	}
	for _, encoding := range Encodings {
		tok := newTestTokenizer(t, Config{Encoding: encoding})
		ref := reference(t, encoding)
		for name, text := range texts {
			t.Run(encoding+"/"+name, func(t *testing.T) {
				require.Equal(t, ref.EncodeOrdinary(text), tok.Encode(text))
			})
		}
	}
}

// FuzzEncodeMatchesTiktokenGo compares the pieces with tiktoken-go's
// regex on any text, and the ids with tiktoken-go's when no piece is long
// enough for its quadratic merge to stall the fuzzer (450 bytes of U+FFFD
// took it 0.35 s).
func FuzzEncodeMatchesTiktokenGo(f *testing.F) {
	for _, s := range tricky {
		f.Add(s)
	}
	f.Add("I'm sure they're here; we've checked. I'D SAY IT'S DONE")
	f.Add("ªAAAAb ǅa ʰʰAB \u0301Ab AB'S abc'LL")
	f.Add("  \n\n   x\t\t\r\n  ")
	refs := map[string]*tiktoken.Tiktoken{}
	toks := map[string]*Tokenizer{}
	for _, encoding := range Encodings {
		refs[encoding] = reference(f, encoding)
		toks[encoding] = newTestTokenizer(f, Config{Encoding: encoding})
	}
	f.Fuzz(func(t *testing.T, text string) {
		if len(text) > 4096 {
			t.Skip()
		}
		for _, encoding := range Encodings {
			ps := pieces(t, encoding, text)
			require.Equal(t, referencePieces(t, encoding, text), ps, encoding)
			if slices.ContainsFunc(ps, func(p string) bool { return len(p) > 128 }) {
				continue
			}
			require.Equal(t, refs[encoding].EncodeOrdinary(text), toks[encoding].Encode(text), encoding)
		}
	})
}
