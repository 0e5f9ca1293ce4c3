package chattemplate

import (
	"fmt"
	"strings"
)

// A small lexer over a template's tags, for what duet must know about a
// template before rendering it: which constructs it uses (supported.go),
// its content format (format.go), and where its tojson filters are
// (rewriteFilters). It does not parse; ardanlabs/jinja does that.

type tagKind int

const (
	tagExpr tagKind = iota // {{ ... }}
	tagStmt                // {% ... %}
)

// tag is one {{ }} or {% %} of a template, comments and raw blocks left out.
type tag struct {
	kind tagKind
	line int   // 1-based line of the tag's opening
	toks []tok // the code between the delimiters
}

type tokKind int

const (
	tokName tokKind = iota
	tokString
	tokNumber
	tokOp
)

type tok struct {
	kind tokKind
	text string // names and operators as written; strings unquoted
	pos  int    // byte offset in the template source
}

func (t tok) is(kind tokKind, text string) bool { return t.kind == kind && t.text == text }

// scanTags splits a template into its tags.
func scanTags(src string) ([]tag, error) {
	var tags []tag
	line := 1
	for i := 0; i < len(src); {
		j := strings.Index(src[i:], "{")
		if j < 0 {
			break
		}
		line += strings.Count(src[i:i+j], "\n")
		i += j
		if i+1 >= len(src) {
			break
		}
		var closer string
		var kind tagKind
		switch src[i+1] {
		case '{':
			closer, kind = "}}", tagExpr
		case '%':
			closer, kind = "%}", tagStmt
		case '#':
			end := strings.Index(src[i+2:], "#}")
			if end < 0 {
				return nil, fmt.Errorf("line %d: unclosed comment", line)
			}
			line += strings.Count(src[i:i+2+end+2], "\n")
			i += 2 + end + 2
			continue
		default:
			i++
			continue
		}
		start := i + 2
		toks, end, err := lexCode(src, start, closer)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		t := tag{kind: kind, line: line, toks: toks}
		line += strings.Count(src[i:end], "\n")
		i = end
		tags = append(tags, t)
		if kind == tagStmt && len(toks) > 0 && toks[0].is(tokName, "raw") {
			k := strings.Index(src[i:], "endraw")
			if k < 0 {
				return nil, fmt.Errorf("line %d: unclosed raw block", t.line)
			}
			k = i + k
			open := strings.LastIndex(src[i:k], "{%")
			if open < 0 {
				return nil, fmt.Errorf("line %d: unclosed raw block", t.line)
			}
			line += strings.Count(src[i:i+open], "\n")
			i += open
		}
	}
	return tags, nil
}

// lexCode tokenizes the code of a tag from start up to its closer, and
// returns the tokens and the offset just past the closer.
func lexCode(src string, start int, closer string) ([]tok, int, error) {
	var toks []tok
	i := start
	if i < len(src) && (src[i] == '-' || src[i] == '+') {
		i++
	}
	for i < len(src) {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case (c == '-' || c == '+') && strings.HasPrefix(src[i+1:], closer):
			return toks, i + 1 + len(closer), nil
		case strings.HasPrefix(src[i:], closer):
			return toks, i + len(closer), nil
		case c == '\'' || c == '"':
			j := i + 1
			var b strings.Builder
			for j < len(src) && src[j] != c {
				if src[j] == '\\' && j+1 < len(src) {
					j++
				}
				b.WriteByte(src[j])
				j++
			}
			if j >= len(src) {
				return nil, 0, fmt.Errorf("unclosed string")
			}
			toks = append(toks, tok{kind: tokString, text: b.String(), pos: i})
			i = j + 1
		case c == '_' || isLetter(c):
			j := i
			for j < len(src) && (src[j] == '_' || isLetter(src[j]) || isDigit(src[j])) {
				j++
			}
			toks = append(toks, tok{kind: tokName, text: src[i:j], pos: i})
			i = j
		case isDigit(c):
			j := i
			for j < len(src) && (isDigit(src[j]) || src[j] == '.' || src[j] == '_' || src[j] == 'e' || src[j] == 'E') {
				j++
			}
			toks = append(toks, tok{kind: tokNumber, text: src[i:j], pos: i})
			i = j
		default:
			n := 1
			for _, op := range [...]string{"**", "//", "==", "!=", "<=", ">="} {
				if strings.HasPrefix(src[i:], op) {
					n = 2
					break
				}
			}
			toks = append(toks, tok{kind: tokOp, text: src[i : i+n], pos: i})
			i += n
		}
	}
	return nil, 0, fmt.Errorf("unclosed tag, want %q", closer)
}

func isLetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }
func isDigit(c byte) bool  { return c >= '0' && c <= '9' }

// filterNames returns the positions of the filter names in a tag: the
// names right after a "|", and the name of a {% filter %} block.
func filterNames(t tag) []int {
	var at []int
	for i := 0; i+1 < len(t.toks); i++ {
		if t.toks[i].is(tokOp, "|") && t.toks[i+1].kind == tokName {
			at = append(at, i+1)
		}
	}
	if t.kind == tagStmt && len(t.toks) > 1 && t.toks[0].is(tokName, "filter") && t.toks[1].kind == tokName {
		at = append(at, 1)
	}
	return at
}

// rewriteFilters renames the filters in renames wherever a tag applies
// them, leaving text, strings and comments alone.
func rewriteFilters(src string, tags []tag, renames map[string]string) string {
	type edit struct {
		pos      int
		old, new string
	}
	var edits []edit
	for _, t := range tags {
		for _, i := range filterNames(t) {
			if to, ok := renames[t.toks[i].text]; ok {
				edits = append(edits, edit{t.toks[i].pos, t.toks[i].text, to})
			}
		}
	}
	if len(edits) == 0 {
		return src
	}
	var b strings.Builder
	last := 0
	for _, e := range edits {
		b.WriteString(src[last:e.pos])
		b.WriteString(e.new)
		last = e.pos + len(e.old)
	}
	b.WriteString(src[last:])
	return b.String()
}
