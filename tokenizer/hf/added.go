package hf

import (
	"unicode"
	"unicode/utf8"
)

// addedToken is one entry of tokenizer.json's added_tokens.
type addedToken struct {
	content                                         string
	id                                              int32
	singleWord, lstrip, rstrip, normalized, special bool
}

// addedVocab finds added tokens in text as AddedVocabulary does
// (tokenizer/added_vocabulary.rs, v0.22.2): tokens with normalized false
// in the raw text, then, in each remaining piece after normalization,
// tokens with normalized true (their content normalized the same way).
// Each search takes the leftmost match, the longest one there, then
// continues after it (Aho-Corasick, MatchKind::LeftmostLongest); a match
// of a single_word token with a word character (\w) on either side is
// skipped (its text stays ordinary text and the search goes on after it);
// lstrip and rstrip take the whitespace (\s) before or after a match into
// it. It is immutable once built.
type addedVocab struct {
	raw, norm *trie
	byID      map[int32]*addedToken // the flags of each id: the last token with it
	byContent map[string]int32
}

// trie is a byte trie of token contents.
type trie struct {
	first [256]bool         // bytes a token starts with
	next  map[uint32]uint32 // node<<8 | byte -> child node
	term  []int32           // node -> id+1 of the token ending there, 0 if none
	empty bool
}

func newTrie() *trie {
	return &trie{next: map[uint32]uint32{}, term: []int32{0}, empty: true}
}

// add inserts content with id; the first token added with a content wins,
// as Aho-Corasick reports the first pattern of equal ones.
func (t *trie) add(content string, id int32) {
	if content == "" {
		return
	}
	t.empty = false
	t.first[content[0]] = true
	node := uint32(0)
	for i := 0; i < len(content); i++ {
		key := node<<8 | uint32(content[i])
		child, ok := t.next[key]
		if !ok {
			child = uint32(len(t.term))
			t.term = append(t.term, 0)
			t.next[key] = child
		}
		node = child
	}
	if t.term[node] == 0 {
		t.term[node] = id + 1
	}
}

// longest returns the id and end of the longest token at i, or -1.
func (t *trie) longest(s string, i int) (int32, int) {
	id, end := int32(-1), -1
	node := uint32(0)
	for j := i; j < len(s); j++ {
		child, ok := t.next[node<<8|uint32(s[j])]
		if !ok {
			break
		}
		node = child
		if t.term[node] != 0 {
			id, end = t.term[node]-1, j+1
		}
	}
	return id, end
}

// split calls piece for each stretch of s between tokens (ordinary text,
// with its offset in s) and token for each token found, in order.
func (a *addedVocab) split(t *trie, s string, piece func(text string, offset int), token func(id int32)) {
	if t.empty {
		if s != "" {
			piece(s, 0)
		}
		return
	}
	done := 0 // end of the text already emitted
	for i := 0; i < len(s); {
		if !t.first[s[i]] {
			i++
			continue
		}
		id, end := t.longest(s, i)
		if id < 0 {
			i++
			continue
		}
		start, stop := i, end
		i = end // the search goes on after the match, used or not
		tok := a.byID[id]
		if tok.singleWord && (start > 0 && endsWithWord(s[:start]) || stop < len(s) && startsWithWord(s[stop:])) {
			continue
		}
		if tok.lstrip {
			start = max(start-trailingSpace(s[:start]), done)
		}
		if tok.rstrip {
			stop += leadingSpace(s[stop:])
		}
		if done < start {
			piece(s[done:start], done)
		}
		token(id)
		done = stop // a later match may start before it, as in Rust
	}
	if done < len(s) {
		piece(s[done:], done)
	}
}

// isWord reports whether r is in \w of the Rust regex crate:
// [\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}].
func isWord(r rune) bool {
	return unicode.In(r, unicode.L, unicode.Nl, unicode.Other_Alphabetic, unicode.M, unicode.Nd, unicode.Pc, unicode.Join_Control)
}

func endsWithWord(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return isWord(r)
}

func startsWithWord(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return isWord(r)
}

// trailingSpace returns the length of the whitespace (\s) that ends s.
func trailingSpace(s string) int {
	n := 0
	for n < len(s) {
		r, w := utf8.DecodeLastRuneInString(s[:len(s)-n])
		if !unicode.Is(unicode.White_Space, r) {
			break
		}
		n += w
	}
	return n
}

// leadingSpace returns the length of the whitespace (\s) that starts s.
func leadingSpace(s string) int {
	n := 0
	for n < len(s) {
		r, w := utf8.DecodeRuneInString(s[n:])
		if !unicode.Is(unicode.White_Space, r) {
			break
		}
		n += w
	}
	return n
}
