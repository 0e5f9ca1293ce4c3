package hf

import (
	"strings"
	"unicode/utf8"

	"github.com/duet-serve/duet/tokenizer/pretok"
)

// A pre-tokenizer splits normalized text into the words the model merges
// one by one (pre_tokenizers/, tokenizers v0.22.2). Duet's pipeline is a
// list of steps; a step splits each piece it gets and hands every
// non-empty part to the next step, the last one to the model, so no
// intermediate list is built.

// piece is a stretch of normalized text; atStart reports whether it begins
// at offset 0 of the original text (Metaspace's prepend_scheme "first").
type piece struct {
	s       string
	atStart bool
}

// step is one pre-tokenizer of the pipeline.
type step interface {
	// split calls e.pretokenize(k+1, part) for each part of p in order.
	split(e *encoder, k int, p piece)
}

// behavior is a SplitDelimiterBehavior: what becomes of the matches.
type behavior int

const (
	isolated           behavior = iota // matches are pieces of their own
	removed                            // matches are dropped
	mergedWithPrevious                 // a match joins the piece before it
	mergedWithNext                     // a match joins the piece after it
	contiguous                         // consecutive matches form one piece
)

var behaviors = map[string]behavior{
	"Isolated": isolated, "Removed": removed, "MergedWithPrevious": mergedWithPrevious,
	"MergedWithNext": mergedWithNext, "Contiguous": contiguous,
}

// splitStep is Split, and the splitting part of Digits and Metaspace.
type splitStep struct {
	find     find
	behavior behavior
	invert   bool
}

// span is a part of a piece and whether it is a match of the pattern.
type span struct {
	start, end int
	match      bool
}

func (st *splitStep) split(e *encoder, k int, p piece) {
	s := p.s
	part := func(start, end int) {
		if start < end {
			e.pretokenize(k+1, piece{s[start:end], p.atStart && start == 0})
		}
	}
	if st.behavior == isolated || st.behavior == removed && !st.invert {
		done := 0
		for done < len(s) {
			start, end := st.find(s, done)
			if start < 0 {
				break
			}
			part(done, start)
			if st.behavior == isolated {
				part(start, end)
			}
			done = end
		}
		part(done, len(s))
		return
	}
	for _, sp := range st.spans(s) {
		if !(st.behavior == removed && sp.match) {
			part(sp.start, sp.end)
		}
	}
}

// spans returns the parts of s (NormalizedString::split, tokenizer/
// normalizer.rs): the matches and the text between them, each marked as
// a match (inverted with invert), then combined by the behaviour.
func (st *splitStep) spans(s string) []span {
	var all []span
	done := 0
	for done < len(s) {
		start, end := st.find(s, done)
		if start < 0 {
			break
		}
		if done < start {
			all = append(all, span{done, start, st.invert})
		}
		all = append(all, span{start, end, !st.invert})
		done = end
	}
	if done < len(s) {
		all = append(all, span{done, len(s), st.invert})
	}
	var out []span
	prevMatch := false
	switch st.behavior {
	case removed:
		return all
	case contiguous:
		for _, sp := range all {
			if sp.match == prevMatch && len(out) > 0 {
				out[len(out)-1].end = sp.end
			} else {
				out = append(out, sp)
			}
			prevMatch = sp.match
		}
	case mergedWithPrevious:
		for _, sp := range all {
			if sp.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].end = sp.end
			} else {
				out = append(out, sp)
			}
			prevMatch = sp.match
		}
	case mergedWithNext:
		for i := len(all) - 1; i >= 0; i-- {
			sp := all[i]
			if sp.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].start = sp.start
			} else {
				out = append(out, sp)
			}
			prevMatch = sp.match
		}
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	return out
}

// byteLevelStep is the ByteLevel pre-tokenizer, which must come last: with
// add_prefix_space a space before a piece that does not start with one,
// with use_regex a split by the GPT-2 pattern; its mapping of bytes to
// characters is implicit, as the model's vocabulary is held as bytes.
type byteLevelStep struct {
	addPrefixSpace bool
	regex          *splitStep // nil without use_regex
}

func (st *byteLevelStep) split(e *encoder, k int, p piece) {
	if st.addPrefixSpace && !strings.HasPrefix(p.s, " ") {
		p.s = " " + p.s
	}
	if st.regex != nil {
		st.regex.split(e, k, p)
		return
	}
	e.pretokenize(k+1, p)
}

// prependScheme is Metaspace's prepend_scheme.
type prependScheme int

const (
	prependAlways prependScheme = iota
	prependFirst
	prependNever
)

// metaspaceStep is Metaspace: spaces become the replacement character,
// which is put before the piece (always, or only before the text's first
// piece), and with split each replacement character starts a new piece.
type metaspaceStep struct {
	replacement string
	scheme      prependScheme
	splitter    *splitStep // nil without split
}

func (st *metaspaceStep) split(e *encoder, k int, p piece) {
	s := strings.ReplaceAll(p.s, " ", st.replacement)
	if !strings.HasPrefix(s, st.replacement) && (st.scheme == prependAlways || st.scheme == prependFirst && p.atStart) {
		s = st.replacement + s
	}
	p.s = s
	if st.splitter != nil {
		st.splitter.split(e, k, p)
		return
	}
	e.pretokenize(k+1, p)
}

// findRune returns the find of one rune.
func findRune(r rune) find {
	return literalFind(string(r))
}

// findNumeric finds one rune of \p{N} (Rust's char::is_numeric).
func findNumeric(s string, from int) (int, int) {
	for i := from; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		if pretok.IsNumber(r) {
			return i, i + w
		}
		i += w
	}
	return -1, -1
}

// find returns the first match of a split pattern in s at or after from,
// or (-1, -1); see pretok.Find.
type find = pretok.Find

// knownFind returns the hand-written scanner of a pattern pretok has one
// for (its exported pattern constants).
func knownFind(pattern string) find {
	f, _ := pretok.Known(pattern)
	return f
}
