package tests

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// indexed returns the blocks the router's view of worker id holds.
func (d *deployment) indexed(t *testing.T, id string) int {
	for _, w := range d.cluster(t).Workers {
		if w.ID == id {
			return w.IndexedBlocks
		}
	}
	t.Fatalf("no worker %s", id)
	return 0
}

// signals returns each worker's cache signal by ID.
func (d *deployment) signals(t *testing.T) map[string]string {
	out := map[string]string{}
	for _, w := range d.cluster(t).Workers {
		out[w.ID] = w.CacheSignal
	}
	return out
}

// waitForEvents waits until the router reads every worker's cache from its
// KV events.
func (d *deployment) waitForEvents(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, s := range d.signals(t) {
			if s != "events" {
				return false
			}
		}
		return true
	}, 20*time.Second, 50*time.Millisecond)
}

// cachedTokensError returns how many requests the router expected cached
// tokens for, and how many of them the ctx worker reported exactly that
// many of (duet_router_cached_tokens_error).
func (d *deployment) cachedTokensError(t *testing.T) (count, exact float64) {
	var le0, leMinus1 float64
	require.NoError(t, scrape(d.url+"/metrics", func(name, labels string, v float64) {
		switch {
		case name == "duet_router_cached_tokens_error_count":
			count = v
		case name == "duet_router_cached_tokens_error_bucket" && labels == `le="0"`:
			le0 = v
		case name == "duet_router_cached_tokens_error_bucket" && labels == `le="-1"`:
			leMinus1 = v
		}
	}))
	return count, le0 - leMinus1
}

// Live, over sims that publish vLLM-format KV events: the router indexes
// every worker's events, and for every request it expected cached tokens
// for, the ctx worker reported exactly that many.
func TestKVEventsMakeTheIndexExact(t *testing.T) {
	d := startServe(t, serveOptions{policy: "conversation", nCtx: 2, nGen: 2, kvEvents: true})
	d.waitForEvents(t)
	for s := 0; s < 3; s++ {
		msgs := []message{{"system", systemPrompt}}
		for turn := 0; turn < 4; turn++ {
			msgs = append(msgs, message{"user", fmt.Sprintf("Conversation %d, question %d: describe lake number %d.", s, turn, 3*turn+s)})
			before := map[string]int{"ctx-0": d.indexed(t, "ctx-0"), "ctx-1": d.indexed(t, "ctx-1")}
			got := converse(t, d, msgs) // no id: the index finds the conversation
			// The next turn is sent once the turn's stored blocks reached the
			// router (a user takes longer than a millisecond to answer).
			require.Eventually(t, func() bool { return d.indexed(t, got.ctx) > before[got.ctx] }, 10*time.Second, 5*time.Millisecond)
			require.Equal(t, http.StatusOK, got.status)
			if turn > 0 {
				require.Equal(t, "cached", got.route, "conversation %d turn %d", s, turn)
				require.Greater(t, got.usage.cached(), got.usage.PromptTokens/2, "conversation %d turn %d", s, turn)
			}
			msgs = append(msgs, message{"assistant", got.reply})
		}
	}
	count, exact := d.cachedTokensError(t)
	require.GreaterOrEqual(t, count, 9.0, "every continuation expected its prefix cached")
	require.Equal(t, count, exact, "the ctx worker reported exactly what the events said it held")
	for id, s := range d.signals(t) {
		require.Equal(t, "events", s, id)
	}
	d.requireIdle(t)
}

// workerURL returns the URL of worker id.
func (d *deployment) workerURL(t *testing.T, id string) string {
	for _, w := range d.cluster(t).Workers {
		if w.ID == id {
			return w.URL
		}
	}
	t.Fatalf("no worker %s", id)
	return ""
}

// signalOf returns worker id's cache signal and its reason.
func (d *deployment) signalOf(t *testing.T, id string) (string, string) {
	for _, w := range d.cluster(t).Workers {
		if w.ID == id {
			return w.CacheSignal, w.SignalReason
		}
	}
	t.Fatalf("no worker %s", id)
	return "", ""
}

// conversation sends turns of one conversation (no session id) until
// done(turn) says stop or max turns were sent, and returns them.
func conversation(t *testing.T, d *deployment, topic string, max int, done func(chatTurn) bool) []chatTurn {
	t.Helper()
	msgs := []message{{"system", systemPrompt}}
	var out []chatTurn
	for i := 0; i < max; i++ {
		msgs = append(msgs, message{"user", fmt.Sprintf("About %s, question %d: tell me more, with examples.", topic, i)})
		got := converse(t, d, msgs)
		require.Equal(t, http.StatusOK, got.status, "%s turn %d", topic, i)
		out = append(out, got)
		msgs = append(msgs, message{"assistant", got.reply})
		if done != nil && done(got) {
			break
		}
	}
	return out
}

