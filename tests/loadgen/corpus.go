package loadgen

import (
	"embed"
	"errors"
	"io/fs"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/duet-serve/duet/tokenizer"
)

//go:embed corpus/*.txt
var corpusFiles embed.FS

// Corpus is the embedded public-domain text as one token sequence, from
// which prompts of a given token length are cut. It is read-only after
// NewCorpus and safe for concurrent use.
type Corpus struct {
	tok    *tokenizer.Tokenizer
	tokens []int
}

// NewCorpus tokenizes every corpus/*.txt file, in name order, with tok.
func NewCorpus(tok *tokenizer.Tokenizer) (*Corpus, error) {
	names, err := fs.Glob(corpusFiles, "corpus/*.txt")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		data, err := corpusFiles.ReadFile(n)
		if err != nil {
			return nil, err
		}
		b.Write(data)
		b.WriteString("\n\n")
	}
	return newCorpusFromText(tok, b.String())
}

func newCorpusFromText(tok *tokenizer.Tokenizer, text string) (*Corpus, error) {
	tokens := tok.Encode(text)
	if len(tokens) == 0 {
		return nil, errors.New("loadgen: empty corpus")
	}
	return &Corpus{tok: tok, tokens: tokens}, nil
}

// Len returns the corpus length in tokens.
func (c *Corpus) Len() int { return len(c.tokens) }

// Tokens returns n tokens starting at offset, wrapping around the end of
// the corpus. The result is a fresh slice.
func (c *Corpus) Tokens(offset, n int) []int {
	out := make([]int, 0, n)
	offset %= len(c.tokens)
	for len(out) < n {
		end := min(len(c.tokens), offset+n-len(out))
		out = append(out, c.tokens[offset:end]...)
		offset = 0
	}
	return out
}

// Text returns the text of n corpus tokens from a random offset. Its token
// count after re-encoding is n give or take the merges at its two ends, as
// with aiperf's synthetic prompts.
func (c *Corpus) Text(rng *rand.Rand, n int) string {
	if n <= 0 {
		return ""
	}
	return c.tok.Decode(c.Tokens(rng.IntN(len(c.tokens)), n))
}

// Decode returns the text of tokens.
func (c *Corpus) Decode(tokens []int) string { return c.tok.Decode(tokens) }
