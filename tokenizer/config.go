package tokenizer

import (
	"fmt"
	"slices"
	"strings"
)

// Encodings lists the supported BPE encodings.
var Encodings = []string{"cl100k_base", "o200k_base"}

// Config configures a Tokenizer.
type Config struct {
	// Encoding is the tiktoken encoding (default cl100k_base).
	Encoding string `mapstructure:"encoding" help:"BPE encoding: cl100k_base or o200k_base"`
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
	if !slices.Contains(Encodings, c.Encoding) {
		return fmt.Errorf("encoding: unknown encoding %q (valid: %s)", c.Encoding, strings.Join(Encodings, ", "))
	}
	if c.MessageCacheSize < 0 {
		return fmt.Errorf("message_cache_size: must be >= 0, got %d", c.MessageCacheSize)
	}
	return nil
}
