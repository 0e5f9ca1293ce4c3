package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// The pre-tokenizers split text into the pieces BPE encodes one by one.
// They are hand-written equivalents of tiktoken's split patterns as
// tiktoken-go v0.1.8 compiles them with regexp2 (a backtracking engine, so
// the first alternative that matches wins and quantifiers are greedy):
//
//	cl100k_base: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//	o200k_base:  [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	            |[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	            |\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// Every rune starts a match of one alternative and no alternative matches
// the empty string, so the matches tile the text: each piece starts where
// the previous one ended. The regex took most of tiktoken-go's time on
// prose. This scanner looks at each rune a bounded number of times (a run
// of letters or spaces may be scanned again after a match gave part of it
// back), so it is linear in the text. TestPiecesMatchTiktokenGo and
// FuzzEncodeMatchesTiktokenGo compare its pieces with the regex's.

// scanner finds the pieces of one text. It is not goroutine-safe.
type scanner struct {
	s   string // valid UTF-8
	cls *classTable
	// steps counts runes examined: the cost model the tests bound.
	steps int
}

// at returns the rune at byte offset i, its width and its classes; width
// 0 and rune -1 past the end.
func (sc *scanner) at(i int) (rune, int, uint8) {
	if i >= len(sc.s) {
		return -1, 0, 0
	}
	sc.steps++
	if b := sc.s[i]; b < utf8.RuneSelf {
		return rune(b), 1, sc.cls.of(rune(b))
	}
	r, w := utf8.DecodeRuneInString(sc.s[i:])
	return r, w, sc.cls.of(r)
}

// run returns the end of the run of runes from i that have a class in mask.
func (sc *scanner) run(i int, mask uint8) int {
	for {
		_, w, c := sc.at(i)
		if w == 0 || c&mask == 0 {
			return i
		}
		i += w
	}
}

// others returns the end of the run [^\s\p{L}\p{N}]+ from i.
func (sc *scanner) others(i int) int {
	for {
		_, w, c := sc.at(i)
		if w == 0 || c&(clsSpace|clsLetter|clsNumber) != 0 {
			return i
		}
		i += w
	}
}

// isOther reports whether the rune at i is in [^\s\p{L}\p{N}].
func (sc *scanner) isOther(i int) (int, bool) {
	_, w, c := sc.at(i)
	return w, w > 0 && c&(clsSpace|clsLetter|clsNumber) == 0
}

// digits returns the end of \p{N}{1,3} whose first rune ends at i.
func (sc *scanner) digits(i int) int {
	for k := 1; k < 3; k++ {
		_, w, c := sc.at(i)
		if w == 0 || c&clsNumber == 0 {
			break
		}
		i += w
	}
	return i
}

// newlines returns the end of [\r\n]* (with slash, [\r\n/]*) from i.
func (sc *scanner) newlines(i int, slash bool) int {
	for i < len(sc.s) && (sc.s[i] == '\r' || sc.s[i] == '\n' || slash && sc.s[i] == '/') {
		sc.steps++
		i++
	}
	return i
}

// contraction returns the end of (?i:'s|'t|'re|'ve|'m|'ll|'d) at i, or -1.
// Like regexp2 it lowercases each input rune with unicode.ToLower.
func (sc *scanner) contraction(i int) int {
	if i >= len(sc.s) || sc.s[i] != '\'' {
		return -1
	}
	r1, w1, _ := sc.at(i + 1)
	switch unicode.ToLower(r1) {
	case 's', 't', 'm', 'd':
		return i + 1 + w1
	case 'r', 'v':
		if r2, w2, _ := sc.at(i + 1 + w1); unicode.ToLower(r2) == 'e' {
			return i + 1 + w1 + w2
		}
	case 'l':
		if r2, w2, _ := sc.at(i + 1 + w1); unicode.ToLower(r2) == 'l' {
			return i + 1 + w1 + w2
		}
	}
	return -1
}

// suffix extends a word ending at e by an optional contraction.
func (sc *scanner) suffix(e int) int {
	if c := sc.contraction(e); c >= 0 {
		return c
	}
	return e
}

// whitespace returns the end of the piece at i, whose rune is in \s:
//
//	\s*[\r\n]+   through the last \r or \n of the whitespace run, else
//	\s+(?!\S)    the whole run at the end of the text, else all of it but
//	             its last rune, which joins the word after it, else
//	\s+          the single rune.
func (sc *scanner) whitespace(i int) int {
	j, lastNL, last := i, -1, i
	for {
		r, w, c := sc.at(j)
		if w == 0 || c&clsSpace == 0 {
			break
		}
		if r == '\r' || r == '\n' {
			lastNL = j
		}
		last = j
		j += w
	}
	switch {
	case lastNL >= 0:
		return lastNL + 1
	case j == len(sc.s):
		return j
	case last > i:
		return last
	}
	return j
}

// nextCL100K returns the end of the cl100k_base piece that starts at i.
func (sc *scanner) nextCL100K(i int) int {
	r, w, c := sc.at(i)
	if r == '\'' {
		if e := sc.contraction(i); e >= 0 {
			return e
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c&clsLetter != 0 {
		return sc.run(i+w, clsLetter)
	}
	if c&clsNumber != 0 { // \p{N}{1,3}: a number cannot start any earlier alternative
		return sc.digits(i + w)
	}
	if r != '\r' && r != '\n' {
		if _, w2, c2 := sc.at(i + w); c2&clsLetter != 0 {
			return sc.run(i+w+w2, clsLetter)
		}
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	j := i
	if r == ' ' {
		j++
	}
	if w2, ok := sc.isOther(j); ok {
		return sc.newlines(sc.others(j+w2), false)
	}
	return sc.whitespace(i)
}

// nextO200K returns the end of the o200k_base piece that starts at i.
func (sc *scanner) nextO200K(i int) int {
	r, w, c := sc.at(i)
	prefix := r != '\r' && r != '\n' && c&(clsLetter|clsNumber) == 0
	// [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:...)?
	if prefix {
		if e := sc.upperLower(i + w); e >= 0 {
			return e
		}
	}
	if e := sc.upperLower(i); e >= 0 {
		return e
	}
	// [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:...)?
	if prefix {
		if _, _, c2 := sc.at(i + w); c2&clsUpper != 0 {
			return sc.suffix(sc.run(sc.run(i+w, clsUpper), clsLower))
		}
	}
	if c&clsUpper != 0 {
		return sc.suffix(sc.run(sc.run(i, clsUpper), clsLower))
	}
	if c&clsNumber != 0 {
		return sc.digits(i + w)
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n/]*'
	j := i
	if r == ' ' {
		j++
	}
	if w2, ok := sc.isOther(j); ok {
		return sc.newlines(sc.others(j+w2), true)
	}
	return sc.whitespace(i)
}

// upperLower returns the end of U*W+C? at a (U, W the o200k upper and
// lower classes, C the contractions), or -1. Backtracking gives U* back
// rune by rune until W+ can start, so W+ starts after the whole U run if
// the rune there is in W, else at the last rune of the run that is also in
// W (Lm, Lo and M are in both).
func (sc *scanner) upperLower(a int) int {
	j, lastW := a, -1
	var (
		w int
		c uint8
	)
	for {
		_, w, c = sc.at(j)
		if w == 0 || c&clsUpper == 0 {
			break
		}
		if c&clsLower != 0 {
			lastW = j
		}
		j += w
	}
	start := j
	if w == 0 || c&clsLower == 0 {
		if lastW < 0 {
			return -1
		}
		start = lastW
	}
	return sc.suffix(sc.run(start, clsLower))
}
