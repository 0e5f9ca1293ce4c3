package sim

import (
	"context"
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/duet-serve/duet/proto/kvevents"
	"github.com/duet-serve/duet/tokenizer"
)

// The KV event faults break the stream the way duet's watchdog must catch
// (a subscriber's view diverging from the cached_tokens the worker
// reports), checked here against a real kvevents.Subscriber.

// kv_events_paused: the worker keeps caching but the stream goes silent,
// with no gap and no AllBlocksCleared; once cleared, new events flow and
// the subscriber never learns what it missed.
func TestKVEventsPausedFault(t *testing.T) {
	cfg := kvEventsConfig()
	w, rec := startKVWorker(t, cfg)

	r := post(t, w.url+"/admin/faults", `{"kv_events_paused":true}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Contains(t, string(r.body), `"kv_events_paused":true`)
	missed := intsFrom(1000, 12)
	r = post(t, w.url+"/v1/completions", completionReq(missed, map[string]any{"max_tokens": 4, "ignore_eos": true}))
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	waitUntil(t, "the paused step discarded", func() bool { return w.s.kvEvents.stats.pausedEvents.Load() > 0 })

	r = post(t, w.url+"/admin/faults", `{"kv_events_paused":false}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	after := intsFrom(2000, 12)
	r = post(t, w.url+"/v1/completions", completionReq(after, map[string]any{"max_tokens": 4, "ignore_eos": true}))
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	waitUntil(t, "events after the pause", func() bool { return rec.storedWith(after) != nil })

	// Batches arrive in order, so the paused request's would be here by now.
	require.Nil(t, rec.storedWith(missed), "nothing published while paused")
	require.False(t, rec.cleared(), "no AllBlocksCleared")
	rec.mu.Lock()
	require.Empty(t, rec.resets, "no gap: the subscriber cannot tell")
	rec.mu.Unlock()
	r = post(t, w.url+"/v1/completions", completionReq(missed, map[string]any{"max_tokens": 1}))
	require.Equal(t, "8", r.header.Get(headerCachedTokens), "the worker cached it all the same (all but the last block)")

	metrics := string(do(t, http.MethodGet, w.url+"/metrics", nil, nil).body)
	require.Contains(t, metrics, `duet_sim_kv_event_batches_total{model_name="`+cfg.Model+`",outcome="paused"} 1`)
}

// reset_cache_silently: the cache empties with no AllBlocksCleared, so a
// subscriber keeps blocks the worker no longer has; the next request finds
// nothing cached and stores its blocks again, still without a reset.
func TestKVEventsResetCacheSilentlyFault(t *testing.T) {
	cfg := kvEventsConfig()
	w, rec := startKVWorker(t, cfg)
	prompt := intsFrom(1000, 12)
	r := post(t, w.url+"/v1/completions", completionReq(prompt, map[string]any{"max_tokens": 4, "ignore_eos": true}))
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	waitUntil(t, "the prompt's BlockStored", func() bool { return rec.storedWith(prompt) != nil })
	w.requireIdle(t)

	r = post(t, w.url+"/admin/faults", `{"reset_cache_silently":true}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.NotContains(t, string(r.body), "reset_cache_silently", "an action, not a setting")
	require.Zero(t, w.s.sched.stats().KV.Cached)

	r = post(t, w.url+"/v1/completions", completionReq(prompt, map[string]any{"max_tokens": 4, "ignore_eos": true}))
	require.Equal(t, "0", r.header.Get(headerCachedTokens), "the cache was emptied")
	waitUntil(t, "the prompt stored again", func() bool {
		n := 0
		for _, ev := range rec.snapshot() {
			if s, ok := ev.(*kvevents.BlockStored); ok && len(s.TokenIDs) >= 12 && s.TokenIDs[0] == prompt[0] {
				n++
			}
		}
		return n == 2
	})
	require.False(t, rec.cleared(), "no AllBlocksCleared")
	rec.mu.Lock()
	require.Empty(t, rec.resets)
	rec.mu.Unlock()
	metrics := string(do(t, http.MethodGet, w.url+"/metrics", nil, nil).body)
	require.Contains(t, metrics, `duet_sim_faults_injected_total{model_name="`+cfg.Model+`",kind="reset_cache_silently"} 1`)
}

// Where POST /reset_prefix_cache fails while blocks are referenced, the
// silent reset drops the unreferenced ones and keeps what a running
// sequence holds.
func TestResetCacheSilentlyKeepsReferencedBlocks(t *testing.T) {
	w := startWorker(t, testConfig("mixed", ProtocolVLLM)) // works with KV events off too
	a, b := intsFrom(1000, 64), intsFrom(3000, 64)
	for _, p := range [][]int{a, b} {
		r := post(t, w.url+"/v1/completions", completionReq(p, map[string]any{"max_tokens": 1}))
		require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	}
	w.requireIdle(t)
	bs := w.s.cfg.BlockSize
	hashes := tokenizer.BlockHashes(a, bs)
	l, err := w.s.sched.admit(context.Background(), admitSpec{hashes: hashes, maxMatch: len(hashes), totalBlocks: len(hashes)})
	require.NoError(t, err)
	require.Equal(t, len(hashes), l.matchedBlocks())
	require.JSONEq(t, `{"success":false}`, string(post(t, w.url+"/reset_prefix_cache", nil).body))

	r := post(t, w.url+"/admin/faults", `{"reset_cache_silently":true}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	st := w.s.sched.stats().KV
	require.Zero(t, st.Cached, "b's blocks are gone")
	require.Equal(t, len(hashes), st.Referenced, "a's stay, held by the running sequence")
	l.finish(seqBlocks{})

	r = post(t, w.url+"/v1/completions", completionReq(a, map[string]any{"max_tokens": 1}))
	require.Equal(t, strconv.Itoa((len(a)-1)/bs*bs), r.header.Get(headerCachedTokens), "a's blocks survived")
	r = post(t, w.url+"/v1/completions", completionReq(b, map[string]any{"max_tokens": 1}))
	require.Equal(t, "0", r.header.Get(headerCachedTokens))
}

// The KV event faults in POST /admin/faults: validation names the field,
// an unchanged patch leaves kv_events_paused alone, DELETE clears it.
func TestKVEventFaultSettings(t *testing.T) {
	off := startWorker(t, testConfig("mixed", ProtocolVLLM))
	on := startWorker(t, kvEventsConfig())
	tests := []struct {
		name    string
		w       *testWorker
		body    string
		status  int
		message string // in the error, or in the settings returned
	}{
		{"pause with KV events off", off, `{"kv_events_paused":true}`, http.StatusBadRequest, "kv_events_paused: KV events are off"},
		{"clearing with KV events off is a no-op", off, `{"kv_events_paused":false}`, http.StatusOK, `"kv_events_paused":false`},
		{"pause not a bool", on, `{"kv_events_paused":"yes"}`, http.StatusBadRequest, "kv_events_paused"},
		{"reset not a bool", on, `{"reset_cache_silently":1}`, http.StatusBadRequest, "reset_cache_silently"},
		{"pause", on, `{"kv_events_paused":true}`, http.StatusOK, `"kv_events_paused":true`},
		{"other fields keep the pause", on, `{"error_rate":0}`, http.StatusOK, `"kv_events_paused":true`},
		{"an invalid patch changes nothing", on, `{"kv_events_paused":false,"error_rate":2}`, http.StatusBadRequest, "error_rate: must be in [0, 1]"},
		{"reset false does nothing", on, `{"reset_cache_silently":false}`, http.StatusOK, `"kv_events_paused":true`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := post(t, tc.w.url+"/admin/faults", tc.body)
			require.Equal(t, tc.status, r.status, "%s", r.body)
			if tc.status != http.StatusOK {
				require.Contains(t, r.errorBody(t).Error.Message, tc.message)
				return
			}
			require.Contains(t, string(r.body), tc.message)
		})
	}
	require.True(t, on.s.faults.kvEventsPaused())
	r := do(t, http.MethodDelete, on.url+"/admin/faults", nil, nil)
	require.Contains(t, string(r.body), `"kv_events_paused":false`)
	require.False(t, on.s.faults.kvEventsPaused())
	require.Zero(t, on.s.metrics.faults[faultResetCacheSilently].Load(), "false triggered nothing")
}

// A batch dropped on a full queue (before kvevents.Publisher) used to leave
// no sequence gap; now its number is skipped, and a real Subscriber with a
// replay endpoint resets the topic (ResetGap) without any AllBlocksCleared.
func TestKVEventsDroppedBatchResetsSubscriber(t *testing.T) {
	pub, err := kvevents.NewPublisher(kvevents.PublisherConfig{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0"}, nil)
	require.NoError(t, err)
	rec, sub := subscribe(t, "tcp://"+pub.Addr().String(), "tcp://"+pub.ReplayAddr().String(), func(int) {
		_, err := pub.Publish() // a heartbeat
		require.NoError(t, err)
	})

	k := newKVEventSink(1, nil, nil)
	for h := uint64(1); h <= 3; h++ { // 1 fills the queue, 2 and 3 are dropped
		k.Evicted(h)
		k.flush()
	}
	p := startKVEventPublisher(k, pub, zap.NewNop())
	defer func() { require.NoError(t, p.Stop()) }()
	waitUntil(t, "the queued batch published", func() bool { return k.stats.publishedBatches.Load() == 1 })
	k.Evicted(4)
	k.flush()
	waitUntil(t, "the batch after the drops", func() bool { return rec.removed()[4] })

	require.Equal(t, map[uint64]bool{1: true, 4: true}, rec.removed())
	require.False(t, rec.cleared(), "no AllBlocksCleared: the cache was not cleared")
	rec.mu.Lock()
	require.Equal(t, []kvevents.ResetReason{kvevents.ResetGap}, rec.resets)
	rec.mu.Unlock()
	require.Equal(t, uint64(1), sub.Stats().Gaps)
}
