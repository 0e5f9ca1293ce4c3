package hf

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// The four real files use one normalizer and four patterns with
// scanners. TestVariantsMatchReference covers the rest of what Load
// accepts (Metaspace, Prepend, Replace, Strip, Lowercase, NFKC, Digits,
// Split behaviours and invert, patterns through Go's regexp, added tokens
// with lstrip, rstrip, single_word and normalized, unk with fuse_unk,
// byte fallback, Bert and Roberta post-processors) on small tokenizers
// built here, against the Rust tokenizers.

// tinyVocab returns a SentencePiece-style vocabulary: <unk>, the 256 byte
// tokens, ▁ and ASCII letters and digits, and merges building a few words.
func tinyVocab() (map[string]int, [][2]string) {
	vocab := map[string]int{"<unk>": 0}
	add := func(s string) {
		if _, ok := vocab[s]; !ok {
			vocab[s] = len(vocab)
		}
	}
	for b := range 256 {
		add(fmt.Sprintf("<0x%02X>", b))
	}
	for _, r := range "▁abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?'" {
		add(string(r))
	}
	var merges [][2]string
	for _, w := range []string{"▁the", "▁hello", "▁world", "ing", "▁is", "▁a", "▁test", "the", "ll", "▁▁", "▁▁▁▁", "12", "123"} {
		rs := []rune(w)
		cur := string(rs[0])
		for _, r := range rs[1:] {
			merges = append(merges, [2]string{cur, string(r)})
			cur += string(r)
			add(cur)
		}
	}
	return vocab, merges
}

func tinyTokenizer(t *testing.T, model map[string]any, extra map[string]any) string {
	vocab, merges := tinyVocab()
	m := map[string]any{"type": "BPE", "vocab": vocab, "merges": merges, "unk_token": "<unk>"}
	for k, v := range model {
		m[k] = v
	}
	next := len(vocab)
	added := func(content string, special, normalized, lstrip, rstrip, single bool) map[string]any {
		next++
		return map[string]any{"id": next - 1, "content": content, "special": special, "normalized": normalized,
			"lstrip": lstrip, "rstrip": rstrip, "single_word": single}
	}
	doc := map[string]any{"version": "1.0", "model": m, "added_tokens": []any{
		added("<s>", true, false, true, false, false),
		added("[X]", true, false, false, true, false),
		added("word", false, true, false, false, true),
		added("Mid", false, true, false, false, false),
		added("\n\n", false, false, false, false, false),
	}}
	for _, k := range []string{"truncation", "padding", "normalizer", "pre_tokenizer", "post_processor", "decoder"} {
		doc[k] = nil
	}
	for k, v := range extra {
		doc[k] = v
	}
	dir := t.TempDir()
	data, err := json.Marshal(doc)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer.json"), data, 0o644))
	return dir
}

var variantTexts = []string{
	"hello world", " hello  world ", "the thing is a test", "Hello World THE", "word words sword word.",
	"a<s>b  <s>c [X]   d [X]e", "<s> [X] word Mid midMid", "x\n\ny\n\n\nz", "123 4567 1 12", "ünïcödé ☃ 😀 中文",
	"  leading", "trailing  ", "   ", "", "tab\there", "Ａｂｃ ﬁ ², İstanbul", "it's 'S 'll",
}

