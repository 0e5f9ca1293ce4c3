package tokenizer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/duet-serve/duet/tokenizer/chattemplate"
	"github.com/duet-serve/duet/tokenizer/hf"
)

// Tokenizer encodes text and chat conversations into token ids: with the
// served model's own tokenizer and chat template when Config.Source names
// them, else with a built-in encoding and duet's ChatML template.
type Tokenizer struct {
	enc      *encoding              // the built-in encoding; nil with a model
	encName  string                 // its name
	model    *hf.Tokenizer          // the model's tokenizer; nil without a source
	template *chattemplate.Template // nil: the built-in ChatML (no source) or none (a source without one)
	info     Info
	eos      int           // the end-of-sequence token id, -1 when unknown
	cache    *messageCache // nil when disabled or with a model's template
}

// Info says which tokenizer and chat template are in use, for the start-up
// log and /cluster_info.
type Info struct {
	// Tokenizer is the built-in encoding's name, or the model tokenizer's
	// path and kind ("/models/llama (byte-level BPE, 128256 tokens)").
	Tokenizer string `json:"tokenizer"`
	// ChatTemplate is "built-in ChatML", the template's path (with
	// "#name" for a named one), or "none" for a model without one.
	ChatTemplate string `json:"chat_template"`
}

// ErrNoChatTemplate is EncodeChat's error for a model that has no chat
// template: engines refuse chat requests for such a (base) model.
var ErrNoChatTemplate = errors.New("the model has no chat template: chat requests are refused, as the engine refuses them; use completions, or set tokenizer.chat_template")

var (
	// tablesMu guards encodings and models: each built-in table and each
	// model tokenizer is loaded once per process and shared.
	tablesMu  sync.Mutex
	encodings = map[string]*encoding{}
	models    = map[string]*hf.Tokenizer{}
)

// New returns a Tokenizer for cfg. The first call for an encoding loads its
// BPE tables from the binary (25-65 ms, most of it the pair table that
// pieces of 100 bytes or more are merged with), and the first call for a
// model source reads its files; later calls share them.
func New(cfg Config) (*Tokenizer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t := &Tokenizer{}
	var err error
	if cfg.Source == "" {
		if t.enc, err = loadEncoding(cfg.Encoding); err != nil {
			return nil, err
		}
		t.encName, t.info.Tokenizer = cfg.Encoding, cfg.Encoding+" (built-in)"
	} else {
		if t.model, err = loadModel(cfg.Source); err != nil {
			return nil, fmt.Errorf("tokenizer: source: %w", err)
		}
		t.info.Tokenizer = fmt.Sprintf("%s (%s)", cfg.Source, t.model.Describe())
	}
	if t.template, err = loadTemplate(cfg); err != nil {
		return nil, fmt.Errorf("tokenizer: chat_template: %w", err)
	}
	t.info.ChatTemplate = t.templateName()
	t.eos = t.findEOS()
	if cfg.MessageCacheSize > 0 && t.template == nil && t.model == nil {
		t.cache = newMessageCache(cfg.MessageCacheSize)
	}
	return t, nil
}

func loadEncoding(name string) (*encoding, error) {
	return loadShared(encodings, name, func() (*encoding, error) { return newEncoding(name) })
}

func loadModel(source string) (*hf.Tokenizer, error) {
	key, err := filepath.Abs(source)
	if err != nil {
		return nil, err
	}
	return loadShared(models, key, func() (*hf.Tokenizer, error) { return hf.Load(source) })
}

// loadShared returns loaded[key], loading and keeping it first if absent.
// It holds tablesMu throughout, so each is loaded once.
func loadShared[T any](loaded map[string]T, key string, load func() (T, error)) (T, error) {
	tablesMu.Lock()
	defer tablesMu.Unlock()
	if v, ok := loaded[key]; ok {
		return v, nil
	}
	v, err := load()
	if err == nil {
		loaded[key] = v
	}
	return v, err
}

