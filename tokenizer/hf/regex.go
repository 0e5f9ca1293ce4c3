package hf

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"

	"github.com/duet-serve/duet/tokenizer/pretok"
)

// Patterns without a hand-written scanner are translated from Oniguruma's
// syntax (what the Rust tokenizers compile them with) to Go's regexp,
// which is exact only for a subset: Go's engine finds the same leftmost
// match as a backtracking one when there is no lookaround, no
// backreference and no possessive or atomic group, but its \s, \d and \w
// are ASCII and its (?i) folds more than Oniguruma's (U+017F to s). The
// translator therefore accepts literals, escaped punctuation, \r \n \t \f
// \v \xHH \x{H..} \uHHHH, \s and \S (rewritten to the White_Space set),
// \d and \D (\p{Nd}), \p{..} and \P{..} (Go must know the name), character
// classes without nesting, intersection or POSIX brackets, groups (made
// non-capturing), and the quantifiers ? * + {n} {n,} {n,m} and their lazy
// forms; and the idiom \s+(?!\S)|\s+ as the last alternatives, which Go
// cannot express: its last alternative is captured and a match of it that
// is followed by more text gives back its last rune, as backtracking into
// the lookahead would. Anything else is an error naming the construct, as
// is a pattern that matches the empty string.

// spaceIdiom is the trailing idiom the translator rewrites.
const spaceIdiom = `|\s+(?!\S)|\s+`

// wsRanges is the White_Space property as the inside of a Go class.
var wsRanges = func() string {
	var b strings.Builder
	pretok.ForEachRune(unicode.White_Space, func(r rune) { fmt.Fprintf(&b, `\x{%x}`, r) })
	return b.String()
}()

// translatePattern returns the Go equivalent of an Oniguruma pattern, and
// whether its last alternative is the captured \s+ of spaceIdiom.
func translatePattern(pat string) (string, bool, error) {
	idiom := false
	if p, ok := strings.CutSuffix(pat, spaceIdiom); ok && p != "" {
		pat, idiom = p, true
	}
	var b strings.Builder
	inClass := false
	fail := func(i int, what string) (string, bool, error) {
		return "", false, fmt.Errorf("pattern %q: %s at offset %d is not supported", pat, what, i)
	}
	for i := 0; i < len(pat); i++ {
		c := pat[i]
		switch {
		case c == '\\':
			if i+1 >= len(pat) {
				return fail(i, "a trailing backslash")
			}
			i++
			e := pat[i]
			switch {
			case e == 's':
				if inClass {
					b.WriteString(wsRanges)
				} else {
					b.WriteString("[" + wsRanges + "]")
				}
			case e == 'S' && !inClass:
				b.WriteString("[^" + wsRanges + "]")
			case e == 'd':
				b.WriteString(`\p{Nd}`)
			case e == 'D' && !inClass:
				b.WriteString(`\P{Nd}`)
			case e == 'p' || e == 'P':
				j := strings.IndexByte(pat[i:], '}')
				if i+1 >= len(pat) || pat[i+1] != '{' || j < 0 {
					return fail(i-1, `\p without {name}`)
				}
				b.WriteString(`\` + pat[i:i+j+1])
				i += j
			case e == 'u':
				if i+4 >= len(pat) {
					return fail(i-1, `a short \u escape`)
				}
				b.WriteString(`\x{` + pat[i+1:i+5] + `}`)
				i += 4
			case e == 'x' || strings.IndexByte("rntfv", e) >= 0:
				b.WriteString(`\` + string(e))
			case e < 0x80 && (unicode.IsPunct(rune(e)) || unicode.IsSymbol(rune(e)) || e == ' '):
				b.WriteString(`\` + string(e))
			default:
				return fail(i-1, `the escape \`+string(e))
			}
		case inClass:
			switch {
			case c == '[':
				return fail(i, "a nested class or POSIX bracket")
			case c == '&' && i+1 < len(pat) && pat[i+1] == '&':
				return fail(i, "class intersection")
			case c == ']':
				inClass = false
			}
			b.WriteByte(c)
		case c == '[':
			inClass = true
			b.WriteByte(c)
			if i+1 < len(pat) && pat[i+1] == '^' {
				b.WriteByte('^')
				i++
			}
			if i+1 < len(pat) && pat[i+1] == ']' { // a leading ] is a literal
				b.WriteString(`\]`)
				i++
			}
		case c == '(':
			switch {
			case strings.HasPrefix(pat[i:], "(?:"):
				b.WriteString("(?:")
				i += 2
			case i+1 < len(pat) && pat[i+1] == '?':
				return fail(i, "the group "+pat[i:min(i+3, len(pat))])
			default:
				b.WriteString("(?:")
			}
		case c == '^' || c == '$':
			return fail(i, "the anchor "+string(c))
		case (c == '+' || c == '*' || c == '?' || c == '}') && i+1 < len(pat) && pat[i+1] == '+':
			return fail(i, "a possessive quantifier")
		case c == '{' && i+1 < len(pat) && pat[i+1] == ',':
			return fail(i, "the quantifier {,n}")
		default:
			b.WriteByte(c)
		}
	}
	if inClass {
		return fail(len(pat), "an unterminated class")
	}
	out := b.String()
	if idiom {
		out = "(?:" + out + ")|([" + wsRanges + "]+)"
	}
	return out, idiom, nil
}

// regexFind compiles pat (see translatePattern) into a find.
func regexFind(pat string) (find, error) {
	goPat, idiom, err := translatePattern(pat)
	if err != nil {
		return nil, err
	}
	re, err := regexp.Compile(goPat)
	if err != nil {
		return nil, fmt.Errorf("pattern %q: %w", pat, err)
	}
	if re.MatchString("") {
		return nil, fmt.Errorf("pattern %q matches the empty string", pat)
	}
	return func(s string, from int) (int, int) {
		m := re.FindStringSubmatchIndex(s[from:])
		if m == nil {
			return -1, -1
		}
		start, end := from+m[0], from+m[1]
		if idiom && m[2] >= 0 && end < len(s) {
			// \s+(?!\S) gives back the last rune when more follows;
			// a single rune is \s+.
			last := end - 1
			for last > start && !isRuneStart(s[last]) {
				last--
			}
			if last > start {
				end = last
			}
		}
		return start, end
	}, nil
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// literalFind returns the find of a literal string (a String pattern).
func literalFind(lit string) find {
	return func(s string, from int) (int, int) {
		k := strings.Index(s[from:], lit)
		if k < 0 {
			return -1, -1
		}
		return from + k, from + k + len(lit)
	}
}
