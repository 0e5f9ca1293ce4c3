package tokenizer

import (
	"fmt"
	"sync"
)

// Tokenizer encodes text and chat conversations into token ids.
type Tokenizer struct {
	enc      *encoding
	encoding string
	cache    *messageCache // nil when disabled
}

var (
	// encodingsMu guards encodings: each BPE table is loaded once per process
	// and shared by every Tokenizer.
	encodingsMu sync.Mutex
	encodings   = map[string]*encoding{}
)

// New returns a Tokenizer for cfg. The first call for an encoding loads its
// BPE tables from the binary (25-65 ms, most of it the pair table that
// pieces of 100 bytes or more are merged with); later calls share them.
func New(cfg Config) (*Tokenizer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	enc, err := loadEncoding(cfg.Encoding)
	if err != nil {
		return nil, err
	}
	t := &Tokenizer{enc: enc, encoding: cfg.Encoding}
	if cfg.MessageCacheSize > 0 {
		t.cache = newMessageCache(cfg.MessageCacheSize)
	}
	return t, nil
}

func loadEncoding(name string) (*encoding, error) {
	encodingsMu.Lock()
	defer encodingsMu.Unlock()
	if enc, ok := encodings[name]; ok {
		return enc, nil
	}
	enc, err := newEncoding(name)
	if err != nil {
		return nil, err
	}
	encodings[name] = enc
	return enc, nil
}

// Encoding returns the name of the BPE encoding in use.
func (t *Tokenizer) Encoding() string { return t.encoding }

// Encode returns the token ids of text. Special-token markers in text are
// encoded as ordinary text, so a client cannot inject control tokens, and
// each byte of invalid UTF-8 as U+FFFD.
//
// The ids are tiktoken's (encode_ordinary) for every text whose
// pre-tokenized pieces are at most 8 KiB, which covers real text; a longer
// piece, such as a run of one character, is merged in 8 KiB chunks, with a
// token count within one per chunk of exact (see appendPiece). The cost is
// linear in len(text), at most 8 units of work per byte
// (TestEncodeCostIsLinear): 25-35 ns per byte on the worst inputs found
// (random letters) and ~15 ns on prose on the development machine, so a
// prompt at the frontend's 8 MiB body limit costs at most about 0.3 s.
func (t *Tokenizer) Encode(text string) []int { return t.enc.encode(text) }

// Count returns the number of tokens in text.
func (t *Tokenizer) Count(text string) int { return len(t.Encode(text)) }

// Decode returns the text of token ids. Special tokens decode to their
// markers (<|endoftext|>); ids that are no token decode to nothing.
func (t *Tokenizer) Decode(tokens []int) string { return t.enc.decode(tokens) }

// EncodeChat returns the token ids of the rendered conversation, including
// the trailing assistant generation prompt. It equals
// Encode(RenderChat(msgs)) but tokenizes each message once: the tokens of
// every rendered message are cached, keyed by a hash of the message.
func (t *Tokenizer) EncodeChat(msgs []ChatMessage) []int {
	var out []int
	for i := range msgs {
		out = append(out, t.encodeMessage(&msgs[i])...)
	}
	return append(out, t.generationPrompt()...)
}

func (t *Tokenizer) encodeMessage(m *ChatMessage) []int {
	if t.cache == nil {
		return t.Encode(m.render())
	}
	key := m.key()
	if toks, ok := t.cache.get(key); ok {
		return toks
	}
	toks := t.Encode(m.render())
	t.cache.put(key, toks)
	return toks
}

func (t *Tokenizer) generationPrompt() []int {
	if t.cache == nil {
		return t.Encode(generationPrompt)
	}
	if toks, ok := t.cache.get(generationPromptKey); ok {
		return toks
	}
	toks := t.Encode(generationPrompt)
	t.cache.put(generationPromptKey, toks)
	return toks
}

// CacheStats returns the message cache's hits and misses since start.
func (t *Tokenizer) CacheStats() (hits, misses uint64) {
	if t.cache == nil {
		return 0, 0
	}
	return t.cache.stats()
}
