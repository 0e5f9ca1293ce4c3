package hf

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/tokenizer/pretok"
)

func TestValidUTF8ReplacesMaximalSubparts(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"valid", "héllo", "héllo"},
		{"lone continuation", "a\x80b", "a\uFFFDb"},
		{"truncated 3-byte", "x\xe2\x82y", "x\uFFFDy"},
		{"truncated 4-byte", "\xf0\x9f\x98", "\uFFFD"},
		{"surrogate", "\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"},
		{"overlong", "\xc0\xaf", "\uFFFD\uFFFD"},
		{"above U+10FFFF", "\xf4\x90\x80\x80", "\uFFFD\uFFFD\uFFFD\uFFFD"},
		{"truncated then valid", "\xe2\x82\xe2\x82\xac", "\uFFFD€"},
		{"FE FF", "\xfe\xff", "\uFFFD\uFFFD"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { require.Equal(t, tt.want, validUTF8(tt.in)) })
	}
}

// TestMergeLargeMatchesSmall merges random words with both algorithms.
func TestMergeLargeMatchesSmall(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	alphabets := []string{"ab", "abc ", "etaoin shrdlu", "▁a▁b", "中文字", "😀!"}
	for _, model := range []string{"llama3_1", "gemma3"} {
		tok := loadModel(t, model)
		for range 300 {
			alpha := []rune(alphabets[rng.IntN(len(alphabets))])
			var b strings.Builder
			for range 1 + rng.IntN(150) {
				b.WriteRune(alpha[rng.IntN(len(alpha))])
			}
			word := b.String()
			var s1, s2 mergeScratch
			tok.model.initial(word, &s1)
			tok.model.initial(word, &s2)
			small := slices.Clone(tok.model.mergeSmall(&s1))
			large := tok.model.mergeLarge(&s2)
			require.Equal(t, small, large, "%s: %q", model, word)
		}
	}
}

func TestTranslatePattern(t *testing.T) {
	ok := []string{`\p{N}{1,2}`, `[a-z]+|\s+(?!\S)|\s+`, `(abc)+\d`, `[^\s\p{L}]+`, `\u00e9+`, `a|b`}
	for _, p := range ok {
		_, err := regexFind(p)
		require.NoError(t, err, p)
	}
	bad := map[string]string{
		`(?<=a)b`: "group", `(?i)abc`: "group", `\w+`: `escape \w`, `a\b`: `escape \b`, `^a`: "anchor",
		`a*+`: "possessive", `[a[b]]`: "nested", `a*`: "empty string", `\s+(?!\S)`: "group", `(a)\1`: `escape \1`,
	}
	for p, want := range bad {
		_, err := regexFind(p)
		require.ErrorContains(t, err, want, p)
	}
}

// TestRegexMatchesScanner runs the GPT-2 pattern through Go's regexp and
// through its scanner on the corpus.
func TestRegexMatchesScanner(t *testing.T) {
	re, err := regexFind(pretok.GPT2)
	require.NoError(t, err)
	hand := knownFind(pretok.GPT2)
	for _, text := range readCorpus(t)[:500] {
		text = validUTF8(text)
		for i := 0; i < len(text); {
			s1, e1 := hand(text, i)
			s2, e2 := re(text, i)
			require.Equal(t, [2]int{s1, e1}, [2]int{s2, e2}, "%q at %d", text, i)
			i = e1
		}
	}
}

