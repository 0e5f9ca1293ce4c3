package tokenizer

import (
	"fmt"
	"slices"
	"strings"
)

// Encodings lists the built-in BPE encodings.
var Encodings = []string{"cl100k_base", "o200k_base"}

// Config configures a Tokenizer.
type Config struct {
	// Source is the served model's tokenizer: a model directory holding
	// tokenizer.json (and tokenizer_config.json with the chat template), a
	// tokenizer.json file, or a tiktoken-format tokenizer.model. Empty: the
	// built-in Encoding and duet's ChatML template.
	Source string `mapstructure:"source" help:"the model's tokenizer: a model directory (tokenizer.json, tokenizer_config.json), a tokenizer.json, or a tiktoken-format tokenizer.model; empty: the built-in encoding"`
	// ChatTemplate picks the chat template: a name from the list in the
	// source's tokenizer_config.json, or a path to a Jinja file. Empty: the
	// source's default template (chat_template.jinja or tokenizer_config.json).
	ChatTemplate string `mapstructure:"chat_template" help:"chat template: a name in the model's tokenizer_config.json, or a path to a .jinja file; empty: the model's default"`
	// Encoding is the built-in tiktoken encoding used without a Source
	// (default cl100k_base).
	Encoding string `mapstructure:"encoding" help:"built-in BPE encoding used without a source: cl100k_base or o200k_base"`
	// MessageCacheSize bounds the per-message token cache, in messages
	// (default 65536; 0 disables the cache).
	MessageCacheSize int `mapstructure:"message_cache_size" help:"messages kept in the per-message token cache (0 disables it)"`
}

// Defaults returns the default configuration.
func Defaults() Config {
	return Config{Encoding: "cl100k_base", MessageCacheSize: 65536}
}

// Validate checks the configuration; errors name the key.
func (c Config) Validate() error {
	if c.Source == "" && !slices.Contains(Encodings, c.Encoding) {
		return fmt.Errorf("encoding: unknown encoding %q (valid: %s)", c.Encoding, strings.Join(Encodings, ", "))
	}
	if c.MessageCacheSize < 0 {
		return fmt.Errorf("message_cache_size: must be >= 0, got %d", c.MessageCacheSize)
	}
	if c.ChatTemplate != "" && c.Source == "" && !strings.HasSuffix(c.ChatTemplate, ".jinja") {
		return fmt.Errorf("chat_template: %q names a template in a model's tokenizer_config.json, but source is empty; set source, or give a path to a .jinja file", c.ChatTemplate)
	}
	return nil
}
