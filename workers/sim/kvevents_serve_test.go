package sim

import (
	"context"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/proto/kvevents"
	"github.com/duet-serve/duet/tokenizer"
)

// kvRec is a kvevents.Sink that records the events it is handed.
type kvRec struct {
	mu      sync.Mutex // guards the fields below
	events  []kvevents.Event
	batches int
	resets  []kvevents.ResetReason
}

var _ kvevents.Sink = (*kvRec)(nil)

func (r *kvRec) Apply(b kvevents.Batch) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, b.Events...)
	r.batches++
}

func (r *kvRec) Reset(_ string, reason kvevents.ResetReason) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.resets = append(r.resets, reason)
}

func (r *kvRec) snapshot() []kvevents.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

func (r *kvRec) received() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.batches > 0
}

// storedWith returns the first BlockStored whose token ids start with
// prefix.
func (r *kvRec) storedWith(prefix []int) *kvevents.BlockStored {
	for _, ev := range r.snapshot() {
		if s, ok := ev.(*kvevents.BlockStored); ok && len(s.TokenIDs) >= len(prefix) && slices.Equal(s.TokenIDs[:len(prefix)], prefix) {
			return s
		}
	}
	return nil
}

// removed returns the hashes of every BlockRemoved so far.
func (r *kvRec) removed() map[uint64]bool {
	out := map[uint64]bool{}
	for _, ev := range r.snapshot() {
		if rm, ok := ev.(*kvevents.BlockRemoved); ok {
			for _, h := range rm.BlockHashes {
				out[h.Key()] = true
			}
		}
	}
	return out
}

func (r *kvRec) cleared() bool {
	for _, ev := range r.snapshot() {
		if _, ok := ev.(*kvevents.AllBlocksCleared); ok {
			return true
		}
	}
	return false
}

// waitUntil polls cond until it holds, failing after a generous deadline;
// time decides only how long the test waits, never its outcome.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// kvEventsConfig is testConfig publishing KV events on free loopback ports,
// with 4-token blocks so that short prompts fill blocks.
func kvEventsConfig() Config {
	cfg := testConfig("mixed", ProtocolVLLM)
	cfg.BlockSize = 4
	cfg.KVEventsEndpoint = "tcp://127.0.0.1:0"
	cfg.KVEventsReplayEndpoint = "tcp://127.0.0.1:0"
	return cfg
}

