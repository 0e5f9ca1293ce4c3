// Package hf implements Hugging Face tokenizer.json tokenizers (and
// tiktoken tokenizer.model files) in Go, token for token as Hugging Face's
// Rust tokenizers v0.22.2 encode, which is what vLLM and SGLang run: duet
// counts and hashes the exact ids an engine computes for a prompt.
//
// Load reads a model directory or file. Encode is the Rust
// encode(text, add_special_tokens=false): added and special tokens written
// in the text are recognised (as when an engine tokenizes a rendered chat
// prompt); EncodeWithSpecial adds the post-processor's tokens (such as
// BOS; SpecialTokens lists them). Decode, TokenID, VocabSize and Describe
// complete the API.
//
// Pipeline (each step cites the Rust file it follows): added tokens are
// split off (added.go), each remaining piece is normalized (normalize.go,
// nfc.go), pre-tokenized into words (pretokenize.go, with hand-written
// scanners for the split patterns real files use in tokenizer/pretok and a
// translation of other patterns to Go's regexp in regex.go), each word is
// merged by the BPE model (bpe.go, merge.go) through a bounded lock-free
// word cache (cache.go), and the post-processor's special tokens are put
// around the result.
//
// Supported: model BPE with vocab and merges (as "a b" strings or pairs),
// unk_token, fuse_unk, byte_fallback, ignore_merges, dropout null or 0;
// normalizers NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Replace (String,
// or Regex as regex.go translates), Strip, Sequence; pre-tokenizers Split
// (every behaviour, invert), ByteLevel (last; add_prefix_space, use_regex),
// Metaspace (prepend_scheme always, first, never; split), Digits,
// Sequence; post-processors TemplateProcessing (single), ByteLevel,
// BertProcessing, RobertaProcessing, Sequence; decoders ByteLevel,
// ByteFallback, Fuse, Replace (String), Strip, Metaspace, Sequence; added
// tokens with single_word, lstrip, rstrip, normalized, special, given ids
// as the Rust loader gives them. Rejected at load with an error naming
// the construct and its JSON path: other model types (WordPiece, Unigram,
// WordLevel), dropout, a non-empty continuing_subword_prefix or
// end_of_word_suffix, other normalizers, pre-tokenizers, post-processors
// and decoders, a pre-tokenizer after ByteLevel, truncation or padding,
// unknown fields, a merge or unk_token not in the vocabulary, split
// patterns that have no scanner and do not translate exactly (lookaround
// other than the trailing \s+(?!\S)|\s+ idiom, (?i), \w, \b, anchors,
// possessive quantifiers, nested classes, patterns matching "").
// Offsets are not computed. One approximation: Metaspace's
// prepend_scheme "first" treats a piece as at the start of the text when
// it starts its segment at offset 0; Rust also counts pieces made only of
// characters a normalizer inserted before the first one.
//
// Invalid UTF-8: a prompt reaches an engine as JSON decoded by Python or
// Rust, which replace each maximal ill-formed subsequence with U+FFFD
// (Python's bytes.decode("utf-8", "replace"), WHATWG, from_utf8_lossy).
// Encode does the same first (validUTF8), which differs from Go's
// conversions for truncated sequences ("\xe2\x82" is one U+FFFD, not two).
//
// Verified (go test ./tokenizer/hf/, needs `make reference`): the ids of
// Encode and EncodeWithSpecial and the text of Decode equal the Rust
// tokenizers' on all 2,144 strings of testdata/corpus.jsonl for Llama 3.1,
// Qwen3, DeepSeek V3 and Gemma 3, and on 317 strings for five small
// tokenizers covering the other supported components
// (TestVariantsMatchReference); tokenizers.js agrees with Rust on the four
// real files and differs on the small ones (logged).
//
// Cost, measured on this 2-core machine while other tests ran (go test
// ./tokenizer/hf/ -run '^$' -bench . -benchtime 3x):
//
//	load (time, heap kept)  Llama 3.1 0.30 s 15 MiB, Qwen3 0.22 s 14 MiB,
//	                        DeepSeek V3 0.22 s 12 MiB, Gemma 3 0.65 s 30 MiB
//	prose, 180 KB (45k-49k tokens), cold / word cache warm (quiet machine):
//	                        Llama 3.1 3.0 / 3.0 ms (16 ns/byte; most words
//	                        are vocabulary hits, ignore_merges),
//	                        Qwen3 3.1 / 2.7 ms (15 ns/byte), DeepSeek V3
//	                        5.4 / 5.4 ms, Gemma 3 38 / 20 ms (a whole text
//	                        is one word, merged whole); under load 1.5x
//	worst 2 MiB inputs found (a run of one letter, of random letters, of
//	spaces or of punctuation, which are single words): 450-710 ns/byte,
//	at most 1.5 s; random bytes 140-330, emoji and CJK 18-380 ns/byte.
//
// Merging is O(n log n) in the word's length (merge.go), the scanners and
// the added-token search linear (the search at most the longest token's
// length per byte), so every input costs O(n log n).
//
// A stretch of text between added tokens seen before (a chat's earlier
// messages) is served whole from the segment cache (segments.go): a warm
// 40k-token chat turn, rendered, encoded and hashed, takes 1.1-1.5 ms
// (tokenizer's BenchmarkModelChatTurn).
//
// Concurrency: a Tokenizer is immutable after Load except its caches: the
// word cache, an array of atomic pointers to immutable entries, and the
// segment cache, a map under one mutex. Encode, Decode and the rest are
// safe for concurrent use; each Encode takes its scratch space from a
// sync.Pool.
package hf
