package tokenizer

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// BenchmarkEncode measures raw BPE throughput on English prose.
func BenchmarkEncode(b *testing.B) {
	tok := newTestTokenizer(b, Config{Encoding: "cl100k_base"})
	text := RenderChat(syntheticChat(10, 200, 1))
	n := len(tok.Encode(text))
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tok.Encode(text)
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tokens/s")
}

// benchChat is a 20-turn conversation of about 40k tokens; turn 10 is its
// first 1+2*10 messages.
func benchChat() []ChatMessage { return syntheticChat(20, 870, 7) }

// BenchmarkEncodeChatTurn10Cold tokenizes turn 10 of a 20-turn ~40k-token
// chat from scratch, as a router without a message cache must.
func BenchmarkEncodeChatTurn10Cold(b *testing.B) {
	tok := newTestTokenizer(b, Config{Encoding: "cl100k_base"})
	turn := benchChat()[:21]
	n := len(encodeChat(b, tok, turn))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		encodeChat(b, tok, turn)
	}
	b.ReportMetric(float64(n), "tokens")
}

// BenchmarkEncodeChatTurn10Warm tokenizes turn 10 when turn 9's messages
// are already cached: only the two newest messages are encoded.
func BenchmarkEncodeChatTurn10Warm(b *testing.B) {
	msgs := benchChat()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		tok := newTestTokenizer(b, Defaults())
		tok.cache = newMessageCache(1024)
		encodeChat(b, tok, msgs[:19]) // turn 9 served earlier
		b.StartTimer()
		encodeChat(b, tok, msgs[:21])
	}
}

// BenchmarkEncodeChatFull40k is the whole 20-turn conversation from scratch.
func BenchmarkEncodeChatFull40k(b *testing.B) {
	tok := newTestTokenizer(b, Config{Encoding: "cl100k_base"})
	msgs := benchChat()
	n := len(encodeChat(b, tok, msgs))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		encodeChat(b, tok, msgs)
	}
	b.ReportMetric(float64(n), "tokens")
}

// BenchmarkBlockHashes40k hashes 40k tokens in 32-token blocks.
func BenchmarkBlockHashes40k(b *testing.B) {
	tokens := seq(40000, 1)
	b.SetBytes(int64(4 * len(tokens)))
	for i := 0; i < b.N; i++ {
		BlockHashes(tokens, 32)
	}
}

// BenchmarkEncode2MiB encodes the three 2 MiB prompts of issue 12, each
// bounded at 100 ms per op on one core: a single word ("aaaa…"), random
// Unicode (seeded) and English prose (an excerpt of Newton's Opticks,
// repeated).
func BenchmarkEncode2MiB(b *testing.B) {
	const n = 2 << 20
	inputs := []struct {
		name string
		text string
	}{
		{"single-word", strings.Repeat("a", n)},
		{"random-unicode", randomUnicode(n, 1)},
		{"prose", strings.Repeat(readTestdata(b, "opticks.txt"), n/49124+1)[:n]},
	}
	for _, encoding := range Encodings {
		tok := newTestTokenizer(b, Config{Encoding: encoding})
		for _, in := range inputs {
			b.Run(encoding+"/"+in.name, func(b *testing.B) {
				benchEncode(b, tok, in.text)
			})
		}
	}
}

// BenchmarkEncodeHostile encodes 2 MiB of the costliest inputs found
// (see pathological), which the repeated-chunk shortcut does not help.
func BenchmarkEncodeHostile(b *testing.B) {
	names := []string{"8000-byte words of a", "random letters", "8000-byte words of random letters", "abc", "emoji"}
	for _, encoding := range Encodings {
		tok := newTestTokenizer(b, Config{Encoding: encoding})
		for _, p := range pathological {
			if !slices.Contains(names, p.name) {
				continue
			}
			text := p.gen(2 << 20)
			b.Run(encoding+"/"+strings.ReplaceAll(p.name, " ", "-"), func(b *testing.B) {
				benchEncode(b, tok, text)
			})
		}
	}
}

// BenchmarkLoadEncoding measures what the first New for an encoding costs
// at startup (decoding its embedded table, building the rank and pair
// tables), and, as .../merges, the part of it the pair table takes.
func BenchmarkLoadEncoding(b *testing.B) {
	for _, encoding := range Encodings {
		b.Run(encoding, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := newEncoding(encoding); err != nil {
					b.Fatal(err)
				}
			}
		})
		e, err := newEncoding(encoding)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(encoding+"/merges", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				newPairTable(e.ranks)
			}
		})
	}
}

// BenchmarkEncodeSingleWord is the measurement of issue 12 (4-64 KB of
// "a"), which grew with the square of the length before.
func BenchmarkEncodeSingleWord(b *testing.B) {
	tok := newTestTokenizer(b, Config{Encoding: "cl100k_base"})
	for _, kb := range []int{4, 8, 16, 32, 64} {
		b.Run(fmt.Sprintf("%dKiB", kb), func(b *testing.B) {
			benchEncode(b, tok, strings.Repeat("a", kb<<10))
		})
	}
}

func benchEncode(b *testing.B, tok *Tokenizer, text string) {
	n := len(tok.Encode(text))
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		tok.Encode(text)
	}
	b.ReportMetric(float64(n), "tokens")
}

// BenchmarkModelChatTurn renders, tokenizes and block-hashes the last turn
// of a ~40k-token chat (20 exchanges, then a new user message) with a
// model's own tokenizer and template, as the frontend does for each
// request: cold, every message new; warm, the earlier messages seen in the
// previous turn and only the last user message new (each iteration's
// differs).
func BenchmarkModelChatTurn(b *testing.B) {
	for _, model := range []string{"llama3_1", "qwen3"} {
		tok := newTestTokenizer(b, Config{Source: referenceModel(b, model)})
		turn := append(syntheticChat(20, 1000, 7), ChatMessage{Role: "user"})
		last := len(turn) - 1
		n := len(encodeChat(b, tok, turn))
		for _, warm := range []bool{false, true} {
			name := model + "/cold"
			if warm {
				name = model + "/warm"
			}
			b.Run(name, func(b *testing.B) {
				i := 0
				for b.Loop() {
					i++
					msgs := turn
					if !warm {
						msgs = renamed(turn, i)
					}
					msgs[last].Content = fmt.Sprintf("%s: and then what happened on day %d?", name, i)
					BlockHashes(encodeChat(b, tok, msgs), 32)
				}
				b.ReportMetric(float64(n), "tokens")
			})
		}
	}
}

// renamed returns msgs with a number in front of every message, so that no
// message is one the tokenizer has seen.
func renamed(msgs []ChatMessage, i int) []ChatMessage {
	out := append([]ChatMessage(nil), msgs...)
	for k := range out {
		out[k].Content = fmt.Sprintf("%d %s", i, out[k].Content)
	}
	return out
}
