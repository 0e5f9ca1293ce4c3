package tokenizer

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"unicode/utf8"

	"github.com/pkoukk/tiktoken-go-loader/assets"

	"github.com/duet-serve/duet/tokenizer/pretok"
)

// encoding is one BPE table with its pre-tokenizer: tiktoken's algorithm
// (pre-tokenizers from tokenizer/pretok, merging in merge.go) over the tables tiktoken-go-loader
// embeds. It is immutable and safe for concurrent use.
type encoding struct {
	ranks   *rankTable     // token bytes <-> rank, which is the token id
	special map[int]string // special token id -> text, for Decode only
	next    func(*pretok.Scanner, int) int
}

// encodingSpecs lists the supported encodings: their table file, their
// pre-tokenizer and their special tokens (as tiktoken-go v0.1.8 defines
// them; they are never produced by Encode, only decoded).
var encodingSpecs = map[string]struct {
	file    string
	next    func(*pretok.Scanner, int) int
	special map[string]int
}{
	"cl100k_base": {"cl100k_base.tiktoken", (*pretok.Scanner).CL100K, map[string]int{
		"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
		"<|fim_suffix|>": 100260, "<|endofprompt|>": 100276}},
	"o200k_base": {"o200k_base.tiktoken", (*pretok.Scanner).O200K, map[string]int{
		"<|endoftext|>": 199999, "<|endofprompt|>": 200018}},
}

// newEncoding loads the named encoding from the embedded tables.
func newEncoding(name string) (*encoding, error) {
	spec, ok := encodingSpecs[name]
	if !ok {
		return nil, fmt.Errorf("tokenizer: unknown encoding %s", name)
	}
	data, err := assets.Assets.ReadFile(spec.file)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: load encoding %s: %w", name, err)
	}
	e := &encoding{
		special: make(map[int]string, len(spec.special)),
		next:    spec.next,
	}
	// Decode every token into one arena first: one allocation, not one per
	// token.
	type entry struct{ rank, start, end int32 }
	entries := make([]entry, 0, bytes.Count(data, []byte{'\n'})+1)
	arena := make([]byte, 0, len(data)*3/4)
	var single [256]bool
	for line := range bytes.Lines(data) {
		line = bytes.TrimRight(line, "\n")
		if len(line) == 0 {
			continue
		}
		b64, num, ok := bytes.Cut(line, []byte{' '})
		if !ok {
			return nil, fmt.Errorf("tokenizer: load encoding %s: malformed line %q", name, line)
		}
		start := len(arena)
		if arena, err = base64.StdEncoding.AppendDecode(arena, b64); err != nil {
			return nil, fmt.Errorf("tokenizer: load encoding %s: token %q: %w", name, b64, err)
		}
		rank, ok := parseRank(num)
		if !ok {
			return nil, fmt.Errorf("tokenizer: load encoding %s: rank of %q: %q is not a number below %d", name, b64, num, maxTokens)
		}
		if len(arena) == start+1 {
			single[arena[start]] = true
		}
		entries = append(entries, entry{int32(rank), int32(start), int32(len(arena))})
	}
	for b, ok := range single {
		if !ok {
			return nil, fmt.Errorf("tokenizer: load encoding %s: byte %#x is not a token", name, b)
		}
	}
	all := string(arena)
	tokens := make([]string, 0, len(entries)) // ranks are 0 to len-1 unless some are unused
	for _, en := range entries {
		for int(en.rank) >= len(tokens) {
			tokens = append(tokens, "")
		}
		if en.start == en.end || tokens[en.rank] != "" {
			return nil, fmt.Errorf("tokenizer: load encoding %s: token %q: empty, or rank %d taken", name, all[en.start:en.end], en.rank)
		}
		tokens[en.rank] = all[en.start:en.end]
	}
	e.ranks = newRankTable(tokens)
	for text, id := range spec.special {
		e.special[id] = text
	}
	return e, nil
}

// parseRank parses a decimal rank below maxTokens.
func parseRank(num []byte) (int, bool) {
	rank := 0
	for _, c := range num {
		if c < '0' || c > '9' {
			return 0, false
		}
		if rank = rank*10 + int(c-'0'); rank >= maxTokens {
			return 0, false
		}
	}
	return rank, len(num) > 0
}

// encode returns the token ids of text.
func (e *encoding) encode(text string) []int {
	ids, _ := e.encodeCost(text, maxPieceBytes)
	return ids
}

// encodeCost returns the token ids of text, merging pieces of up to
// maxPiece bytes whole (see appendPiece), and the work done: runes the
// pre-tokenizer examined plus rank look-ups and tournament steps in
// merging. Text that is not valid UTF-8 is first converted as []rune
// converts it (each invalid byte becomes U+FFFD), as tiktoken-go did.
func (e *encoding) encodeCost(text string, maxPiece int) ([]int, int) {
	if !utf8.ValidString(text) {
		text = string([]rune(text))
	}
	sc := pretok.NewScanner(text)
	m := getMerger(e, maxPiece, len(text))
	defer putMerger(m)
	out := make([]int, 0, len(text)/4+16) // prose has over 4 bytes per token
	for i := 0; i < len(text); {
		j := e.next(sc, i)
		out = m.appendPiece(out, text[i:j])
		i = j
	}
	return out, sc.Steps + m.ops
}

// decode returns the text of ids. Special token ids decode to their text;
// ids that are no token decode to nothing.
func (e *encoding) decode(ids []int) string {
	n := 0
	for _, id := range ids {
		n += len(e.token(id))
	}
	b := make([]byte, 0, n)
	for _, id := range ids {
		b = append(b, e.token(id)...)
	}
	return string(b)
}

func (e *encoding) token(id int) string {
	if tok := e.ranks.token(id); tok != "" {
		return tok
	}
	return e.special[id]
}
