package router

import (
	"fmt"
	"runtime"
	"slices"
	"testing"

	"github.com/duet-serve/duet/tokenizer"
)

// populated returns a conversation router holding n live sessions, each
// with a ~2k-token previous prompt behind a shared 1k-token system prompt.
func populated(b *testing.B, n int) *Router {
	cfg := Defaults()
	cfg.MaxSessions = n
	r, err := New(fleet(8, 8), cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	system := seq(1024, 1_000_000)
	for i := 0; i < n; i++ {
		toks := append(append([]int{}, system...), seq(1024, i*2048)...)
		p, err := r.Route(&Request{SessionKey: fmt.Sprint("s", i), Tokens: toks, Hashes: tokenizer.BlockHashes(toks, 32), MaxTokens: 64})
		if err != nil {
			b.Fatal(err)
		}
		p.Release()
		p.Done(Outcome{CtxRan: true, GenRan: true, OutputTokens: 64, ReportedCached: -1})
	}
	return r
}

// BenchmarkRouteConversation32k is one routing decision for a 32k-token
// prompt without a session id that continues no session (implicit prefix
// matching probes every block) with 100k live sessions. Each iteration's
// block hashes are new (a prompt routed before would now be found as the
// session it started): the real hashes, each xored with the iteration.
func BenchmarkRouteConversation32k(b *testing.B) {
	r := populated(b, 100_000)
	toks := append(seq(1024, 1_000_000), seq(31_744, 5_000_000_000)...)
	base := tokenizer.BlockHashes(toks, 32)
	rq := &Request{Tokens: toks, Hashes: slices.Clone(base), MaxTokens: 64}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j, h := range base {
			rq.Hashes[j] = h ^ uint64(i+1)*0x9e3779b97f4a7c15
		}
		p, err := r.Route(rq)
		if err != nil {
			b.Fatal(err)
		}
		if p.Decision != DecisionNew {
			b.Fatalf("decision %s", p.Decision)
		}
		p.Release()
	}
}

// BenchmarkRouteConversationSticky is a known session's turn (id given).
func BenchmarkRouteConversationSticky(b *testing.B) {
	r := populated(b, 100_000)
	toks := append(seq(1024, 1_000_000), seq(1024+512, 2048*7)...)
	rq := &Request{SessionKey: "s7", Tokens: toks, Hashes: tokenizer.BlockHashes(toks, 32), MaxTokens: 64}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p, _ := r.Route(rq)
		p.Release()
	}
}

// BenchmarkRouteContention runs 64 goroutines routing at once on the
// machine's cores, each with its own session.
func BenchmarkRouteContention(b *testing.B) {
	r := populated(b, 10_000)
	b.SetParallelism(64 / runtime.GOMAXPROCS(0))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		toks := seq(2048, 0)
		hashes := tokenizer.BlockHashes(toks, 32)
		i := 0
		for pb.Next() {
			rq := &Request{SessionKey: fmt.Sprint("s", i%10_000), Tokens: toks, Hashes: hashes, MaxTokens: 64}
			p, _ := r.Route(rq)
			p.Release()
			i++
		}
	})
}

// BenchmarkRouteSharedEndpoint routes new sessions that all share a
// 1k-token system prompt and a short (sub-block) first message, the case
// where 100k sessions end at the same block: lookups must not scan them.
func BenchmarkRouteSharedEndpoint(b *testing.B) {
	cfg := Defaults()
	r, _ := New(fleet(8, 8), cfg, nil)
	system := seq(1024, 1_000_000)
	for i := 0; i < 100_000; i++ {
		toks := append(append([]int{}, system...), i, i+1, i+2)
		p, _ := r.Route(&Request{Tokens: toks, Hashes: tokenizer.BlockHashes(toks, 32), MaxTokens: 64})
		p.Release()
	}
	toks := append(append([]int{}, system...), 0, 0, 0)
	rq := &Request{Tokens: toks, Hashes: tokenizer.BlockHashes(toks, 32), MaxTokens: 64}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		toks[1024], toks[1025], toks[1026] = -i, -i-1, -i-2 // a new first message each time
		p, _ := r.Route(rq)
		if p.Decision != DecisionNew {
			b.Fatalf("decision %s", p.Decision)
		}
		p.Release()
	}
}

// BenchmarkSessionMemory reports the heap bytes per live session at 100k and
// 1M sessions.
func BenchmarkSessionMemory(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				r := populatedCheap(n)
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "bytes/session")
				runtime.KeepAlive(r)
			}
		})
	}
}

// populatedCheap fills a session table through the same code path as
// routing, with short prompts so that setup stays fast at 1M sessions.
func populatedCheap(n int) *Router {
	cfg := Defaults()
	cfg.MaxSessions = n
	r, _ := New(fleet(8, 8), cfg, nil)
	toks := seq(100, 0)
	for i := 0; i < n; i++ {
		toks[0] = i
		p, _ := r.Route(&Request{SessionKey: fmt.Sprint("session-", i), Tokens: toks, Hashes: tokenizer.BlockHashes(toks, 32), MaxTokens: 64})
		p.Release()
	}
	return r
}
