package hf

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// normalizer rewrites one piece of text (normalizers/, tokenizers
// v0.22.2). Offsets are not tracked: duet needs only the ids.
type normalizer func(string) string

// chain returns the normalizer applying ns in order, nil for none.
func chain(ns []normalizer) normalizer {
	switch len(ns) {
	case 0:
		return nil
	case 1:
		return ns[0]
	}
	return func(s string) string {
		for _, n := range ns {
			s = n(s)
		}
		return s
	}
}

// prepend is Prepend: the string before any non-empty text.
func prepend(p string) normalizer {
	return func(s string) string {
		if s == "" {
			return s
		}
		return p + s
	}
}

// replaceString is Replace with a String pattern: every non-overlapping
// occurrence, left to right.
func replaceString(pattern, content string) normalizer {
	return func(s string) string { return strings.ReplaceAll(s, pattern, content) }
}

// replaceRegex is Replace with a Regex pattern: every match of f.
func replaceRegex(f find, content string) normalizer {
	return func(s string) string {
		var b strings.Builder
		done := 0
		for i := 0; i < len(s); {
			start, end := f(s, i)
			if start < 0 {
				break
			}
			b.WriteString(s[done:start])
			b.WriteString(content)
			done, i = end, end
		}
		if done == 0 {
			return s
		}
		b.WriteString(s[done:])
		return b.String()
	}
}

// strip is Strip: White_Space removed from the left and/or right.
func strip(left, right bool) normalizer {
	ws := func(r rune) bool { return unicode.Is(unicode.White_Space, r) }
	return func(s string) string {
		if left {
			s = strings.TrimLeftFunc(s, ws)
		}
		if right {
			s = strings.TrimRightFunc(s, ws)
		}
		return s
	}
}

// lowercase is Lowercase: Rust's char::to_lowercase for each character,
// which is the simple mapping except U+0130, which becomes "i̇".
func lowercase(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if r == 'İ' {
			b.WriteString("i\u0307")
			continue
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// validUTF8 returns s with each maximal ill-formed subsequence replaced by
// U+FFFD, as Python's bytes.decode("utf-8", "replace"), WHATWG's decoder
// (Node's Buffer.toString) and Rust's String::from_utf8_lossy do: what an
// engine tokenizes when a prompt with invalid bytes reaches it through a
// lenient JSON or HTTP decoder. Go's own conversions replace each invalid
// byte instead, which differs for a truncated multi-byte sequence.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		if r != utf8.RuneError || w != 1 {
			b.WriteString(s[i : i+w])
			i += w
			continue
		}
		b.WriteRune(utf8.RuneError)
		i += maximalSubpart(s[i:])
	}
	return b.String()
}

// maximalSubpart returns the length of the ill-formed sequence at the
// start of s (whose first rune does not decode): the lead byte and the
// continuation bytes that could still follow it in a well-formed sequence
// (Unicode 15, table 3-7), at least 1.
func maximalSubpart(s string) int {
	lead := s[0]
	var n int
	lo, hi := byte(0x80), byte(0xBF) // range of the second byte
	switch {
	case lead >= 0xC2 && lead <= 0xDF:
		n = 2
	case lead == 0xE0:
		n, lo = 3, 0xA0
	case lead >= 0xE1 && lead <= 0xEC || lead == 0xEE || lead == 0xEF:
		n = 3
	case lead == 0xED:
		n, hi = 3, 0x9F
	case lead == 0xF0:
		n, lo = 4, 0x90
	case lead >= 0xF1 && lead <= 0xF3:
		n = 4
	case lead == 0xF4:
		n, hi = 4, 0x8F
	default:
		return 1
	}
	k := 1
	for ; k < n && k < len(s); k++ {
		c := s[k]
		if k == 1 && (c < lo || c > hi) || k > 1 && (c < 0x80 || c > 0xBF) {
			break
		}
	}
	return k
}