// loadTemplate loads the configured chat template: a .jinja file, else the
// source's template (named or default). It returns nil without a source
// (duet's ChatML) and for a source that has no template.
func loadTemplate(cfg Config) (*chattemplate.Template, error) {
	if isTemplateFile(cfg.ChatTemplate) {
		return chattemplate.Load(cfg.ChatTemplate, "")
	}
	if cfg.Source == "" {
		return nil, nil
	}
	dir := cfg.Source
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		dir = filepath.Dir(dir)
	}
	tmpl, err := chattemplate.Load(dir, cfg.ChatTemplate)
	if cfg.ChatTemplate == "" && (errors.Is(err, chattemplate.ErrNoTemplate) || errors.Is(err, os.ErrNotExist)) {
		return nil, nil
	}
	return tmpl, err
}

// isTemplateFile reports whether chat_template names a file rather than a
// template of the model's list.
func isTemplateFile(name string) bool {
	if name == "" {
		return false
	}
	if strings.HasSuffix(name, ".jinja") {
		return true
	}
	fi, err := os.Stat(name)
	return err == nil && !fi.IsDir()
}

// templateName says which chat template is in use, for Info.
func (t *Tokenizer) templateName() string {
	switch {
	case t.template != nil:
		return t.template.From()
	case t.model == nil:
		return "built-in ChatML"
	}
	return "none"
}

// findEOS returns the id of the model's end-of-sequence token: the
// template's eos_token, else the first of the usual names the vocabulary
// has; the built-in encodings' <|endoftext|>.
func (t *Tokenizer) findEOS() int {
	if t.model == nil {
		return encodingSpecs[t.encName].special["<|endoftext|>"]
	}
	names := []string{"<|eot_id|>", "<|im_end|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>"}
	if t.template != nil {
		names = append([]string{t.template.SpecialToken("eos_token")}, names...)
	}
	for _, name := range names {
		if id, ok := t.model.TokenID(name); ok && name != "" {
			return id
		}
	}
	return -1
}

// Info returns which tokenizer and chat template are in use.
func (t *Tokenizer) Info() Info { return t.info }

// Encoding returns the name of the built-in encoding in use, or "" with a
// model's tokenizer.
func (t *Tokenizer) Encoding() string { return t.encName }

// EOS returns the end-of-sequence token id, or -1 when the model's files
// name none.
func (t *Tokenizer) EOS() int { return t.eos }

// Encode returns the token ids of text, with no special tokens added.
//
// With a model's tokenizer the ids are Hugging Face tokenizers' for
// encode(text, add_special_tokens=False): special tokens written in the
// text are recognised, as the engines recognise them in a rendered chat
// prompt (see tokenizer/hf).
//
// With a built-in encoding, special-token markers in text are encoded as
// ordinary text and each byte of invalid UTF-8 as U+FFFD. The ids are
// tiktoken's (encode_ordinary) for every text whose pre-tokenized pieces
// are at most 8 KiB, which covers real text; a longer piece, such as a run
// of one character, is merged in 8 KiB chunks, with a token count within
// one per chunk of exact (see appendPiece). The cost is linear in
// len(text), at most 8 units of work per byte (TestEncodeCostIsLinear):
// 25-35 ns per byte on the worst inputs found (random letters) and ~15 ns
// on prose on the development machine, so a prompt at the frontend's 8 MiB
// body limit costs at most about 0.3 s.
func (t *Tokenizer) Encode(text string) []int {
	if t.model != nil {
		return t.model.Encode(text)
	}
	return t.enc.encode(text)
}

// EncodePrompt returns the token ids of a completions prompt: Encode's,
// with the model tokenizer's special tokens (BOS) added, as vLLM and
// SGLang tokenize a completions prompt (add_special_tokens defaults to
// true there). The built-in encodings add none.
func (t *Tokenizer) EncodePrompt(text string) []int {
	if t.model != nil {
		return t.model.EncodeWithSpecial(text)
	}
	return t.enc.encode(text)
}

// Count returns the number of tokens in text.
func (t *Tokenizer) Count(text string) int { return len(t.Encode(text)) }

// Decode returns the text of token ids. Special tokens decode to their
// markers (<|endoftext|>); ids that are no token decode to nothing.
func (t *Tokenizer) Decode(tokens []int) string {
	if t.model != nil {
		return t.model.Decode(tokens)
	}
	return t.enc.decode(tokens)
}

// CacheStats returns the message cache's hits and misses since start.
func (t *Tokenizer) CacheStats() (hits, misses uint64) {
	if t.cache == nil {
		return 0, 0
	}
	return t.cache.stats()
}