func TestVariantsMatchReference(t *testing.T) {
	requireReference(t)
	meta := func(scheme string, split bool) map[string]any {
		return map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme, "split": split}
	}
	variants := map[string]struct{ model, extra map[string]any }{
		"metaspace-first-split": {map[string]any{"byte_fallback": true}, map[string]any{
			"pre_tokenizer": meta("first", true),
			"decoder":       map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true}}},
		"metaspace-always-nosplit": {map[string]any{"byte_fallback": true, "fuse_unk": true}, map[string]any{
			"pre_tokenizer":  meta("always", false),
			"post_processor": map[string]any{"type": "BertProcessing", "sep": []any{"[X]", 5}, "cls": []any{"<s>", 4}}}},
		"llama2-normalizer": {map[string]any{"fuse_unk": true}, map[string]any{
			"normalizer": map[string]any{"type": "Sequence", "normalizers": []any{
				map[string]any{"type": "Prepend", "prepend": "▁"},
				map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"}}},
			"decoder": map[string]any{"type": "Sequence", "decoders": []any{
				map[string]any{"type": "Replace", "pattern": map[string]any{"String": "▁"}, "content": " "},
				map[string]any{"type": "ByteFallback"}, map[string]any{"type": "Fuse"},
				map[string]any{"type": "Strip", "content": " ", "start": 1, "stop": 0}}}}},
		"digits-strip-lower": {map[string]any{"byte_fallback": true}, map[string]any{
			"normalizer": map[string]any{"type": "Sequence", "normalizers": []any{
				map[string]any{"type": "NFKC"}, map[string]any{"type": "Strip", "strip_left": true, "strip_right": true},
				map[string]any{"type": "Lowercase"}}},
			"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
				map[string]any{"type": "Digits", "individual_digits": false}, meta("never", true)}}}},
		"regex-behaviours": {map[string]any{"byte_fallback": true}, map[string]any{
			"normalizer": map[string]any{"type": "Replace", "pattern": map[string]any{"Regex": `\s+`}, "content": " "},
			"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
				map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `\p{N}{1,2}`}, "behavior": "Removed", "invert": false},
				map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `[a-z]+|\s+(?!\S)|\s+`}, "behavior": "MergedWithNext", "invert": false},
				map[string]any{"type": "Split", "pattern": map[string]any{"String": "l"}, "behavior": "Contiguous", "invert": true},
				map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `[^\s\p{L}]+`}, "behavior": "MergedWithPrevious", "invert": false},
				map[string]any{"type": "Digits", "individual_digits": true}}},
			"post_processor": map[string]any{"type": "RobertaProcessing", "sep": []any{"[X]", 5}, "cls": []any{"<s>", 4},
				"trim_offsets": true, "add_prefix_space": false}}},
	}
	corpus := filepath.Join(t.TempDir(), "corpus.jsonl")
	require.NoError(t, os.WriteFile(corpus, encodeCorpus(append(slices.Clone(variantTexts), readCorpus(t)[:300]...)), 0o644))
	texts := readCorpusFile(t, corpus)
	for name, v := range variants {
		t.Run(name, func(t *testing.T) {
			dir := tinyTokenizer(t, v.model, v.extra)
			tok, err := Load(dir)
			require.NoError(t, err)
			refs := runReference(t, dir, corpus)
			require.Len(t, refs, len(texts))
			bad, jsDiff := 0, 0
			for i, text := range texts {
				got, gotS := tok.Encode(text), tok.EncodeWithSpecial(text)
				if !slices.Equal(got, refs[i].Rust) || !slices.Equal(gotS, refs[i].RustSpecial) {
					if bad++; bad <= 5 {
						t.Errorf("%q:\n got %v %v\nwant %v %v", clip(text), clipIDs(got), clipIDs(gotS), clipIDs(refs[i].Rust), clipIDs(refs[i].RustSpecial))
					}
				}
				if d := tok.Decode(refs[i].Rust); d != refs[i].Decoded {
					if bad++; bad <= 5 {
						t.Errorf("Decode of %q: got %q want %q", clip(text), clip(d), clip(refs[i].Decoded))
					}
				}
				if !slices.Equal(refs[i].JS, refs[i].Rust) {
					jsDiff++
					t.Logf("tokenizers.js differs from Rust on %q: js %v, rust %v %s", clip(text), clipIDs(refs[i].JS), clipIDs(refs[i].Rust), refs[i].JSError)
				}
			}
			t.Logf("%s: %d strings, %d mismatches; tokenizers.js differs from Rust on %d", name, len(texts), bad, jsDiff)
		})
	}
}
