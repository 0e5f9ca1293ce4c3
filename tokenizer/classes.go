package tokenizer

import (
	"sync"
	"unicode"
)

// Rune classes the pre-tokenizers test, one bit each. They are the
// character classes of tiktoken's split patterns with the meaning
// regexp2 gives them (tiktoken-go compiles the patterns with
// github.com/dlclark/regexp2, which looks categories up in Go's unicode
// tables and defines \s as unicode.IsSpace).
const (
	clsLetter uint8 = 1 << iota // \p{L}
	clsNumber                   // \p{N}
	clsSpace                    // \s
	clsUpper                    // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] (o200k)
	clsLower                    // [\p{Ll}\p{Lm}\p{Lo}\p{M}] (o200k)
)

// classTable maps every rune to its class bits in two levels: blocks of
// 256 runes, identical blocks shared (about 200 distinct blocks, ~60 KB).
// It is immutable once built.
type classTable struct {
	index  [(unicode.MaxRune + 1) >> 8]uint16
	blocks [][256]uint8
}

// of returns the class bits of r; r must be in [0, unicode.MaxRune].
func (t *classTable) of(r rune) uint8 { return t.blocks[t.index[r>>8]][r&0xff] }

// runeClasses is the shared class table, built on first use (~2 ms).
var runeClasses = sync.OnceValue(buildClassTable)

func buildClassTable() *classTable {
	flat := make([]uint8, unicode.MaxRune+1)
	set := func(tab *unicode.RangeTable, bit uint8) {
		for _, r := range tab.R16 {
			for c := rune(r.Lo); c <= rune(r.Hi); c += rune(r.Stride) {
				flat[c] |= bit
			}
		}
		for _, r := range tab.R32 {
			for c := rune(r.Lo); c <= rune(r.Hi); c += rune(r.Stride) {
				flat[c] |= bit
			}
		}
	}
	set(unicode.L, clsLetter)
	set(unicode.N, clsNumber)
	set(unicode.White_Space, clsSpace)
	for _, tab := range []*unicode.RangeTable{unicode.Lu, unicode.Lt, unicode.Lm, unicode.Lo, unicode.M} {
		set(tab, clsUpper)
	}
	for _, tab := range []*unicode.RangeTable{unicode.Ll, unicode.Lm, unicode.Lo, unicode.M} {
		set(tab, clsLower)
	}
	// unicode.IsSpace is White_Space outside Latin-1 and these inside it
	// (the same set today; kept explicit so the table follows IsSpace).
	for c := rune(0); c <= unicode.MaxLatin1; c++ {
		flat[c] &^= clsSpace
		if unicode.IsSpace(c) {
			flat[c] |= clsSpace
		}
	}

	t := &classTable{}
	seen := map[[256]uint8]uint16{}
	for b := range t.index {
		var blk [256]uint8
		copy(blk[:], flat[b<<8:])
		i, ok := seen[blk]
		if !ok {
			i = uint16(len(t.blocks))
			t.blocks = append(t.blocks, blk)
			seen[blk] = i
		}
		t.index[b] = i
	}
	return t
}
