package pretok

import "unicode/utf8"

// Hand-written equivalents of the split patterns real tokenizer.json files
// use, recognised by their exact pattern string (Known). Each one
// is a Find function: the first match at or after byte offset from, as
// Oniguruma's search finds it (the leftmost start; there, the first
// alternative that matches, each quantifier greedy, backtracking only
// where the pattern forces it). They look at each rune a bounded number of
// times, so a text costs time linear in its length, where the regex
// engines of the reference cost far more on some inputs.

// Find returns the first match of a pattern in s at or after from, or
// (-1, -1) when there is none. A match is never empty.
type Find func(s string, from int) (start, end int)

// Exact pattern strings (as they read after JSON decoding).
const (
	// Llama3 is Llama 3's, which is tiktoken's cl100k_base.
	Llama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// Qwen2 is Qwen 2 and 3's: single digits.
	Qwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// GPT2 is the ByteLevel pre-tokenizer's own (use_regex true).
	GPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	// O200K is tiktoken's o200k_base (GPT-OSS).
	O200K = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// DeepSeek V3's three, applied one after another.
	Digits3     = `\p{N}{1,3}`
	DeepSeekCJK = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
	DeepSeek    = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
)

// known maps each pattern with a hand-written scanner to it.
var known = map[string]Find{
	Llama3:      tiling(tileGPT4Digits3),
	Qwen2:       tiling(tileGPT4Digits1),
	GPT2:        tiling(tileGPT2),
	O200K:       tiling(tileO200K),
	Digits3:     findDigits3,
	DeepSeekCJK: findDeepSeekCJK,
	DeepSeek:    findDeepSeek,
}

// tiler names a pattern that matches at every rune, so that a Find calls
// its scanner directly: a Scanner passed to a function value would escape
// to the heap, one allocation per word.
type tiler uint8

const (
	tileGPT4Digits3 tiler = iota
	tileGPT4Digits1
	tileGPT2
	tileO200K
)

// next returns the end of the match of k at i.
func (sc *Scanner) next(k tiler, i int) int {
	switch k {
	case tileGPT4Digits3:
		return sc.gpt4(i, 3)
	case tileGPT4Digits1:
		return sc.gpt4(i, 1)
	case tileGPT2:
		return sc.gpt2(i)
	default:
		return sc.o200k(i)
	}
}

// Known returns the hand-written Find of pattern, if it has one.
func Known(pattern string) (Find, bool) {
	f, ok := known[pattern]
	return f, ok
}

// Scanner reads one text (valid UTF-8) with the class table. It is not
// safe for concurrent use.
type Scanner struct {
	t *classTable
	s string
	// Steps counts the runes examined (bytes, on the ASCII fast paths): the
	// cost model tests bound.
	Steps int
}

// NewScanner returns a Scanner of s, which must be valid UTF-8.
func NewScanner(s string) *Scanner { return &Scanner{t: classes(), s: s} }

// CL100K returns the end of the match at i of tiktoken's cl100k_base
// pattern (Llama 3's); a match starts at every rune.
func (sc *Scanner) CL100K(i int) int { return sc.gpt4(i, 3) }

// O200K returns the end of the match at i of tiktoken's o200k_base
// pattern; a match starts at every rune.
func (sc *Scanner) O200K(i int) int { return sc.o200k(i) }

func (sc *Scanner) at(i int) (rune, int, class) {
	sc.Steps++
	return sc.t.at(sc.s, i)
}

// tiling returns the Find of a pattern that matches at every position.
func tiling(k tiler) Find {
	return func(s string, from int) (int, int) {
		if from >= len(s) {
			return -1, -1
		}
		sc := Scanner{t: classes(), s: s}
		return from, sc.next(k, from)
	}
}

// run returns the end of the run of runes from i that have a class in c.
func (sc *Scanner) run(i int, c class) int {
	ascii := &sc.t.pages[0]
	start := i
	for i < len(sc.s) {
		if b := sc.s[i]; b < utf8.RuneSelf {
			if ascii[b]&c == 0 {
				break
			}
			i++
			continue
		}
		r, w := utf8.DecodeRuneInString(sc.s[i:])
		if sc.t.of(r)&c == 0 {
			break
		}
		i += w
	}
	sc.Steps += i - start + 1
	return i
}

// runNot returns the end of the run of runes from i with no class in c.
func (sc *Scanner) runNot(i int, c class) int {
	for i < len(sc.s) {
		_, w, k := sc.at(i)
		if k&c != 0 {
			return i
		}
		i += w
	}
	return i
}

