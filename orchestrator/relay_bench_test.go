package orchestrator

import (
	"bufio"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/duet-serve/duet/orchestrator/protocol"
)

// vllmStreamEvents is a chat stream as vLLM writes it (compact JSON, one
// token per chunk, a finish chunk, then a usage chunk), n content chunks.
func vllmStreamEvents(n int) [][]byte {
	events := [][]byte{[]byte(`{"id":"chatcmpl-b1","object":"chat.completion.chunk","created":1732000000,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`)}
	for i := 0; i < n; i++ {
		events = append(events, []byte(fmt.Sprintf(`{"id":"chatcmpl-b1","object":"chat.completion.chunk","created":1732000000,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":" word%d"},"logprobs":null,"finish_reason":null}]}`, i)))
	}
	events = append(events,
		[]byte(`{"id":"chatcmpl-b1","object":"chat.completion.chunk","created":1732000000,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"length","stop_reason":null}]}`),
		[]byte(fmt.Sprintf(`{"id":"chatcmpl-b1","object":"chat.completion.chunk","created":1732000000,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[],"usage":{"prompt_tokens":1200,"total_tokens":%d,"completion_tokens":%d}}`, 1200+n, n)))
	return events
}

// BenchmarkRelayEvents is the relay's per-event work (reading finish
// reason, usage, content and errors, patching the usage chunk, writing the
// event) over a whole stream of 32 or 512 tokens; ns/event is reported.
func BenchmarkRelayEvents(b *testing.B) {
	for _, n := range []int{32, 512} {
		b.Run(fmt.Sprintf("tokens=%d", n), func(b *testing.B) {
			o := benchOrchestrator(b, Defaults())
			events := vllmStreamEvents(n)
			c := &protocol.Context{PromptTokens: 1200, CachedTokens: 1024}
			w := bufio.NewWriter(io.Discard)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				f := &flight{o: o, req: &Request{Received: time.Now()}}
				rl := &relay{f: f, ctx: c, chunks: getChunkReader()}
				defer putChunkReader(rl.chunks)
				for _, ev := range events {
					if err := rl.forward(w, ev); err != nil {
						b.Fatal(err)
					}
				}
				if !rl.finished || rl.f.outputTokens != n {
					b.Fatalf("finished %v output %d", rl.finished, rl.f.outputTokens)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(events)), "ns/event")
		})
	}
}
