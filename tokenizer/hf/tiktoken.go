package hf

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"os"
	"sort"
	"strconv"

	"github.com/duet-serve/duet/tokenizer/pretok"
)

// A tiktoken file (Llama 3's original tokenizer.model) lists each token as
// "base64-bytes rank"; the rank is the token id and the merge priority:
// tiktoken merges the adjacent pair whose concatenation has the lowest
// rank, which is BPE with a merge (a, b) of rank rank(ab) for every token
// ab and every split of it into two tokens a and b, as the conversion to
// tokenizer.json does. loadTiktoken builds that byte-level BPE (with
// ignore_merges, as Llama 3's tokenizer.json has), Llama 3's split pattern
// (pretok.Llama3), and the special tokens of the adjacent
// tokenizer_config.json's added_tokens_decoder, or without one the 256 of
// Meta's Llama 3.1 tokenizer.py from id len(ranks); EncodeWithSpecial puts
// <|begin_of_text|> first.

// llama3Specials returns the special tokens Meta's Llama 3.1 tokenizer.py
// defines, in id order.
func llama3Specials() []string {
	out := []string{"<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
		"<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|step_id|>", "<|start_header_id|>",
		"<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"}
	for i := 2; len(out) < 256; i++ {
		out = append(out, fmt.Sprintf("<|reserved_special_token_%d|>", i))
	}
	return out
}

func loadTiktoken(data []byte, configPath string) (*Tokenizer, error) {
	var raw []string // rank -> bytes
	for n, line := range bytes.Split(data, []byte{'\n'}) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		b64, num, ok := bytes.Cut(line, []byte{' '})
		rank, err := strconv.Atoi(string(num))
		tok, err2 := base64.StdEncoding.DecodeString(string(b64))
		if !ok || err != nil || err2 != nil || rank < 0 || rank >= 1<<31 || len(tok) == 0 {
			return nil, fmt.Errorf("line %d: not \"base64-token rank\"", n+1)
		}
		for len(raw) <= rank {
			raw = append(raw, "")
		}
		if raw[rank] != "" {
			return nil, fmt.Errorf("line %d: rank %d is given twice", n+1, rank)
		}
		raw[rank] = string(tok)
	}
	m := &bpe{unk: -1, byteLevel: true, ignoreMerges: true, tokens: make([]string, len(raw))}
	m.vocab = newVocabTable(maphash.MakeSeed(), raw)
	nMerges := 0
	for _, tok := range raw {
		nMerges += max(len(tok)-1, 0)
	}
	m.merges = newMergeTable(nMerges)
	for id, tok := range raw {
		if tok == "" {
			continue
		}
		m.tokens[id] = toByteLevel(tok)
		for k := 1; k < len(tok); k++ {
			a, b := m.vocab.get(tok[:k]), m.vocab.get(tok[k:])
			if a >= 0 && b >= 0 {
				m.merges.put(a, b, uint32(id), uint32(id))
			}
		}
	}
	for b := range 256 {
		m.byteToken[b] = -1
		m.byteChar[b] = string(byteToRune[b])
		if m.charID[b] = m.vocab.get(string([]byte{byte(b)})); m.charID[b] < 0 {
			return nil, fmt.Errorf("byte %#x is not a token", b)
		}
	}
	specials, err := tiktokenSpecials(configPath, len(raw))
	if err != nil {
		return nil, err
	}
	t := &Tokenizer{
		steps:   []step{&splitStep{find: knownFind(pretok.Llama3), behavior: isolated}},
		model:   m,
		decoder: byteLevelDecoder,
		added:   &addedVocab{raw: newTrie(), norm: newTrie(), byID: map[int32]*addedToken{}, byContent: map[string]int32{}},
		kind:    "byte-level BPE (tiktoken)",
	}
	for _, tok := range specials {
		t.added.byID[tok.id], t.added.byContent[tok.content] = tok, tok.id
		if tok.normalized {
			t.added.norm.add(tok.content, tok.id)
		} else {
			t.added.raw.add(tok.content, tok.id)
		}
		if tok.content == "<|begin_of_text|>" {
			t.prefix = []int{int(tok.id)}
		}
	}
	t.vocabSize = len(raw) + len(t.added.byContent)
	return t, nil
}

// tiktokenSpecials reads added_tokens_decoder from the tokenizer_config.json
// at path, or returns Llama 3's special tokens from id first if there is
// no such file.
func tiktokenSpecials(path string, first int) ([]*addedToken, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		var out []*addedToken
		for i, s := range llama3Specials() {
			out = append(out, &addedToken{content: s, id: int32(first + i), special: true})
		}
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	var cfg struct {
		Decoder map[string]struct {
			Content    string `json:"content"`
			Lstrip     bool   `json:"lstrip"`
			Rstrip     bool   `json:"rstrip"`
			Normalized bool   `json:"normalized"`
			SingleWord bool   `json:"single_word"`
			Special    bool   `json:"special"`
		} `json:"added_tokens_decoder"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []*addedToken
	for k, v := range cfg.Decoder {
		id, err := strconv.Atoi(k)
		if err != nil || id < 0 {
			return nil, fmt.Errorf("%s: added_tokens_decoder.%s: not an id", path, k)
		}
		out = append(out, &addedToken{content: v.Content, id: int32(id), lstrip: v.Lstrip, rstrip: v.Rstrip,
			normalized: v.Normalized, singleWord: v.SingleWord, special: v.Special})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out, nil
}
