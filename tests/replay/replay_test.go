package replay

import (
	"container/heap"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/duet-serve/duet/router"
	"github.com/duet-serve/duet/tests/loadgen"
	"github.com/duet-serve/duet/tokenizer"
	"github.com/duet-serve/duet/workers/sim/model"
	"github.com/stretchr/testify/require"
)

// tokenSession is a session of raw token turns: turn k's prompt is the
// previous prompt, the previous reply, then adds[k] (stateless: adds[k]
// alone). Replies are reply tokens long, numbered from 10000 + 100k.
type tokenSession struct {
	id        string
	adds      [][]int
	outputs   []int
	delays    []time.Duration
	stateless bool
	history   []int
}

func (s *tokenSession) ID() string { return s.id }
func (s *tokenSession) Turns() int { return len(s.adds) }
func (s *tokenSession) Turn(k int) (int, time.Duration) {
	var d time.Duration
	if k < len(s.delays) {
		d = s.delays[k]
	}
	return s.outputs[k], d
}
func (s *tokenSession) Prompt(k int) []int {
	if s.stateless {
		return s.adds[k]
	}
	return append(append([]int(nil), s.history...), s.adds[k]...)
}
func (s *tokenSession) Answered(k, output int) []int {
	reply := seq(10000+100*k, output)
	if s.stateless {
		return nil
	}
	s.history = append(append(s.history, s.adds[k]...), reply...)
	return reply
}

func seq(start, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = start + i
	}
	return out
}

// worked is a fleet whose numbers are easy to work by hand: 4-token
// blocks, 1000 tokens/s of prefill and of transfer, a 10 ms prefill
// overhead, a 2 ms transfer overhead, a 5 ms ITL.
func worked(nCtx, nGen int, policy string) Config {
	w := WorkerModel{KVCapacityBlocks: 1000, BlockSize: 4, MaxNumSeqs: 8, Timing: model.Timing{Scale: 1, PrefillRate: 1000,
		PrefillOverhead: 10 * time.Millisecond, ITLBase: 5 * time.Millisecond, TransferRate: 1000, TransferOverhead: 2 * time.Millisecond}}
	rc := router.Defaults()
	rc.Policy, rc.TokensPerBlock = policy, 4
	return Config{Router: rc, Fleet: Fleet{NCtx: nCtx, NGen: nGen, Ctx: w, Gen: w}, Concurrency: 8, DefaultMaxTokens: 4, OracleBlockSize: 4}
}

func ms(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }

func TestTwoTurnsWorkedByHand(t *testing.T) {
	s := &tokenSession{id: "a", adds: [][]int{seq(0, 8), seq(500, 4)}, outputs: []int{4, 4}, delays: []time.Duration{0, time.Second}}
	res, err := Run(worked(1, 1, router.PolicyConversation), []Session{s})
	require.NoError(t, err)
	require.Len(t, res.Records, 2)
	t0, t1 := res.Records[0], res.Records[1]
	// Turn 0: 8 tokens, nothing cached: prefill 8 ms + 10 ms overhead, then
	// a transfer of all 8 tokens: 2 ms + 8 ms.
	require.Equal(t, 0, t0.CachedTokens)
	require.Equal(t, ms(28), t0.FirstContent)
	// 4 output tokens: 3 more at 5 ms.
	require.Equal(t, ms(43), t0.LastContent)
	// Turn 1 (16 tokens: 8 + 4 reply + 4 new), 1 s after turn 0 ended: the
	// ctx worker holds turn 0's 2 blocks (8 tokens); it computes 8. The gen
	// worker holds turn 0's prompt and reply, 3 blocks: 4 tokens move.
	require.Equal(t, 8, t1.CachedTokens)
	require.Equal(t, ms(8+10+2+4), t1.FirstContent)
	require.Equal(t, t0.Start.Add(ms(43)+time.Second), t1.Start)
	// Oracle: prompts only (not replies): turn 1 shares turn 0's 2 blocks.
	require.Equal(t, 0, t0.OracleTokens)
	require.Equal(t, 8, t1.OracleTokens)
	sum := loadgen.SummarizeRecords(res.Records)
	require.InDelta(t, 8.0/24, *sum.Metric("cache_hit_ratio").Value, 1e-9)
	require.Equal(t, map[string]int64{"ctx-0": 16}, res.Prefilled)
	require.Equal(t, 1.0, res.Imbalance)
}

