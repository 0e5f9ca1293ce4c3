package pretok

import (
	"testing"
	"unicode"
)

// TestClassTableMatchesUnicode checks every rune's classes against the
// unicode package, as regexp2 and Oniguruma evaluate \p{..} and \s.
func TestClassTableMatchesUnicode(t *testing.T) {
	cls := classes()
	in := func(r rune, tabs ...*unicode.RangeTable) bool { return unicode.In(r, tabs...) }
	for r := rune(0); r <= unicode.MaxRune; r++ {
		var want class
		if in(r, unicode.L) {
			want |= clsL
		}
		if in(r, unicode.N) {
			want |= clsN
		}
		if unicode.IsSpace(r) {
			want |= clsWS
		}
		if in(r, unicode.P) {
			want |= clsP
		}
		if in(r, unicode.S) {
			want |= clsS
		}
		if in(r, unicode.M) {
			want |= clsM
		}
		if in(r, unicode.Lu, unicode.Lt, unicode.Lm, unicode.Lo, unicode.M) {
			want |= clsUp
		}
		if in(r, unicode.Ll, unicode.Lm, unicode.Lo, unicode.M) {
			want |= clsLow
		}
		if got := cls.of(r); got != want {
			t.Fatalf("rune %U: classes %08b, want %08b", r, got, want)
		}
	}
}