// requireFallsBackThenReuses sends continuations until worker ctx-0's
// signal is fallback (within max turns), then checks that its next
// continuations still reuse its cache: the estimate took over.
func requireFallsBackThenReuses(t *testing.T, d *deployment, topic string, max int) string {
	t.Helper()
	turns := conversation(t, d, topic, max, func(chatTurn) bool { s, _ := d.signalOf(t, "ctx-0"); return s == "fallback" })
	state, why := d.signalOf(t, "ctx-0")
	require.Equal(t, "fallback", state, "after %d turns", len(turns))
	after := conversation(t, d, topic+" again", 3, nil)
	for i, turn := range after[1:] {
		require.Greater(t, turn.usage.cached(), turn.usage.PromptTokens/2, "turn %d after the fallback reuses the cache: %+v", i+1, turn.usage)
	}
	d.requireIdle(t)
	return why
}

// A worker whose event stream goes silent (its publisher hung) is caught:
// its continuations report cached tokens its events never stored.
func TestWatchdogCatchesADeadEventStream(t *testing.T) {
	d := startServe(t, serveOptions{policy: "conversation", nCtx: 1, nGen: 2, kvEvents: true})
	require.Eventually(t, func() bool { s, _ := d.signalOf(t, "ctx-0"); return s == "events" }, 20*time.Second, 50*time.Millisecond)
	conversation(t, d, "warm-up", 2, nil)
	code, _, body := post(t, d.workerURL(t, "ctx-0")+"/admin/faults", `{"kv_events_paused":true}`)
	require.Equal(t, http.StatusOK, code, string(body))
	why := requireFallsBackThenReuses(t, d, "rivers", 8)
	require.Contains(t, why, "disagree")
}

// An engine whose cache was emptied without an event is caught: its events
// still claim the blocks of the conversations it served, and continuing
// them it reports none.
func TestWatchdogCatchesASilentCacheReset(t *testing.T) {
	d := startServe(t, serveOptions{policy: "conversation", nCtx: 1, nGen: 2, kvEvents: true})
	require.Eventually(t, func() bool { s, _ := d.signalOf(t, "ctx-0"); return s == "events" }, 20*time.Second, 50*time.Millisecond)
	chats := make([][]message, 4)
	turn := func(c, i int) chatTurn {
		if chats[c] == nil {
			chats[c] = []message{{"system", systemPrompt}}
		}
		chats[c] = append(chats[c], message{"user", fmt.Sprintf("Conversation %d, question %d: tell me more, with examples.", c, i)})
		got := converse(t, d, chats[c])
		require.Equal(t, http.StatusOK, got.status)
		chats[c] = append(chats[c], message{"assistant", got.reply})
		return got
	}
	for c := range chats {
		turn(c, 0)
		turn(c, 1)
	}
	code, _, body := post(t, d.workerURL(t, "ctx-0")+"/admin/faults", `{"reset_cache_silently":true}`)
	require.Equal(t, http.StatusOK, code, string(body))
	for c := range chats {
		turn(c, 2)
		if s, _ := d.signalOf(t, "ctx-0"); s == "fallback" {
			break
		}
	}
	state, why := d.signalOf(t, "ctx-0")
	require.Equal(t, "fallback", state)
	require.Contains(t, why, "disagree")
	after := conversation(t, d, "lakes", 3, nil)
	for i, turn := range after[1:] {
		require.Greater(t, turn.usage.cached(), turn.usage.PromptTokens/2, "turn %d after the fallback reuses the cache", i+1)
	}
	d.requireIdle(t)
}

// A worker whose KV blocks cannot be named by duet's (48 tokens against
// tokens_per_block 32: neither divides the other) is caught, from the size
// it reports or its first event, and said so.
func TestWatchdogCatchesABlockSizeMismatch(t *testing.T) {
	d := startServe(t, serveOptions{policy: "conversation", nCtx: 1, nGen: 2, kvEvents: true, simArgs: `, "--block-size", "48"`})
	i := 0
	require.Eventually(t, func() bool { // traffic until the worker's size or first event is read
		conversation(t, d, fmt.Sprint("warm-up ", i), 1, nil)
		i++
		s, _ := d.signalOf(t, "ctx-0")
		return s == "fallback"
	}, 20*time.Second, 10*time.Millisecond)
	_, why := d.signalOf(t, "ctx-0")
	require.Equal(t, "its KV block size is 48 tokens, router.tokens_per_block is 32", why)
	turns := conversation(t, d, "deserts", 3, nil)
	for i, turn := range turns[1:] {
		require.Greater(t, turn.usage.cached(), turn.usage.PromptTokens/2, "turn %d reuses the cache through the estimate", i+1)
	}
	d.requireIdle(t)
}