func TestImbalanceAndPrefillQueueByHand(t *testing.T) {
	a := &tokenSession{id: "a", adds: [][]int{seq(0, 8)}, outputs: []int{1}, stateless: true}
	b := &tokenSession{id: "b", adds: [][]int{seq(100, 24)}, outputs: []int{1}, stateless: true}
	c := &tokenSession{id: "c", adds: [][]int{seq(200, 40)}, outputs: []int{1}, stateless: true}
	cfg := worked(2, 1, router.PolicyRoundRobin)
	res, err := Run(cfg, []Session{a, b, c})
	require.NoError(t, err)
	// Round-robin: a and c on one ctx worker, b on the other. Prefilled 48
	// and 24, mean 36: max/mean 4/3.
	require.InDelta(t, 48.0/36, res.Imbalance, 1e-9)
	byID := map[string]loadgen.Record{}
	for _, r := range res.Records {
		byID[r.ConversationID] = r
	}
	// a and c arrive together at the same worker: c's 40 ms of prefill
	// queues behind a's 8 ms (the overheads overlap).
	require.Equal(t, ms(8+10+2+8), byID["a"].FirstContent)
	require.Equal(t, ms(8+40+10+2+40), byID["c"].FirstContent)
	require.Equal(t, ms(24+10+2+24), byID["b"].FirstContent)
}

func TestConcurrencyAndFixedSchedule(t *testing.T) {
	mk := func(id string) *tokenSession {
		return &tokenSession{id: id, adds: [][]int{seq(len(id)*1000, 4)}, outputs: []int{1}, delays: []time.Duration{ms(1000)}, stateless: true}
	}
	cfg := worked(1, 1, router.PolicyRoundRobin)
	cfg.Concurrency = 1
	res, err := Run(cfg, []Session{mk("a"), mk("bb")})
	require.NoError(t, err)
	require.Equal(t, res.Records[0].End, res.Records[1].Start, "one session at a time: the next starts when one ends")

	cfg.FixedSchedule, cfg.Speedup = true, 4
	res, err = Run(cfg, []Session{mk("a"), mk("bb")})
	require.NoError(t, err)
	require.Equal(t, epoch.Add(ms(250)), res.Records[0].Start, "timestamp 1 s at 4x")
	require.Equal(t, res.Records[0].Start, res.Records[1].Start)
}

func TestPromptsThatCannotFitAreErrors(t *testing.T) {
	cfg := worked(1, 1, router.PolicyConversation)
	cfg.Fleet.Ctx.KVCapacityBlocks = 2
	s := &tokenSession{id: "a", adds: [][]int{seq(0, 20), seq(0, 4)}, outputs: []int{1, 1}, stateless: true}
	res, err := Run(cfg, []Session{s})
	require.NoError(t, err)
	require.NotNil(t, res.Records[0].Err)
	require.Contains(t, res.Records[0].Err.Message, "context_length_exceeded")
	require.Nil(t, res.Records[1].Err, "the session goes on")
}

func TestReplayIsDeterministic(t *testing.T) {
	run := func() []loadgen.Record {
		var ss []Session
		for i := 0; i < 20; i++ {
			ss = append(ss, &tokenSession{id: string(rune('a' + i)), adds: [][]int{seq(0, 40), seq(1000*i, 30), seq(2000*i, 20)},
				outputs: []int{8, 8, 8}, delays: []time.Duration{0, ms(100), ms(300)}})
		}
		cfg := worked(3, 2, router.PolicyConversation)
		cfg.Fleet.Ctx.KVCapacityBlocks = 60
		res, err := Run(cfg, ss)
		require.NoError(t, err)
		return res.Records
	}
	require.Equal(t, run(), run())
}