func TestLoadRejectsWhatItDoesNotImplement(t *testing.T) {
	base := func() map[string]any {
		return map[string]any{"version": "1.0", "truncation": nil, "padding": nil, "added_tokens": []any{},
			"normalizer": nil, "pre_tokenizer": nil, "post_processor": nil, "decoder": nil,
			"model": map[string]any{"type": "BPE", "vocab": map[string]int{"a": 0, "b": 1, "ab": 2}, "merges": []string{"a b"}}}
	}
	tests := []struct {
		name string
		edit func(map[string]any)
		want string
	}{
		{"wordpiece", func(d map[string]any) { d["model"].(map[string]any)["type"] = "WordPiece" }, "model.type: model WordPiece"},
		{"dropout", func(d map[string]any) { d["model"].(map[string]any)["dropout"] = 0.1 }, "model.dropout: dropout"},
		{"prefix", func(d map[string]any) { d["model"].(map[string]any)["continuing_subword_prefix"] = "##" }, "continuing_subword_prefix"},
		{"normalizer", func(d map[string]any) { d["normalizer"] = map[string]any{"type": "BertNormalizer"} }, "normalizer.type: normalizer BertNormalizer"},
		{"pre-tokenizer", func(d map[string]any) {
			d["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{map[string]any{"type": "Whitespace"}}}
		}, "pre_tokenizer.pretokenizers[0].type: pre-tokenizer Whitespace"},
		{"regex", func(d map[string]any) {
			d["pre_tokenizer"] = map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `(?<=x)y`}, "behavior": "Isolated", "invert": false}
		}, "pre_tokenizer.pattern.Regex"},
		{"truncation", func(d map[string]any) { d["truncation"] = map[string]any{"max_length": 5} }, "$.truncation"},
		{"unknown field", func(d map[string]any) { d["model"].(map[string]any)["extra"] = 1 }, "model: unknown field(s) extra"},
		{"merge not in vocab", func(d map[string]any) { d["model"].(map[string]any)["merges"] = []string{"a c"} }, "model.merges[0]"},
		{"decoder", func(d map[string]any) { d["decoder"] = map[string]any{"type": "WordPiece"} }, "decoder.type: decoder WordPiece"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := base()
			tt.edit(d)
			path := filepath.Join(t.TempDir(), "tokenizer.json")
			require.NoError(t, os.WriteFile(path, mustJSON(t, d), 0o644))
			_, err := Load(path)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// TestEncodeConcurrently encodes from many goroutines at once (run with
// -race): the word cache is shared.
func TestEncodeConcurrently(t *testing.T) {
	tok := loadModel(t, "qwen3")
	texts := readCorpus(t)[:200]
	want := make([][]int, len(texts))
	for i, s := range texts {
		want[i] = tok.Encode(s)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range texts {
				k := (i + g*50) % len(texts)
				if got := tok.Encode(texts[k]); !slices.Equal(got, want[k]) {
					t.Errorf("goroutine %d: %q differs", g, texts[k])
				}
			}
		})
	}
	wg.Wait()
}

// TestLongWords merges words far longer than real text has, through
// mergeLarge, and checks they decode back.
func TestLongWords(t *testing.T) {
	for _, model := range []string{"gemma3", "llama3_1"} {
		tok := loadModel(t, model)
		for _, s := range []string{strings.Repeat("a", 100_000), strings.Repeat("ab", 30_000), strings.Repeat("😀", 20_000)} {
			ids := tok.Encode(s)
			require.Equal(t, s, tok.Decode(ids), model)
		}
	}
}

func TestDescribe(t *testing.T) {
	want := map[string]string{
		"llama3_1": "byte-level BPE, 128256 tokens", "qwen3": "byte-level BPE, 151669 tokens",
		"deepseek_v3": "byte-level BPE, 128815 tokens", "gemma3": "BPE with byte fallback, 262145 tokens",
	}
	for _, model := range models {
		tok := loadModel(t, model)
		require.Equal(t, want[model], tok.Describe())
	}
	llama := loadModel(t, "llama3_1")
	pre, suf := llama.SpecialTokens()
	require.Equal(t, []int{128000}, pre)
	require.Empty(t, suf)
	id, ok := llama.TokenID("<|eot_id|>")
	require.True(t, ok)
	require.Equal(t, 128009, id)
	id, ok = llama.TokenID("Ġthe")
	require.True(t, ok)
	require.Equal(t, fmt.Sprint(279), fmt.Sprint(id))
}
