package pretok

import (
	"sync"
	"unicode"
	"unicode/utf8"
)

// class is a set of the character classes the split patterns test, one
// bit each, with the meaning Oniguruma gives them in the Rust tokenizers
// (onig 6.x, UTF-8): Unicode general categories, and \s the White_Space
// property, as the Rust tokenizers' reference tests and tiktoken-go's
// regexp2 (\s is unicode.IsSpace, the same set) both confirm.
type class uint8

const (
	clsL   class = 1 << iota // \p{L}
	clsN                     // \p{N}
	clsWS                    // \s
	clsP                     // \p{P}
	clsS                     // \p{S}
	clsM                     // \p{M}
	clsUp                    // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] (o200k)
	clsLow                   // [\p{Ll}\p{Lm}\p{Lo}\p{M}] (o200k)
)

// classPage is the number of runes one page of the class table covers.
const classPage = 128

// classTable maps a rune to its classes through a page index; pages with
// the same contents are stored once (a few hundred distinct pages). It is
// immutable once built.
type classTable struct {
	page  []uint16 // rune/classPage -> page number
	pages [][classPage]class
}

var classes = sync.OnceValue(buildClasses)

func buildClasses() *classTable {
	cats := []struct {
		tabs []*unicode.RangeTable
		c    class
	}{
		{[]*unicode.RangeTable{unicode.L}, clsL},
		{[]*unicode.RangeTable{unicode.N}, clsN},
		{[]*unicode.RangeTable{unicode.White_Space}, clsWS},
		{[]*unicode.RangeTable{unicode.P}, clsP},
		{[]*unicode.RangeTable{unicode.S}, clsS},
		{[]*unicode.RangeTable{unicode.M}, clsM},
		{[]*unicode.RangeTable{unicode.Lu, unicode.Lt, unicode.Lm, unicode.Lo, unicode.M}, clsUp},
		{[]*unicode.RangeTable{unicode.Ll, unicode.Lm, unicode.Lo, unicode.M}, clsLow},
	}
	flat := make([]class, unicode.MaxRune+1)
	for _, cat := range cats {
		for _, tab := range cat.tabs {
			ForEachRune(tab, func(r rune) { flat[r] |= cat.c })
		}
	}
	t := &classTable{page: make([]uint16, (unicode.MaxRune+1)/classPage)}
	seen := map[[classPage]class]uint16{}
	for p := range t.page {
		pg := [classPage]class(flat[p*classPage:])
		n, ok := seen[pg]
		if !ok {
			n = uint16(len(t.pages))
			t.pages = append(t.pages, pg)
			seen[pg] = n
		}
		t.page[p] = n
	}
	return t
}

// of returns the classes of r, which must be a valid rune.
func (t *classTable) of(r rune) class {
	return t.pages[t.page[r/classPage]][r%classPage]
}

// at returns the rune at byte offset i of s (valid UTF-8), its width and
// its classes; width 0 at the end of s.
func (t *classTable) at(s string, i int) (rune, int, class) {
	if i >= len(s) {
		return -1, 0, 0
	}
	if b := s[i]; b < utf8.RuneSelf {
		return rune(b), 1, t.pages[0][b]
	}
	r, w := utf8.DecodeRuneInString(s[i:])
	return r, w, t.of(r)
}

// ForEachRune calls f for every rune in tab.
func ForEachRune(tab *unicode.RangeTable, f func(rune)) {
	for _, r := range tab.R16 {
		for c := rune(r.Lo); c <= rune(r.Hi); c += rune(r.Stride) {
			f(c)
		}
	}
	for _, r := range tab.R32 {
		for c := rune(r.Lo); c <= rune(r.Hi); c += rune(r.Stride) {
			f(c)
		}
	}
}

// IsNumber reports whether r is in \p{N}.
func IsNumber(r rune) bool { return classes().of(r)&clsN != 0 }