func TestMooncakeRows(t *testing.T) {
	trace := `{"timestamp": 0, "input_length": 1000, "output_length": 10, "hash_ids": [1, 2]}
{"timestamp": 500, "input_length": 1100, "output_length": 5, "hash_ids": [1, 2, 3]}

{"timestamp": 900, "input_length": 10, "output_length": 5, "hash_ids": [7], "session_id": "s"}
{"input_length": 20, "output_length": 5, "hash_ids": [7, 8], "session_id": "s", "delay": 250}
`
	ss, err := MooncakeSessions(strings.NewReader(trace), 512)
	require.NoError(t, err)
	require.Len(t, ss, 3)
	out0, at0 := ss[0].Turn(0)
	_, at1 := ss[1].Turn(0)
	p0, p1 := ss[0].Prompt(0), ss[1].Prompt(0)
	require.Len(t, p0, 1000)
	require.Equal(t, 10, out0)
	require.Equal(t, time.Duration(0), at0)
	require.Equal(t, ms(500), at1)
	require.Equal(t, p0[:1000], p1[:1000], "equal hash ids, equal blocks (the first row's partial block too)")
	require.NotEqual(t, p0[:488], p0[512:1000])
	require.Equal(t, 2, ss[2].Turns())
	_, delay := ss[2].Turn(1)
	require.Equal(t, ms(250), delay)

	_, err = MooncakeSessions(strings.NewReader(`{"timestamp": 0}`), 512)
	require.ErrorContains(t, err, "line 1")
}

func TestPooledOracleByHand(t *testing.T) {
	o := newPooledOracle(3, 4) // 3 blocks of 4 tokens
	observe := func(p []int) { o.observe(p, tokenizer.BlockHashes(p, 4)) }
	observe(seq(0, 8))   // 2 blocks, nothing held
	observe(seq(0, 10))  // holds the 2 blocks: 8 of 10
	observe(seq(100, 8)) // 2 new blocks: one free, then the LRU one, the first prompt's tail block
	observe(seq(0, 8))   // its first block is still held: 4 of 8
	require.InDelta(t, 12.0/34, o.ratio(), 1e-9)
}

func TestServingOverheadDelaysBothPhases(t *testing.T) {
	s := &tokenSession{id: "a", adds: [][]int{seq(0, 8)}, outputs: []int{1}, stateless: true}
	cfg := worked(1, 1, router.PolicyRoundRobin)
	cfg.ServingOverhead = ms(6)
	res, err := Run(cfg, []Session{s})
	require.NoError(t, err)
	require.Equal(t, ms(28+6), res.Records[0].FirstContent)
}

func TestEventQueueLetsPoppedEventsGo(t *testing.T) {
	var q eventQueue
	r := &run{}
	for i := 0; i < 3; i++ {
		heap.Push(&q, &event{at: epoch.Add(time.Duration(i)), seq: uint64(i), do: func() { _ = r }})
	}
	heap.Pop(&q)
	require.Nil(t, q[:3][2], "a popped event left in the backing array would keep its request alive")
}

func TestWindowOracleByHand(t *testing.T) {
	o := newWindowOracle(time.Minute)
	at := func(s int) time.Time { return epoch.Add(time.Duration(s) * time.Second) }
	h := tokenizer.BlockHashes(seq(0, 12), 4) // 3 blocks
	o.observe(12, h, 4, at(0))                // nothing seen: 0
	o.observe(12, h, 4, at(30))               // all 3 blocks, seen 30 s ago: 12
	o.observe(12, h[:2], 4, at(80))           // 2 blocks seen 50 s ago: 8 (of a 12-token prompt)
	o.observe(12, h, 4, at(150))              // block 0 and 1 seen 70 s ago: past the window, 0
	require.InDelta(t, 20.0/48, o.ratio(), 1e-9)
}

