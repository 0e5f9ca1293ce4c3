package hf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/valyala/fastjson"
)

// Load reads a tokenizer: path is a model directory holding tokenizer.json
// (or, without one, a tiktoken tokenizer.model), a tokenizer.json file, or
// a tiktoken file (lines "base64-token rank", see loadTiktoken). Anything
// in a tokenizer.json that duet does not implement exactly (another model
// than BPE, dropout, a subword prefix or suffix, a normalizer,
// pre-tokenizer, post-processor or decoder type not listed in doc.go, a
// split pattern that has no scanner and does not translate to Go's
// regexp, truncation or padding) is an error that names it and its JSON
// path.
func Load(path string) (*Tokenizer, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("hf: load %s: %w", path, err)
	}
	file := path
	if fi.IsDir() {
		file = filepath.Join(path, "tokenizer.json")
		if _, err := os.Stat(file); errors.Is(err, os.ErrNotExist) {
			model := filepath.Join(path, "tokenizer.model")
			if _, err := os.Stat(model); err != nil {
				return nil, fmt.Errorf("hf: load %s: no tokenizer.json or tokenizer.model", path)
			}
			file = model
		}
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("hf: load %s: %w", file, err)
	}
	var t *Tokenizer
	if strings.HasSuffix(file, ".json") {
		t, err = parseTokenizerJSON(data)
	} else {
		t, err = loadTiktoken(data, filepath.Join(filepath.Dir(file), "tokenizer_config.json"))
	}
	if err != nil {
		return nil, fmt.Errorf("hf: load %s: %w", file, err)
	}
	return t, nil
}

// parseTokenizerJSON builds a Tokenizer from the contents of a
// tokenizer.json, as TokenizerImpl's deserializer does (tokenizer/
// serialization.rs, tokenizers v0.22.2).
func parseTokenizerJSON(data []byte) (*Tokenizer, error) {
	rest, big, err := cutModelTables(data)
	if err != nil {
		return nil, err
	}
	var p fastjson.Parser
	v, err := p.ParseBytes(rest)
	if err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	root := node{v, "$", -1}
	if err := root.object("version", "truncation", "padding", "added_tokens", "normalizer",
		"pre_tokenizer", "model", "decoder", "post_processor"); err != nil {
		return nil, err
	}
	for _, k := range []string{"truncation", "padding"} {
		if n := root.get(k); !n.null() {
			return nil, n.unsupported(k)
		}
	}
	t := &Tokenizer{}
	norms, err := parseNormalizer(root.get("normalizer"))
	if err != nil {
		return nil, err
	}
	t.normalize = chain(norms)
	steps, byteLevel, err := parsePreTokenizer(root.get("pre_tokenizer"))
	if err != nil {
		return nil, err
	}
	t.steps = steps
	model, vocab, err := parseBPE(root.get("model"), big, byteLevel)
	if err != nil {
		return nil, err
	}
	t.model = model
	if t.added, err = parseAdded(root.get("added_tokens"), vocab, t.normalize); err != nil {
		return nil, err
	}
	t.vocabSize = len(vocab)
	for c := range t.added.byContent {
		if _, ok := vocab[c]; !ok {
			t.vocabSize++
		}
	}
	if t.prefix, t.suffix, err = parsePostProcessor(root.get("post_processor"), t); err != nil {
		return nil, err
	}
	if t.decoder, err = parseDecoder(root.get("decoder")); err != nil {
		return nil, err
	}
	t.kind = "BPE"
	switch {
	case byteLevel:
		t.kind = "byte-level BPE"
	case model.byteFallback:
		t.kind = "BPE with byte fallback"
	}
	return t, nil
}

// parseAdded reads added_tokens and gives each its id as AddedVocabulary::
// add_tokens does (tokenizer/added_vocabulary.rs): the id of its content
// in the vocabulary or among the tokens added before it, else the next
// free id from the vocabulary's size; the ids written in the file are not
// used, as in Rust.
func parseAdded(n node, vocab map[string]int32, norm normalizer) (*addedVocab, error) {
	a := &addedVocab{raw: newTrie(), norm: newTrie(), byID: map[int32]*addedToken{}, byContent: map[string]int32{}}
	if n.null() {
		return a, nil
	}
	items, err := n.array()
	if err != nil {
		return nil, err
	}
	var toks []*addedToken
	for _, it := range items {
		if err := it.object("id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"); err != nil {
			return nil, err
		}
		tok := &addedToken{}
		if tok.content, err = it.get("content").str(); err != nil {
			return nil, err
		}
		for _, f := range []struct {
			key string
			dst *bool
		}{{"single_word", &tok.singleWord}, {"lstrip", &tok.lstrip}, {"rstrip", &tok.rstrip},
			{"normalized", &tok.normalized}, {"special", &tok.special}} {
			fn := it.get(f.key)
			if fn.null() { // the Rust deserializer requires every field
				return nil, fn.errorf("missing")
			}
			if *f.dst, err = fn.boolOr(false); err != nil {
				return nil, err
			}
		}
		toks = append(toks, tok)
	}
	var specials, others []*addedToken
	isSpecial := map[string]bool{}
	for _, tok := range toks {
		if tok.special && tok.content != "" && !isSpecial[tok.content] {
			specials = append(specials, tok)
			isSpecial[tok.content] = true
		}
	}
	type flags struct {
		content                                         string
		singleWord, lstrip, rstrip, normalized, special bool
	}
	seen := map[flags]bool{}
	next := int32(len(vocab))
	for _, tok := range toks {
		f := flags{tok.content, tok.singleWord, tok.lstrip, tok.rstrip, tok.normalized, tok.special}
		if tok.content == "" || seen[f] {
			continue
		}
		seen[f] = true
		id, ok := a.byContent[tok.content]
		if !ok {
			if id, ok = vocab[tok.content]; !ok {
				id = next
				next++
			}
		}
		tok.id = id
		a.byContent[tok.content] = id
		a.byID[id] = tok
		if !isSpecial[tok.content] {
			others = append(others, tok)
		}
	}
	for _, tok := range append(specials, others...) {
		id := a.byContent[tok.content]
		if !tok.normalized {
			a.raw.add(tok.content, id)
			continue
		}
		c := tok.content
		if norm != nil {
			c = norm(c)
		}
		if c == "" {
			return nil, n.errorf("added token %q normalizes to nothing", tok.content)
		}
		a.norm.add(c, id)
	}
	return a, nil
}