// Engine blocks finer than duet's (vLLM's 16 tokens against 32) are indexed:
// two make one of duet's.
func TestKVEventsOfFinerBlocksAreIndexed(t *testing.T) {
	d := startServe(t, serveOptions{policy: "conversation", nCtx: 2, nGen: 2, kvEvents: true, simArgs: `, "--block-size", "16"`})
	msgs := []message{{"system", systemPrompt}}
	var first chatTurn
	for i := 0; i < 3; i++ {
		msgs = append(msgs, message{"user", fmt.Sprintf("Finer blocks, question %d: tell me more.", i)})
		before := map[string]int{"ctx-0": d.indexed(t, "ctx-0"), "ctx-1": d.indexed(t, "ctx-1")}
		got := converse(t, d, msgs)
		require.Equal(t, http.StatusOK, got.status)
		msgs = append(msgs, message{"assistant", got.reply})
		require.Eventually(t, func() bool { return d.indexed(t, got.ctx) > before[got.ctx] }, 10*time.Second, 5*time.Millisecond)
		if i == 0 {
			first = got
			continue
		}
		require.Equal(t, "cached", got.route, "turn %d", i)
		require.Equal(t, first.ctx, got.ctx, "turn %d", i)
		require.Greater(t, got.usage.cached(), got.usage.PromptTokens/2, "turn %d", i)
	}
	for id, s := range d.signals(t) {
		require.Equal(t, "events", s, id)
	}
	d.requireIdle(t)
}

// Regression: under SGLang's protocol, whose prefill leg runs beside the
// decode leg, the router never learned that the context phase ran, so a
// conversation's next turn did not find its prefill worker's cache.
func TestSGLangContextLegTeachesTheIndex(t *testing.T) {
	d := startServe(t, serveOptions{protocol: "sglang", policy: "conversation", nCtx: 2, nGen: 2})
	for s := 0; s < 2; s++ {
		msgs := []message{{"system", systemPrompt}}
		var first chatTurn
		for i := 0; i < 4; i++ {
			msgs = append(msgs, message{"user", fmt.Sprintf("SGLang topic %d, question %d: tell me more.", s, i)})
			before := map[string]int{"ctx-0": d.indexed(t, "ctx-0"), "ctx-1": d.indexed(t, "ctx-1")}
			got := converse(t, d, msgs)
			require.Equal(t, http.StatusOK, got.status)
			msgs = append(msgs, message{"assistant", got.reply})
			// The prefill leg ends on its own, possibly after the decode
			// answer: the router learns the prompt when it does.
			require.Eventually(t, func() bool { return d.indexed(t, got.ctx) > before[got.ctx] }, 10*time.Second, 5*time.Millisecond,
				"topic %d turn %d: the router learns the context phase ran", s, i)
			if i == 0 {
				first = got
				continue
			}
			require.Equal(t, "cached", got.route, "topic %d turn %d", s, i)
			require.Equal(t, first.ctx, got.ctx, "topic %d turn %d goes back to its prefill worker", s, i)
		}
	}
	d.requireIdle(t)
}

// Regression: a worker whose KV block size differed from
// router.tokens_per_block was admitted without notice. Read from the size
// it reports, the mismatch is said without any event.
func TestBlockSizeMismatchIsReportedWithoutEvents(t *testing.T) {
	d := startServe(t, serveOptions{policy: "conversation", nCtx: 1, nGen: 1, simArgs: `, "--block-size", "16"`})
	want := "its KV block size is 16 tokens, router.tokens_per_block is 32"
	require.Eventually(t, func() bool {
		conversation(t, d, "warm-up", 1, nil) // the router sizes its index when it routes
		s, why := d.signalOf(t, "ctx-0")
		return s == "estimate" && why == want
	}, 20*time.Second, 20*time.Millisecond)
	for _, w := range d.cluster(t).Workers {
		require.Equal(t, 16, w.KVBlockSize, w.ID)
	}
	require.Contains(t, d.proc.output(), "worker's KV blocks are finer than router.tokens_per_block")
}
