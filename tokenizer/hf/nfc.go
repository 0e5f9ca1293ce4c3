package hf

import (
	"slices"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// x/text's norm follows the Stream-Safe Text Format: after 30 non-starters
// in a row it inserts U+034F and normalizes each side on its own. The
// Rust tokenizers (unicode-normalization-alignments) do not, so a run of
// many combining marks (Zalgo text) is normalized here, by decomposing
// the run and its starter rune by rune, ordering the marks by combining
// class and composing them into the starter where a mark is not blocked,
// the pairwise compositions taken from x/text. Other text goes to x/text
// as it is.

// longRun is the length of a run of non-starters from which a piece is
// normalized by normalizeLongRuns (x/text breaks at 30; a rune may
// decompose into several non-starters).
const longRun = 12

// unicodeNormalizer returns the normalizer for form f.
func unicodeNormalizer(f norm.Form) normalizer {
	return func(s string) string {
		if f.IsNormalString(s) {
			return s
		}
		if !hasLongRun(s) {
			return f.String(s)
		}
		return normalizeLongRuns(f, s)
	}
}

func ccc(r rune) uint8 {
	var buf [4]byte
	n := utf8.EncodeRune(buf[:], r)
	p := norm.NFD.Properties(buf[:n])
	return max(p.CCC(), p.LeadCCC())
}

// hasLongRun reports whether s has longRun non-starters in a row.
func hasLongRun(s string) bool {
	n := 0
	for _, r := range s {
		if r < 0x300 || ccc(r) == 0 {
			n = 0
			continue
		}
		if n++; n >= longRun {
			return true
		}
	}
	return false
}

// normalizeLongRuns normalizes s, each starter with a long run of
// non-starters after it by composeRun, the text between with x/text.
func normalizeLongRuns(f norm.Form, s string) string {
	var b strings.Builder
	done := 0 // start of the text not yet written
	lastStarter, run := 0, 0
	for i, r := range s {
		if r < 0x300 || ccc(r) == 0 {
			if run >= longRun {
				b.WriteString(f.String(s[done:lastStarter]))
				b.WriteString(composeRun(f, s[lastStarter:i]))
				done = i
			}
			lastStarter, run = i, 0
			continue
		}
		run++
	}
	if run >= longRun {
		b.WriteString(f.String(s[done:lastStarter]))
		b.WriteString(composeRun(f, s[lastStarter:]))
	} else {
		b.WriteString(f.String(s[done:]))
	}
	return b.String()
}

// composeRun normalizes one starter (or none) and the non-starters after it.
func composeRun(f norm.Form, s string) string {
	decompose := norm.NFD
	if f == norm.NFKC || f == norm.NFKD {
		decompose = norm.NFKD
	}
	var rs []rune
	for _, r := range s {
		rs = append(rs, []rune(decompose.String(string(r)))...)
	}
	first := 0
	if len(rs) > 0 && ccc(rs[0]) == 0 {
		first = 1
	}
	marks := rs[first:]
	slices.SortStableFunc(marks, func(a, b rune) int { return int(ccc(a)) - int(ccc(b)) })
	if f == norm.NFD || f == norm.NFKD || first == 0 {
		return string(rs)
	}
	cur := rs[0]
	var kept []rune
	last := -1 // class of the last mark kept, which blocks marks of its class
	for _, m := range marks {
		c := int(ccc(m))
		if c != last {
			if comp := []rune(norm.NFC.String(string(cur) + string(m))); len(comp) == 1 {
				cur = comp[0]
				continue
			}
		}
		kept = append(kept, m)
		last = c
	}
	return string(cur) + string(kept)
}