// upTo returns the end of up to n more runes of class c from i.
func (sc *Scanner) upTo(i int, c class, n int) int {
	for ; n > 0; n-- {
		_, w, k := sc.at(i)
		if w == 0 || k&c == 0 {
			break
		}
		i += w
	}
	return i
}

// newlines returns the end of [\r\n]* from i, or of [\r\n/]* with slash.
func (sc *Scanner) newlines(i int, slash bool) int {
	start := i
	for i < len(sc.s) && (sc.s[i] == '\r' || sc.s[i] == '\n' || slash && sc.s[i] == '/') {
		i++
	}
	sc.Steps += i - start
	return i
}

// contraction returns the end of 's|'t|'re|'ve|'m|'ll|'d at i, or -1.
// With fold, ASCII letters match either case; Oniguruma's (?i) in the
// reference does not fold U+017F (ſ) to s (TestOnigurumaClasses).
func (sc *Scanner) contraction(i int, fold bool) int {
	s := sc.s
	if i+1 >= len(s) || s[i] != '\'' {
		return -1
	}
	lower := func(b byte) byte {
		if fold && 'A' <= b && b <= 'Z' {
			return b + 'a' - 'A'
		}
		return b
	}
	switch lower(s[i+1]) {
	case 's', 't', 'm', 'd':
		return i + 2
	case 'r', 'v':
		if i+2 < len(s) && lower(s[i+2]) == 'e' {
			return i + 3
		}
	case 'l':
		if i+2 < len(s) && lower(s[i+2]) == 'l' {
			return i + 3
		}
	}
	return -1
}

// space returns the end of the whitespace alternatives at i, whose rune is
// in \s: with newlines, \s*[\r\n]+ (through the last \r or \n of the
// run); then \s+(?!\S) (the run at the end of the text, else the run
// without its last rune, which is left to start the next match); then \s+
// (a run of one rune).
func (sc *Scanner) space(i int, newlines bool) int {
	j, lastNL, last := i, -1, i
	for {
		r, w, c := sc.at(j)
		if w == 0 || c&clsWS == 0 {
			break
		}
		if r == '\r' || r == '\n' {
			lastNL = j
		}
		last = j
		j += w
	}
	switch {
	case newlines && lastNL >= 0:
		return lastNL + 1
	case j == len(sc.s) || last == i:
		return j
	}
	return last
}

// gpt4 returns the end of the match at i of Llama3 (digits 3) or
// Qwen2 (digits 1).
func (sc *Scanner) gpt4(i, digits int) int {
	r, w, c := sc.at(i)
	if r == '\'' {
		if e := sc.contraction(i, true); e >= 0 {
			return e
		}
	}
	switch {
	case c&clsL != 0: // [^\r\n\p{L}\p{N}]?\p{L}+ without its prefix
		return sc.run(i+w, clsL)
	case c&clsN != 0:
		return sc.upTo(i+w, clsN, digits-1)
	case r != '\r' && r != '\n':
		if _, w2, c2 := sc.at(i + w); c2&clsL != 0 {
			return sc.run(i+w+w2, clsL)
		}
	}
	j := i
	if r == ' ' {
		j++
	}
	if _, w2, c2 := sc.at(j); w2 > 0 && c2&(clsWS|clsL|clsN) == 0 {
		return sc.newlines(sc.runNot(j+w2, clsWS|clsL|clsN), false)
	}
	return sc.space(i, true)
}

// gpt2 returns the end of the match at i of GPT2.
func (sc *Scanner) gpt2(i int) int {
	r, w, c := sc.at(i)
	if r == '\'' {
		if e := sc.contraction(i, false); e >= 0 {
			return e
		}
	}
	j, wj, cj := i, w, c
	if r == ' ' {
		j = i + 1
		_, wj, cj = sc.at(j)
	}
	switch {
	case wj == 0:
	case cj&clsL != 0:
		return sc.run(j+wj, clsL)
	case cj&clsN != 0:
		return sc.run(j+wj, clsN)
	case cj&clsWS == 0:
		return sc.runNot(j+wj, clsWS|clsL|clsN)
	}
	return sc.space(i, false)
}

// o200k returns the end of the match at i of O200K.
func (sc *Scanner) o200k(i int) int {
	r, w, c := sc.at(i)
	prefix := r != '\r' && r != '\n' && c&(clsL|clsN) == 0
	if prefix {
		if e := sc.upperLower(i + w); e >= 0 {
			return e
		}
	}
	if e := sc.upperLower(i); e >= 0 {
		return e
	}
	if prefix {
		if _, _, c2 := sc.at(i + w); c2&clsUp != 0 {
			return sc.suffix(sc.run(sc.run(i+w, clsUp), clsLow))
		}
	}
	switch {
	case c&clsUp != 0:
		return sc.suffix(sc.run(sc.run(i, clsUp), clsLow))
	case c&clsN != 0:
		return sc.upTo(i+w, clsN, 2)
	}
	j := i
	if r == ' ' {
		j++
	}
	if _, w2, c2 := sc.at(j); w2 > 0 && c2&(clsWS|clsL|clsN) == 0 {
		return sc.newlines(sc.runNot(j+w2, clsWS|clsL|clsN), true)
	}
	return sc.space(i, true)
}

