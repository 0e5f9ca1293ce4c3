package hf

import (
	"strings"
	"unicode/utf8"
)

// decoder turns the strings of tokens into text (decoders/, tokenizers
// v0.22.2 decode_chain); Decode joins what the last one returns.
type decoder func([]string) []string

// Decode returns the text of ids as the Rust tokenizer's decode(ids,
// skip_special_tokens=false) does: each id's added-token content or
// vocabulary string (ids that are neither are skipped), through the
// decoder, joined; without a decoder, joined with spaces.
func (t *Tokenizer) Decode(ids []int) string {
	toks := make([]string, 0, len(ids))
	for _, id := range ids {
		if tok, ok := t.added.byID[int32(id)]; ok {
			toks = append(toks, tok.content)
		} else if id >= 0 && id < len(t.model.tokens) && t.model.tokens[id] != "" {
			toks = append(toks, t.model.tokens[id])
		}
	}
	if t.decoder == nil {
		return strings.Join(toks, " ")
	}
	return strings.Join(t.decoder(toks), "")
}

func decoderChain(ds []decoder) decoder {
	return func(toks []string) []string {
		for _, d := range ds {
			toks = d(toks)
		}
		return toks
	}
}

// byteLevelDecoder maps each token's characters back to bytes (a token
// with a character outside the alphabet is taken as its UTF-8 bytes) and
// returns them as one string, invalid UTF-8 replaced.
func byteLevelDecoder(toks []string) []string {
	var b []byte
	for _, tok := range toks {
		if raw, ok := fromByteLevel(tok); ok {
			b = append(b, raw...)
		} else {
			b = append(b, tok...)
		}
	}
	return []string{validUTF8(string(b))}
}

// replaceDecoder replaces a string in each token.
func replaceDecoder(pattern, content string) decoder {
	return func(toks []string) []string {
		out := make([]string, len(toks))
		for i, tok := range toks {
			out[i] = strings.ReplaceAll(tok, pattern, content)
		}
		return out
	}
}

// byteFallbackDecoder turns runs of <0xXX> tokens into the text of their
// bytes, or one U+FFFD per byte if they are not valid UTF-8.
func byteFallbackDecoder(toks []string) []string {
	var out []string
	var pending []byte
	flush := func() {
		if len(pending) == 0 {
			return
		}
		if utf8.Valid(pending) {
			out = append(out, string(pending))
		} else {
			for range pending {
				out = append(out, "\uFFFD")
			}
		}
		pending = pending[:0]
	}
	for _, tok := range toks {
		if b, ok := byteToken(tok); ok {
			pending = append(pending, b)
			continue
		}
		flush()
		out = append(out, tok)
	}
	flush()
	return out
}

// byteToken parses "<0xXX>".
func byteToken(tok string) (byte, bool) {
	if len(tok) != 6 || !strings.HasPrefix(tok, "<0x") || tok[5] != '>' {
		return 0, false
	}
	hi, ok1 := hexDigit(tok[3])
	lo, ok2 := hexDigit(tok[4])
	return hi<<4 | lo, ok1 && ok2
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func fuseDecoder(toks []string) []string { return []string{strings.Join(toks, "")} }

// stripDecoder removes up to start leading and stop trailing content
// characters from each token.
func stripDecoder(content rune, start, stop int) decoder {
	return func(toks []string) []string {
		out := make([]string, len(toks))
		for i, tok := range toks {
			rs := []rune(tok)
			a, z := 0, len(rs)
			for a < start && a < len(rs) && rs[a] == content {
				a++
			}
			for k := 0; k < stop && z > a && rs[z-1] == content; k++ {
				z--
			}
			out[i] = string(rs[a:z])
		}
		return out
	}
}

// metaspaceDecoder turns the replacement character back into spaces; in
// the first token it is removed unless prepend_scheme is never.
func metaspaceDecoder(replacement rune, scheme prependScheme) decoder {
	return func(toks []string) []string {
		out := make([]string, len(toks))
		for i, tok := range toks {
			var b strings.Builder
			for _, r := range tok {
				switch {
				case r != replacement:
					b.WriteRune(r)
				case i == 0 && scheme != prependNever:
				default:
					b.WriteByte(' ')
				}
			}
			out[i] = b.String()
		}
		return out
	}
}
