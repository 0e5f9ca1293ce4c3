package orchestrator

import (
	"bufio"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/duet-serve/duet/proto/disagg"
	"github.com/duet-serve/duet/router"
	"github.com/duet-serve/duet/tokenizer"
	"github.com/valyala/fasthttp"
	"go.uber.org/zap"
)

// fastWorker is a zero-latency fasthttp worker answering canned TensorRT-LLM
// bodies, so benchmarks measure the orchestrator, not the worker.
func fastWorker(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctxBody := []byte(`{"id":"c1","object":"chat.completion","created":1,"model":"m","prompt_token_ids":[1,2,3],"choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"not_finished","disaggregated_params":{"request_type":"context_only","first_gen_tokens":[7],"ctx_request_id":18446744073709551615,"encoded_opaque_state":"b3BhcXVl","draft_tokens":null}}],"usage":{"prompt_tokens":30,"completion_tokens":1,"total_tokens":31,"prompt_tokens_details":{"cached_tokens":20}}}`)
	genBody := []byte(`{"id":"g","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello there"},"finish_reason":"length"}],"usage":{"prompt_tokens":30,"completion_tokens":16,"total_tokens":46}}`)
	stream := []byte("data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" tok\"},\"finish_reason\":null}]}\n\n")
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		body := ctx.PostBody()
		switch {
		case bytesContains(body, `"context_only"`):
			ctx.SetBody(ctxBody)
		case bytesContains(body, `"stream":true`):
			ctx.SetContentType("text/event-stream")
			ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
				for i := 0; i < 16; i++ {
					w.Write(stream)
					w.Flush()
				}
				w.WriteString("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n")
			})
		default:
			ctx.SetBody(genBody)
		}
	}}
	go srv.Serve(ln) //nolint:errcheck // ends with the listener
	b.Cleanup(func() { srv.Shutdown() })
	return "http://" + ln.Addr().String()
}

func bytesContains(b []byte, s string) bool { return len(b) > 0 && string(b) != "" && contains(b, s) }

func contains(b []byte, s string) bool {
	for i := 0; i+len(s) <= len(b); i++ {
		if string(b[i:i+len(s)]) == s {
			return true
		}
	}
	return false
}

func benchOrchestrator(b *testing.B, cfg Config) *Orchestrator {
	url := fastWorker(b)
	pool := router.NewPool()
	pool.Sync([]router.Member{{ID: "ctx", URL: url, Role: disagg.RoleContext, Healthy: true},
		{ID: "gen", URL: url, Role: disagg.RoleGeneration, Healthy: true}})
	rcfg := router.Defaults()
	rcfg.Policy = router.PolicyLeastLoad
	r, _ := router.New(pool, rcfg, nil)
	tok, _ := tokenizer.New(tokenizer.Defaults())
	o, err := New(Options{Config: cfg, Router: r, Tokenizer: tok, Log: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	return o
}

var benchChatBody = []byte(`{"model":"m","max_tokens":16,"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Summarise the plot of a short story about a lighthouse keeper in two sentences."}]}`)

// BenchmarkHandleDisaggregated is one non-streaming request through both
// phases against a zero-latency worker.
func BenchmarkHandleDisaggregated(b *testing.B) {
	o := benchOrchestrator(b, Defaults())
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		resp := o.Handle(context.Background(), Incoming{Endpoint: 1, Body: benchChatBody, RequestID: "r", Received: time.Now()})
		if resp.Status != 200 {
			b.Fatalf("status %d: %s", resp.Status, resp.Body)
		}
	}
}

// BenchmarkHandleStreaming relays a 16-token stream through both phases.
func BenchmarkHandleStreaming(b *testing.B) {
	o := benchOrchestrator(b, Defaults())
	body := []byte(`{"model":"m","stream":true,"max_tokens":16,"messages":[{"role":"user","content":"Summarise a story."}]}`)
	w := bufio.NewWriter(io.Discard)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		resp := o.Handle(context.Background(), Incoming{Endpoint: 1, Body: body, RequestID: "r", Received: time.Now()})
		if !resp.Streaming() {
			b.Fatalf("status %d: %s", resp.Status, resp.Body)
		}
		resp.Relay(w)
	}
}

// BenchmarkParse is request validation, session key and tokenization alone.
func BenchmarkParse(b *testing.B) {
	o := benchOrchestrator(b, Defaults())
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := o.parse(Incoming{Endpoint: 1, Body: benchChatBody, RequestID: "r"}); err != nil {
			b.Fatal(err)
		}
	}
}
