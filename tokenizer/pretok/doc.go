// Package pretok holds the pre-tokenizers duet's two BPE implementations
// share: hand-written equivalents of the split patterns that tiktoken's
// encodings and real tokenizer.json files use, recognised by their exact
// pattern string (Known), and a Scanner whose CL100K and O200K methods
// tile a text the way tiktoken's cl100k_base and o200k_base patterns do.
//
// The patterns are applied as a backtracking engine applies them (Rust's
// Oniguruma in Hugging Face tokenizers, regexp2 in tiktoken-go; the first
// alternative that matches wins, quantifiers are greedy), over a class
// table of the Unicode categories they test, with \s the White_Space
// property (the same set both engines use). Each scanner looks at each
// rune a bounded number of times (a run of letters or spaces may be
// scanned again after a match gave part of it back), so a text costs time
// linear in its length; Scanner.Steps counts the work for the tests that
// bound it. tokenizer's TestPiecesMatchTiktokenGo and
// FuzzEncodeMatchesTiktokenGo compare the cl100k and o200k pieces with
// tiktoken-go's regexes, and tokenizer/hf's reference tests the others
// with the Rust tokenizers.
//
// Concurrency: the class table is built once, on first use, and then only
// read; a Scanner is for one goroutine.
package pretok
