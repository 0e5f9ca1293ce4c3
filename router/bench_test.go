package router

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/duet-serve/duet/proto/disagg"
	"github.com/duet-serve/duet/tokenizer"
)

// seq returns n consecutive token ids from start.
func seq(n, start int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = start + i
	}
	return out
}

// bigFleet returns a pool of n ctx and n gen workers, each reporting a 2M-token cache.
func bigFleet(n int) *Pool {
	p := NewPool()
	var ms []Member
	for i := range n {
		ms = append(ms, Member{ID: fmt.Sprintf("ctx-%02d", i), URL: fmt.Sprintf("http://c%d", i), Role: disagg.RoleContext, Healthy: true, KVCacheTokens: 2 << 20},
			Member{ID: fmt.Sprintf("gen-%02d", i), URL: fmt.Sprintf("http://g%d", i), Role: disagg.RoleGeneration, Healthy: true, KVCacheTokens: 2 << 20})
	}
	p.Sync(ms)
	return p
}

// populated returns a conversation router over 64 + 64 workers holding n
// live sessions, each of which ran a ~2k-token turn (a shared 1k-token
// system prompt and 1k tokens of its own) that the index learned.
func populated(b *testing.B, n int) *Router {
	cfg := Defaults()
	cfg.MaxSessions = n
	r, err := New(bigFleet(64), cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	system := seq(1024, 1_000_000)
	toks := append(append([]int{}, system...), seq(1024, 0)...)
	for i := 0; i < n; i++ {
		for j := range 1024 {
			toks[1024+j] = i*2048 + j
		}
		p, err := r.Route(&Request{SessionKey: fmt.Sprint("s", i), Tokens: toks, Hashes: tokenizer.BlockHashes(toks, 32), MaxTokens: 64})
		if err != nil {
			b.Fatal(err)
		}
		p.ContextDone(true, -1)
		p.End(Outcome{GenRan: true})
	}
	return r
}

// BenchmarkRoute32k is one routing decision for a 32k-token prompt with
// 100k sessions and 64 ctx + 64 gen workers indexed: a known session's
// next turn, whose 2k-token previous prompt its ctx worker holds (the
// index holds about 100k blocks a worker).
func BenchmarkRoute32k(b *testing.B) {
	r := populated(b, 100_000)
	const last = 100_000 - 1 // the latest session: its blocks are the most recently used
	prev := append(seq(1024, 1_000_000), seq(1024, last*2048)...)
	toks := append(prev, seq(30*1024, 9_000_000_000)...)
	rq := &Request{SessionKey: fmt.Sprint("s", last), Tokens: toks, Hashes: tokenizer.BlockHashes(toks, 32), MaxTokens: 64}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p, err := r.Route(rq)
		if err != nil {
			b.Fatal(err)
		}
		if p.CtxCached != 2048 {
			b.Fatalf("cached %d, decision %s", p.CtxCached, p.Decision)
		}
		p.End(Outcome{})
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
			p.End(Outcome{})
			i++
		}
	})
}

// BenchmarkSessionMemory reports the heap bytes per live session at 100k and
// 1M sessions (the index's memory is kvindex's BenchmarkCacheMemory).
func BenchmarkSessionMemory(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				m := newCostModel(Defaults(), newStats(), nil, NewPool(), nil, true)
				m.sessions.max = n
				for j := range n {
					m.sessions.put(fmt.Sprint("session-", j), "ctx-1", "gen-1", epoch)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "bytes/session")
				runtime.KeepAlive(m)
			}
		})
	}
}
