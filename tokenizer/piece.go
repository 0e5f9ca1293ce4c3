package tokenizer

import (
	"slices"
	"unicode/utf8"
)

// maxPieceBytes is the longest piece that is byte-pair merged whole, and
// the length of the chunks a longer piece is cut into.
//
// Pieces of real text are words, numbers of up to three digits, runs of
// punctuation and runs of whitespace: the longest in the test corpora is
// 94 bytes (a Thai phrase), and 2,700 CJK characters without punctuation
// would still fit. Merging is exact up to this length, so real text is not
// affected; a run such as 2 MiB of "a", of random letters or of emoji is.
const maxPieceBytes = 8192

// appendPiece appends the tokens of one pre-tokenized piece to out.
//
// A piece that is a token is one look-up. A piece of up to maxPiece bytes
// is merged exactly as tiktoken merges it. A longer piece is cut into
// chunks of maxPiece bytes (the last one shorter), each moved back to end
// on a rune boundary, and each chunk is merged on its own, as if it were a
// piece. This is the bound: merging n bytes costs O(n log maxPiece), and
// the pre-tokenizer is linear, so the whole text costs O(len(text)).
//
// Cutting changes only the tokens of the cut piece, and only near the cuts:
// no token spans a cut, where exact BPE sometimes has one. The count is
// approximate: TestLongPieceCountIsClose finds it within one token per cut
// of exact BPE (at most +0.03 % on 1 MiB runs of "a", "abc", random
// letters, emoji, spaces, dashes). The tokens still decode to the piece,
// are deterministic, and a chunk's tokens depend only on its bytes, so two
// prompts that share a prefix share its tokens and block hashes as before.
//
// A chunk equal to the one before it reuses its tokens: a run of one
// repeated character costs a comparison per chunk after the first.
func (m *merger) appendPiece(out []int, piece string) []int {
	m.ops++
	if r := m.enc.ranks.get(piece); r != noRank {
		return append(out, int(r))
	}
	if len(piece) <= m.maxPiece {
		return m.appendMerged(reserve(out, len(piece)), piece)
	}
	var prev string
	prevStart, prevEnd := 0, 0
	for len(piece) > 0 {
		chunk := piece[:m.chunkLen(piece)]
		piece = piece[len(chunk):]
		if chunk == prev {
			out = append(out, out[prevStart:prevEnd]...)
			continue
		}
		prev, prevStart = chunk, len(out)
		out = m.appendPiece(out, chunk)
		prevEnd = len(out)
	}
	return out
}

// chunkLen returns the length of the first chunk of piece: maxPiece moved
// back to the start of a rune.
func (m *merger) chunkLen(piece string) int {
	if len(piece) <= m.maxPiece {
		return len(piece)
	}
	n := m.maxPiece
	for n > 0 && !utf8.RuneStart(piece[n]) {
		n--
	}
	return n
}

// reserve returns out with room for n more tokens, doubling its capacity
// when it grows.
func reserve(out []int, n int) []int {
	if cap(out)-len(out) >= n {
		return out
	}
	return slices.Grow(out, max(n, cap(out)))
}
