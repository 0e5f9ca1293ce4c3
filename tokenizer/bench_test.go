package tokenizer

import (
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
	n := len(tok.EncodeChat(turn))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tok.EncodeChat(turn)
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
		tok.EncodeChat(msgs[:19]) // turn 9 served earlier
		b.StartTimer()
		tok.EncodeChat(msgs[:21])
	}
}

// BenchmarkEncodeChatFull40k is the whole 20-turn conversation from scratch.
func BenchmarkEncodeChatFull40k(b *testing.B) {
	tok := newTestTokenizer(b, Config{Encoding: "cl100k_base"})
	msgs := benchChat()
	n := len(tok.EncodeChat(msgs))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tok.EncodeChat(msgs)
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