func TestProfileSessionsReadARun(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "inputs.json"), []byte(`{"data": [
{"session_id": "b", "payloads": [{"model": "m", "messages": [{"role": "user", "content": "late"}], "max_completion_tokens": 5}]},
{"session_id": "a", "payloads": [
  {"model": "m", "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "one"}], "max_completion_tokens": 7},
  {"model": "m", "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "one"}, {"role": "user", "content": "two"}], "max_tokens": 9}]}
]}`), 0o644))
	ns := func(ms int64) int64 { return 1_700_000_000_000_000_000 + ms*1_000_000 }
	var jsonl strings.Builder
	for _, r := range []struct {
		conv       string
		turn       int
		start, end int64
		phase      string
	}{{"a", 0, 0, 400, "profiling"}, {"a", 1, 1400, 2000, "profiling"}, {"b", 0, 250, 500, "profiling"}, {"w", 0, 0, 1, "warmup"}} {
		fmt.Fprintf(&jsonl, `{"metadata":{"conversation_id":%q,"turn_index":%d,"request_start_ns":%d,"request_end_ns":%d,"benchmark_phase":%q},"metrics":{}}`+"\n",
			r.conv, r.turn, ns(r.start), ns(r.end), r.phase)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "profile_export.jsonl"), []byte(jsonl.String()), 0o644))

	ss, err := ProfileSessions(dir)
	require.NoError(t, err)
	require.Len(t, ss, 2)
	a, b := ss[0], ss[1]
	require.Equal(t, "a", a.ID, "in the order the run started them")
	require.Equal(t, "sys", a.System)
	require.Equal(t, []string{"one", "two"}, []string{a.Turns[0].Text, a.Turns[1].Text})
	require.Equal(t, []int{7, 9}, []int{a.Turns[0].MaxTokens, a.Turns[1].MaxTokens})
	require.Equal(t, time.Duration(0), a.Turns[0].Timestamp)
	require.Equal(t, ms(1000), a.Turns[1].Delay, "the gap after the previous turn ended")
	require.Equal(t, ms(250), b.Turns[0].Timestamp)
	_, err = ProfileSessions(t.TempDir())
	require.ErrorContains(t, err, "inputs.json")
}

// Without session ids, consistent hashing keys each request by its request
// id, as duet keys it by x-request-id: the requests spread over the fleet
// (they all went to one worker when the replay left the id empty).
func TestConsistentHashWithoutSessionsKeysByRequest(t *testing.T) {
	var ss []Session
	for i := 0; i < 16; i++ {
		ss = append(ss, &tokenSession{id: fmt.Sprint("s", i), adds: [][]int{seq(1000*i, 8)}, outputs: []int{1}, stateless: true})
	}
	cfg := worked(4, 1, router.PolicyConsistentHash)
	cfg.NoSessionIDs = true
	res, err := Run(cfg, ss)
	require.NoError(t, err)
	used := 0
	for _, n := range res.Prefilled {
		if n > 0 {
			used++
		}
	}
	require.Greater(t, used, 1, "prefilled per ctx worker: %v", res.Prefilled)
}

// The modelled workers' KV events keep the router's index exact: with one
// request at a time (nothing evicts between routing and prefill), every
// context phase finds exactly the tokens the router expected, under cache
// pressure too; the estimate, which does not see the blocks running
// requests pin nor the gen side's evictions, may be off.
func TestKVEventsKeepTheIndexExact(t *testing.T) {
	sessions := func() []Session {
		var ss []Session
		for i := 0; i < 12; i++ {
			ss = append(ss, &tokenSession{id: string(rune('a' + i)), adds: [][]int{seq(0, 40), seq(1000*i, 30), seq(2000*i, 20)},
				outputs: []int{8, 8, 8}, delays: []time.Duration{0, ms(100), ms(300)}})
		}
		return ss
	}
	cfg := worked(2, 2, router.PolicyConversation)
	cfg.Fleet.Ctx.KVCapacityBlocks, cfg.Concurrency = 60, 1
	cfg.KVEvents = true
	res, err := Run(cfg, sessions())
	require.NoError(t, err)
	require.Equal(t, 1.0, res.IndexExact)
	require.Zero(t, res.IndexErrorP99)
	hit := 0
	for _, r := range res.Records {
		hit += r.CachedTokens
	}
	require.Positive(t, hit, "continuations were routed to their cache")
}