// subscribe connects a kvevents.Subscriber to a publisher's endpoints as
// duet's router would, stopped when the test ends, and returns once the
// subscription is live: a PUB socket drops what it sends before a SUB's
// subscription reaches it, so probe(i) makes the publisher send something
// until an event arrives. It returns the events received and the
// subscriber.
func subscribe(t *testing.T, endpoint, replay string, probe func(i int)) (*kvRec, *kvevents.Subscriber) {
	t.Helper()
	rec := &kvRec{}
	sub, err := kvevents.NewSubscriber(kvevents.SubscriberConfig{
		Endpoint: endpoint, ReplayEndpoint: replay, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
	}, rec, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	for i := 0; !rec.received(); i++ {
		require.Less(t, i, 500, "no KV event arrived after %d probes", i)
		probe(i)
		for j := 0; j < 20 && !rec.received(); j++ {
			time.Sleep(10 * time.Millisecond)
		}
	}
	return rec, sub
}

// startKVWorker starts a worker with cfg and a kvevents.Subscriber connected
// to it as duet's router would connect to a vLLM, and returns once the
// subscription is live: a PUB socket drops what it sends before a SUB's
// subscription reaches it, so it sends probe requests (4-token prompts
// from token 60000 on) until their events arrive.
func startKVWorker(t *testing.T, cfg Config) (*testWorker, *kvRec) {
	t.Helper()
	w := startWorker(t, cfg)
	require.True(t, strings.HasPrefix(w.s.KVEventsEndpoint(), "tcp://127.0.0.1:"), w.s.KVEventsEndpoint())
	require.NotEqual(t, "tcp://127.0.0.1:0", w.s.KVEventsEndpoint(), "the bound port is reported")
	require.NotEmpty(t, w.s.KVEventsReplayEndpoint())
	rec, _ := subscribe(t, w.s.KVEventsEndpoint(), w.s.KVEventsReplayEndpoint(), func(i int) {
		r := post(t, w.url+"/v1/completions", completionReq(intsFrom(60000+4*i, 4), map[string]any{"max_tokens": 1}))
		require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	})
	return w, rec
}

// A request's BlockStored carries its tokens (the prompt as duet's
// orchestrator tokenizes it, then the output) and duet's chained hashes of
// them; a second request sharing two blocks stores only its own blocks,
// chained onto the shared one, and the router's rebuild of its hashes from
// parent and tokens (kvindex) matches.
func TestKVEventsStoredMatchesServedRequest(t *testing.T) {
	cfg := kvEventsConfig()
	w, rec := startKVWorker(t, cfg)
	tok := testTokenizer(t, "cl100k_base")

	content := longText("kv events first turn", 40)
	resp := decodeChat(t, post(t, w.url+"/v1/chat/completions", chatReq(content, map[string]any{"max_tokens": 6, "ignore_eos": true})))
	require.Equal(t, 6, resp.Usage.CompletionTokens)
	// The orchestrator's tokenization (orchestrator/request.go checkChat).
	prompt := encodeChat(t, tok, []tokenizer.ChatMessage{{Role: "user", Content: content}})
	require.Equal(t, len(prompt), resp.Usage.PromptTokens)

	var first *kvevents.BlockStored
	waitUntil(t, "the first request's BlockStored", func() bool { first = rec.storedWith(prompt[:cfg.BlockSize]); return first != nil })
	nBlocks := (len(prompt) + 6) / cfg.BlockSize
	require.False(t, first.HasParent, "a sequence's first block has no parent")
	require.Equal(t, cfg.BlockSize, first.BlockSize)
	require.Len(t, first.BlockHashes, nBlocks, "prompt and output blocks")
	require.Len(t, first.TokenIDs, nBlocks*cfg.BlockSize)
	require.Equal(t, prompt, first.TokenIDs[:len(prompt)], "the prompt's token ids")
	output := tok.Decode(first.TokenIDs[len(prompt):])
	require.True(t, strings.HasPrefix(resp.Choices[0].Message.Content.String(), output),
		"the output's token ids: %q vs %q", output, resp.Choices[0].Message.Content.String())
	require.Equal(t, tokenizer.BlockHashes(first.TokenIDs, cfg.BlockSize), keys(first.BlockHashes), "duet's chained hashes")
	require.Equal(t, mediumGPU, first.Medium)

	// Two shared blocks, then new tokens.
	prompt2 := append(slices.Clone(first.TokenIDs[:2*cfg.BlockSize]), intsFrom(5000, 6)...)
	r := post(t, w.url+"/v1/completions", completionReq(prompt2, map[string]any{"max_tokens": 2, "ignore_eos": true}))
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	require.Equal(t, "8", r.header.Get(headerCachedTokens))
	var second *kvevents.BlockStored
	waitUntil(t, "the second request's BlockStored", func() bool { second = rec.storedWith(intsFrom(5000, 6)); return second != nil })
	require.True(t, second.HasParent)
	require.Equal(t, first.BlockHashes[1], second.ParentBlockHash, "chained onto the last shared block")
	require.Len(t, second.TokenIDs, 2*cfg.BlockSize)
	require.Equal(t, tokenizer.ChainBlockHashes(second.ParentBlockHash.Key(), second.TokenIDs, cfg.BlockSize), keys(second.BlockHashes))

	metrics := string(do(t, http.MethodGet, w.url+"/metrics", nil, nil).body)
	require.Contains(t, metrics, `duet_sim_kv_events_total{model_name="`+cfg.Model+`",outcome="dropped"} 0`)
	require.NotContains(t, metrics, `duet_sim_kv_events_total{model_name="`+cfg.Model+`",outcome="published"} 0`)
	rec.mu.Lock()
	require.Empty(t, rec.resets, "no gap, no restart")
	rec.mu.Unlock()
}

// A small cache evicts a finished request's blocks for a larger one:
// BlockRemoved names every one of them. A reset then clears the cache.
func TestKVEventsRemovedOnEvictionAndClearedOnReset(t *testing.T) {
	cfg := kvEventsConfig()
	cfg.KVCapacityBlocks = 8
	w, rec := startKVWorker(t, cfg)

	a := intsFrom(1000, 12)
	r := post(t, w.url+"/v1/completions", completionReq(a, map[string]any{"max_tokens": 4, "ignore_eos": true}))
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	var stored *kvevents.BlockStored
	waitUntil(t, "A's BlockStored", func() bool { stored = rec.storedWith(a); return stored != nil })
	require.Len(t, stored.BlockHashes, 4)

	// 28 + 4 tokens fill all 8 blocks: every cached block goes.
	r = post(t, w.url+"/v1/completions", completionReq(intsFrom(2000, 28), map[string]any{"max_tokens": 4, "ignore_eos": true}))
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	waitUntil(t, "A's blocks removed", func() bool {
		gone := rec.removed()
		for _, h := range stored.BlockHashes {
			if !gone[h.Key()] {
				return false
			}
		}
		return true
	})

	w.requireIdle(t)
	r = post(t, w.url+"/reset_prefix_cache", nil)
	require.Equal(t, http.StatusOK, r.status)
	require.JSONEq(t, `{"success":true}`, string(r.body))
	waitUntil(t, "AllBlocksCleared", rec.cleared)
	require.Zero(t, w.s.sched.stats().KV.Cached)
}

// Off by default: no sink, no observer, no socket, and nothing counted.
func TestKVEventsOffByDefault(t *testing.T) {
	w := startWorker(t, testConfig("mixed", ProtocolVLLM))
	require.Empty(t, w.s.KVEventsEndpoint())
	require.Empty(t, w.s.KVEventsReplayEndpoint())
	require.Nil(t, w.s.kvEvents)
	require.Nil(t, w.s.sched.events)
	decodeCompletion(t, post(t, w.url+"/v1/completions", completionReq(intsFrom(1000, 70), map[string]any{"max_tokens": 4})))
	metrics := string(do(t, http.MethodGet, w.url+"/metrics", nil, nil).body)
	for _, outcome := range []string{"published", "dropped", "failed"} {
		require.Contains(t, metrics, `duet_sim_kv_events_total{model_name="`+Defaults().Model+`",outcome="`+outcome+`"} 0`)
	}
	r := post(t, w.url+"/reset_prefix_cache", nil)
	require.JSONEq(t, `{"success":true}`, string(r.body), "the reset works without events too")
}

// A KV event endpoint that cannot be bound fails Serve before the URL is
// ready.
func TestKVEventsBindFailure(t *testing.T) {
	first := startWorker(t, kvEventsConfig())
	cfg := kvEventsConfig()
	cfg.KVEventsEndpoint = first.s.KVEventsEndpoint() // taken
	s, err := New(cfg, testTokenizer(t, "cl100k_base"), nil)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	err = s.Serve(context.Background(), ln)
	require.ErrorContains(t, err, "kv_events_endpoint")
}