// upperLower returns the end of [Up]*[Low]+ plus an optional contraction
// at i, or -1. Backtracking gives the greedy [Up]* back rune by rune until
// [Low]+ can start: right after the run of Up if a Low rune is there, else
// at the last rune of the run that is also Low (Lm, Lo and M are both).
func (sc *Scanner) upperLower(i int) int {
	j, lastLow := i, -1
	for {
		_, w, c := sc.at(j)
		if w == 0 || c&clsUp == 0 {
			if w > 0 && c&clsLow != 0 {
				return sc.suffix(sc.run(j, clsLow))
			}
			break
		}
		if c&clsLow != 0 {
			lastLow = j
		}
		j += w
	}
	if lastLow < 0 {
		return -1
	}
	return sc.suffix(sc.run(lastLow, clsLow))
}

// suffix extends a match ending at e by an optional (?i) contraction.
func (sc *Scanner) suffix(e int) int {
	if c := sc.contraction(e, true); c >= 0 {
		return c
	}
	return e
}

// findDigits3 finds \p{N}{1,3}.
func findDigits3(s string, from int) (int, int) {
	sc := Scanner{t: classes(), s: s}
	for i := from; i < len(s); {
		_, w, c := sc.at(i)
		if c&clsN != 0 {
			return i, sc.upTo(i+w, clsN, 2)
		}
		i += w
	}
	return -1, -1
}

// isDeepSeekCJK reports whether r is in [\x{4e00}-\x{9fa5}\x{3040}-\x{309f}\x{30a0}-\x{30ff}].
func isDeepSeekCJK(r rune) bool {
	return 0x4e00 <= r && r <= 0x9fa5 || 0x3040 <= r && r <= 0x30ff
}

// findDeepSeekCJK finds DeepSeekCJK.
func findDeepSeekCJK(s string, from int) (int, int) {
	sc := Scanner{t: classes(), s: s}
	for i := from; i < len(s); {
		r, w, _ := sc.at(i)
		if isDeepSeekCJK(r) {
			j := i + w
			for {
				r2, w2, _ := sc.at(j)
				if w2 == 0 || !isDeepSeekCJK(r2) {
					return i, j
				}
				j += w2
			}
		}
		i += w
	}
	return -1, -1
}

// isASCIIPunct reports whether b is in [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~].
func isASCIIPunct(r rune) bool {
	return '!' <= r && r <= '/' || ':' <= r && r <= '@' || '[' <= r && r <= '`' || '{' <= r && r <= '~'
}

func isASCIILetter(b byte) bool { return 'a' <= b|0x20 && b|0x20 <= 'z' }

// findDeepSeek finds DeepSeek, which may match nowhere at a position.
func findDeepSeek(s string, from int) (int, int) {
	sc := Scanner{t: classes(), s: s}
	for i := from; i < len(s); {
		if e := sc.deepseek(i); e >= 0 {
			return i, e
		}
		_, w, _ := sc.at(i)
		i += w
	}
	return -1, -1
}

// deepseek returns the end of the match of DeepSeek at i, or -1.
func (sc *Scanner) deepseek(i int) int {
	r, w, c := sc.at(i)
	if isASCIIPunct(r) && i+1 < len(sc.s) && isASCIILetter(sc.s[i+1]) {
		j := i + 2
		for j < len(sc.s) && isASCIILetter(sc.s[j]) {
			j++
		}
		return j
	}
	// [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+: a mark as the optional first
	// rune or as the first of the run ends in the same place.
	if c&(clsL|clsM) != 0 {
		return sc.run(i+w, clsL|clsM)
	}
	if r != '\r' && r != '\n' && c&(clsP|clsS) == 0 {
		if _, w2, c2 := sc.at(i + w); c2&(clsL|clsM) != 0 {
			return sc.run(i+w+w2, clsL|clsM)
		}
	}
	j := i
	if r == ' ' {
		j++
	}
	if _, w2, c2 := sc.at(j); c2&(clsP|clsS) != 0 {
		return sc.newlines(sc.run(j+w2, clsP|clsS), false)
	}
	if c&clsWS != 0 {
		return sc.space(i, true)
	}
	return -1
}
