package hf

import (
	"fmt"
	"sync"
)

// Tokenizer encodes text into token ids as Hugging Face's Rust tokenizers
// do with one tokenizer.json (or a tiktoken file, see Load). It is
// immutable once loaded, apart from its word cache, and safe for
// concurrent use.
type Tokenizer struct {
	added     *addedVocab
	normalize normalizer // nil: none
	steps     []step     // the pre-tokenizer
	model     *bpe
	prefix    []int // the post-processor's special tokens before the text
	suffix    []int // and after it
	decoder   decoder
	vocabSize int
	kind      string // for Describe
	segments  segmentCache
}

// Encode returns the token ids of text as the Rust tokenizer's
// encode(text, add_special_tokens=false) does: added and special tokens
// written in the text are recognised, and the post-processor adds
// nothing. Invalid UTF-8 is first replaced as validUTF8 describes.
func (t *Tokenizer) Encode(text string) []int {
	text = validUTF8(text)
	e := encoders.Get().(*encoder)
	e.t, e.out = t, make([]int, 0, len(text)/3+4)
	t.added.split(t.added.raw, text, e.rawPiece, e.token)
	out := e.out
	e.t, e.out = nil, nil
	encoders.Put(e)
	return out
}

// EncodeWithSpecial returns the token ids of text as encode(text,
// add_special_tokens=true) does: Encode's, with the post-processor's
// special tokens (SpecialTokens) around them.
func (t *Tokenizer) EncodeWithSpecial(text string) []int {
	ids := t.Encode(text)
	if len(t.prefix)+len(t.suffix) == 0 {
		return ids
	}
	out := make([]int, 0, len(t.prefix)+len(ids)+len(t.suffix))
	out = append(out, t.prefix...)
	out = append(out, ids...)
	return append(out, t.suffix...)
}

// SpecialTokens returns the ids EncodeWithSpecial puts before and after
// the text's (for Llama 3.1 <|begin_of_text|> before, nothing after). The
// slices are copies.
func (t *Tokenizer) SpecialTokens() (prefix, suffix []int) {
	return append([]int(nil), t.prefix...), append([]int(nil), t.suffix...)
}

// TokenID returns the id of a token given as its vocabulary string (as
// tokenizer.json writes it, e.g. "Ġthe") or of an added token.
func (t *Tokenizer) TokenID(s string) (int, bool) {
	if id, ok := t.added.byContent[s]; ok {
		return int(id), true
	}
	if id := t.model.tokenID(s); id >= 0 {
		return int(id), true
	}
	return 0, false
}

// VocabSize returns the number of distinct tokens: the model's vocabulary
// and the added tokens not in it (get_vocab_size(true)).
func (t *Tokenizer) VocabSize() int { return t.vocabSize }

// Describe returns a short description for a start-up log line, such as
// "byte-level BPE, 128256 tokens".
func (t *Tokenizer) Describe() string {
	return fmt.Sprintf("%s, %d tokens", t.kind, t.vocabSize)
}

// encoder holds the state of one Encode call; taken from encoders.
type encoder struct {
	t       *Tokenizer
	out     []int
	scratch mergeScratch
}

var encoders = sync.Pool{New: func() any { return new(encoder) }}

func (e *encoder) token(id int32) { e.out = append(e.out, int(id)) }

// rawPiece normalizes one stretch of the text between tokens matched in
// the raw text and looks for the normalized tokens in it.
func (e *encoder) rawPiece(s string, offset int) {
	key, cacheable := keyOf(s, offset == 0)
	if !cacheable {
		e.encodeRaw(s, offset)
		return
	}
	if ids, ok := e.t.segments.get(key, s); ok {
		e.out = append(e.out, ids...)
		return
	}
	start := len(e.out)
	e.encodeRaw(s, offset)
	e.t.segments.put(key, s, e.out[start:])
}

// encodeRaw is rawPiece without the segment cache.
func (e *encoder) encodeRaw(s string, offset int) {
	t := e.t
	if t.normalize != nil {
		s = t.normalize(s)
	}
	t.added.split(t.added.norm, s, func(sub string, k int) {
		e.pretokenize(0, piece{sub, offset == 0 && k == 0})
	}, e.token)
}

// pretokenize hands p to step k of the pre-tokenizer, or past the last
// step to the model.
func (e *encoder) pretokenize(k int, p piece) {
	if k < len(e.t.steps) {
		e.t.steps[k].split(e, k, p)
		return
	}
	if p.s != "" {
		e.out = e.t.model.appendWord(e.out, p.s, &e.scratch)
	}
}
